"""``POST /v1/jobs`` (``fetch``, ``run``), results and cancel, against a real ``scrapeflow serve``
fetching from a plain site on loopback. Where a job writes is the service's choice: the tests
point ``jobs_dir`` and ``jobs_store`` into their tmp_path and look there. The jobs run on each
job backend: in the service, or in a worker process with the same settings."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from scrapeflow.sandbox import Sandbox
from scrapeflow.statusdb import SqlStatusStore
from tests._servers import RunningSite

from .conftest import Service, running_service, service_database

CANCEL_BOUND = 2.5  # the 2 s documented, and half a second for a loaded machine
JOB_BOUND = 60.0
PLUGIN = """
from scrapeflow.executor import taskify


@taskify
async def title(context, key, status):
    http = context.http
    response = await http.request("GET", status["params"]["url"], session=http.pooled_session())
    return {"title": response.text().split("<title>", 1)[1].split("</title>", 1)[0]}
"""


@contextmanager
def jobs_service(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, backend: str
) -> Iterator[Service]:
    """The service (and, on procrastinate, its worker) with its jobs' directory and store in
    tmp_path, customer cust-1, and a deployment's executor (``title``) installed as an entry
    point on its path."""
    plugins = tmp_path / "plugins"
    info = plugins / "sfjobs_title-1.0.dist-info"
    info.mkdir(parents=True)
    (plugins / "sfjobs_title.py").write_text(textwrap.dedent(PLUGIN))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sfjobs-title\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[scrapeflow.executors]\ntitle = sfjobs_title:title\n")
    env = {
        "SCRAPEFLOW_JOBS_DIR": str(tmp_path / "jobs"),
        "SCRAPEFLOW_JOBS_STORE": str(tmp_path / "store"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])),
    }
    db_url = service_database(request, tmp_path, backend)
    with running_service(
        tmp_path, sandbox, db_url, customers=[1], backend=backend, env=env
    ) as running:
        yield running


@pytest.fixture
def service(request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox) -> Iterator[Service]:
    """The jobs' service on the embedded backend: for what does not depend on who runs jobs."""
    with jobs_service(request, tmp_path, sandbox, "embedded") as running:
        yield running


@pytest.fixture
def job_service(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, job_backend: str
) -> Iterator[Service]:
    """The jobs' service on each job backend: on procrastinate a worker process runs the
    ``fetch`` and ``run`` jobs, writing where the service reads (the same settings)."""
    with jobs_service(request, tmp_path, sandbox, job_backend) as running:
        yield running


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A server that takes connections and never answers (the kernel completes them; nobody
    accepts): a fetch from it hangs until cancelled, and nothing of it outlives the test."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def wait_ended(client: httpx.Client, job_id: str, seconds: float = JOB_BOUND) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {job['state']} after {seconds} s: {job}")


def all_results(client: httpx.Client, job_id: str, limit: int = 100) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(1_000):
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        page = client.get(f"/v1/jobs/{job_id}/results", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["items"]) <= limit
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("results never ended")


def stored_status(service: Service, tmp_path: Path, job_id: str, key: str) -> dict[str, Any]:
    """A run job's task status where the service chose to keep it: a file in one directory
    per job under jobs_dir (embedded), or the service's database, one namespace per job
    (procrastinate: the job may run again on another machine)."""
    if service.backend == "embedded":
        path = tmp_path / "jobs" / "run" / job_id / f"{key}.status.json"
        found: dict[str, Any] = json.loads(path.read_text())
        return found

    async def load() -> dict[str, Any] | None:
        async with SqlStatusStore(service.db_url, namespace=job_id) as store:
            return await store.load(key)

    loaded = asyncio.run(load())
    assert loaded is not None, f"no status of task {key!r} for job {job_id}"
    return loaded


def problem(response: httpx.Response, status: int, type: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == type
    return body


def test_a_fetch_job_stores_every_url_under_the_sha384_of_its_bytes(
    job_service: Service, plain_site: RunningSite, tmp_path: Path
) -> None:
    urls = [plain_site.page_url(n) for n in range(12)] + [f"{plain_site.url}/status/404"]
    served = {url: httpx.get(url).content for url in urls[:-1]}
    with job_service.client("jobs", "read") as client:
        created = client.post(
            "/v1/jobs", json={"kind": "fetch", "params": {"urls": urls, "concurrency": 4}}
        )
        assert created.status_code == 202, created.text
        job = created.json()
        assert created.headers["location"] == f"/v1/jobs/{job['id']}"
        assert job["kind"] == "fetch"
        assert job["state"] in ("queued", "running")

        done = wait_ended(client, job["id"])
        assert done["state"] == "succeeded", done
        assert done["progress"] == {"done": 13, "total": 13, "stored": 12, "failed": 1}
        assert done["result"]["urls"] == 13
        assert done["result"]["failed"] == 1
        assert done["result"]["bytes"] == sum(len(body) for body in served.values())

        items = all_results(client, job["id"], limit=5)  # three pages
    assert [item["url"] for item in items] == urls
    assert [item["index"] for item in items] == list(range(13))
    for item in items[:-1]:
        body = served[item["url"]]
        assert item["outcome"] == "stored"
        assert item["status"] == 200
        assert item["sha384"] == hashlib.sha384(body).hexdigest()
        assert item["size"] == len(body)
        blob = tmp_path / "store" / "gofetch" / "sha384_content" / item["sha384"]
        assert hashlib.sha384(blob.read_bytes()).hexdigest() == item["sha384"]
    assert items[-1]["outcome"] == "failed"
    assert items[-1]["status"] == 404
    assert items[-1]["sha384"] is None


def test_a_run_job_runs_registered_executors_by_name(
    job_service: Service, plain_site: RunningSite, tmp_path: Path
) -> None:
    pages = [3, 4, 5]
    tasks: list[Any] = [plain_site.page_url(n) for n in pages[:2]]
    tasks.append({"key": "five", "params": {"url": plain_site.page_url(5)}})
    with job_service.client("jobs", "read") as client:
        created = client.post(
            "/v1/jobs",
            json={"kind": "run", "params": {"tasks": tasks, "executors": ["scrape", "title"]}},
        )
        assert created.status_code == 202, created.text
        job = wait_ended(client, created.json()["id"])
        assert job["state"] == "succeeded", job
        assert job["result"] == {
            "tasks": 3,
            "succeeded": 3,
            "skipped": 0,
            "failed": 0,
            "executors": ["scrape", "title"],
        }
        assert job["progress"]["done"] == 3
        items = all_results(client, job["id"], limit=2)
    assert [item["key"] for item in items] == [
        hashlib.md5(tasks[0].encode()).hexdigest(),
        hashlib.md5(tasks[1].encode()).hexdigest(),
        "five",
    ]
    for item, n in zip(items, pages, strict=True):
        assert item["state"] == "succeeded"
        assert item["url"] == plain_site.page_url(n)
        assert item["executors"]["scrape"]["status"] == "SUCCESS"
        assert item["executors"]["scrape"]["output"]["http_status"] == 200
        assert item["executors"]["title"]["output"] == {"title": plain_site.site.page_title(n)}
        status = stored_status(job_service, tmp_path, job["id"], item["key"])
        assert status["title_status"] == "SUCCESS"


BAD_BODIES = [
    pytest.param(
        {"kind": "run", "params": {"tasks": ["http://127.0.0.1/"], "executors": ["nope"]}},
        "unknown executor 'nope'",
        id="unknown-executor",
    ),
    pytest.param(
        {"kind": "run", "params": {"tasks": ["http://127.0.0.1/"], "executors": ["os.system"]}},
        "unknown executor 'os.system'",
        id="import-path",
    ),
    pytest.param(
        {
            "kind": "run",
            "params": {"tasks": ["http://127.0.0.1/"], "executors": ["scrapeflow.scrape:scrape"]},
        },
        "unknown executor 'scrapeflow.scrape:scrape'",
        id="import-path-with-attribute",
    ),
    pytest.param(
        {"kind": "run", "params": {"tasks": ["http://127.0.0.1/"], "executors": ["/bin/sh"]}},
        "unknown executor '/bin/sh'",
        id="file-path-executor",
    ),
    pytest.param(
        {"kind": "run", "params": {"tasks": [{"key": "../../etc/x", "params": {}}]}},
        "cannot be a file name",
        id="task-key-path",
    ),
    pytest.param(
        {"kind": "run", "params": {"tasks": ["http://127.0.0.1/"], "directory": "/tmp/x"}},
        "Extra inputs are not permitted",
        id="output-directory",
    ),
    pytest.param(
        {"kind": "fetch", "params": {"urls": ["http://127.0.0.1/"], "store": "/tmp/x"}},
        "Extra inputs are not permitted",
        id="store-path",
    ),
    pytest.param(
        {"kind": "fetch", "params": {"urls": ["file:///etc/passwd"]}},
        "not an http(s) URL",
        id="file-url",
    ),
    pytest.param(
        {"kind": "fetch", "params": {"urls": [f"http://127.0.0.1/{n}" for n in range(10_001)]}},
        "at most 10000 items",
        id="too-many-urls",
    ),
    pytest.param({"kind": "fetch", "params": {"urls": []}}, "at least 1 item", id="no-urls"),
    pytest.param(
        {"kind": "fetch", "params": {"urls": "http://127.0.0.1/"}},
        "valid list",
        id="urls-not-a-list",
    ),
    pytest.param(
        {"kind": "fetch", "params": {"urls": ["http://127.0.0.1/"], "concurrency": "8"}},
        "valid integer",
        id="concurrency-a-string",
    ),
    pytest.param(
        {"kind": "fetch", "params": {"urls": ["http://127.0.0.1/"], "per_host": 10_000}},
        "less than or equal to 64",
        id="per-host-too-high",
    ),
    pytest.param(
        {"kind": "bank.refresh", "params": {"customer": "cust-1"}},
        "/v1/customers/{customer}/refresh",
        id="bank-refresh",
    ),
    pytest.param({"kind": "spider", "params": {}}, "'fetch', 'run', 'crawl'", id="unknown-kind"),
    pytest.param({"params": {}}, "kind", id="no-kind"),
    pytest.param([1, 2], "object", id="not-an-object"),
]


def test_a_bad_job_is_refused_with_a_problem_and_nothing_is_created(service: Service) -> None:
    with service.client("jobs", "read") as client:
        for case in BAD_BODIES:  # one service for them all: a start costs seconds
            body, said = case.values
            refused = problem(client.post("/v1/jobs", json=body), 422, "invalid-request")
            assert said in refused["detail"], (case.id, refused)
        assert client.get("/v1/jobs").json()["jobs"] == []


def test_malformed_json_and_a_restricted_key_create_nothing(service: Service) -> None:
    body = {"kind": "fetch", "params": {"urls": ["http://127.0.0.1/"]}}
    with service.client("jobs", "read") as client:
        malformed = client.post(
            "/v1/jobs",
            content=b'{"kind": "fetch", "params": {',
            headers={"content-type": "application/json"},
        )
        problem(malformed, 422, "malformed-body")
        with service.client("jobs", "read", customer="cust-1") as restricted:
            problem(restricted.post("/v1/jobs", json=body), 403, "forbidden")
        assert client.get("/v1/jobs").json()["jobs"] == []


def test_the_same_idempotency_key_gives_the_same_job(
    job_service: Service, plain_site: RunningSite
) -> None:
    body = {"kind": "fetch", "params": {"urls": [plain_site.page_url(1)]}}
    key = {"Idempotency-Key": "order-7"}
    with job_service.client("jobs", "read") as client:
        first = client.post("/v1/jobs", json=body, headers=key)
        assert first.status_code == 202
        job_id = first.json()["id"]
        again = client.post("/v1/jobs", json=body, headers=key)
        assert again.status_code == 202
        assert again.json()["id"] == job_id  # while it is active: the queue's dedupe
        assert wait_ended(client, job_id)["state"] == "succeeded"
        after = client.post("/v1/jobs", json=body, headers=key)
        assert after.json()["id"] == job_id  # and after it ended
        other = {"kind": "fetch", "params": {"urls": [plain_site.page_url(2)]}}
        problem(client.post("/v1/jobs", json=other, headers=key), 422, "idempotency-key-reused")
        fresh = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "order-8"})
        assert fresh.json()["id"] != job_id
        assert len(client.get("/v1/jobs").json()["jobs"]) == 2
    with job_service.client("jobs", "read", "refresh") as someone_else:  # another API key
        theirs = someone_else.post("/v1/jobs", json=body, headers=key)
        assert theirs.json()["id"] not in (job_id, fresh.json()["id"])


def test_cancelling_a_long_fetch_job_stops_it_and_keeps_what_it_stored(
    job_service: Service, plain_site: RunningSite, black_hole: str, tmp_path: Path
) -> None:
    fast = [plain_site.page_url(n) for n in range(3)]
    slow = [f"{black_hole}/never/{n}" for n in range(40)]
    body = {"kind": "fetch", "params": {"urls": fast + slow, "concurrency": 2}}
    with job_service.client("jobs", "read") as client:
        job = client.post("/v1/jobs", json=body).json()
        deadline = time.monotonic() + JOB_BOUND
        while client.get(f"/v1/jobs/{job['id']}").json()["progress"].get("stored", 0) < 3:
            assert time.monotonic() < deadline, "the fast pages were never stored"
            time.sleep(0.05)
        running = client.get(f"/v1/jobs/{job['id']}/results", params={"limit": 5}).json()
        assert running["state"] == "running"
        assert [i["outcome"] for i in running["items"]] == ["stored"] * 3 + ["pending"] * 2

        started = time.monotonic()
        cancelled = client.post(f"/v1/jobs/{job['id']}/cancel")
        assert cancelled.status_code == 200
        while client.get(f"/v1/jobs/{job['id']}").json()["state"] != "cancelled":
            assert time.monotonic() - started < CANCEL_BOUND, "not cancelled in time"
            time.sleep(0.05)
        assert time.monotonic() - started < CANCEL_BOUND

        items = all_results(client, job["id"], limit=100)
    assert len(items) == 43
    for item in items[:3]:
        assert item["outcome"] == "stored"
        blob = tmp_path / "store" / "gofetch" / "sha384_content" / item["sha384"]
        assert blob.stat().st_size == item["size"]
    assert {item["outcome"] for item in items[3:]} == {"not_fetched"}


def test_a_bank_refresh_job_lists_its_accesses_as_results(job_service: Service) -> None:
    with job_service.client("refresh", "read") as client:
        job = client.post("/v1/customers/cust-1/refresh").json()
        done = wait_ended(client, job["id"])
        assert done["state"] == "succeeded", done
        first = client.get(f"/v1/jobs/{job['id']}/results", params={"limit": 2}).json()
        assert first["kind"] == "bank.refresh"
        assert len(first["items"]) == 2
        rest = client.get(
            f"/v1/jobs/{job['id']}/results", params={"cursor": first["next_cursor"]}
        ).json()
        assert rest["next_cursor"] is None
        accesses = first["items"] + rest["items"]
        assert accesses == [
            {k: a[k] for k in ("access_id", "bank", "result", "accounts", "movements")}
            for a in done["result"]["accesses"]
        ]
        assert {a["result"] for a in accesses} == {"success"}
        problem(
            client.get(f"/v1/jobs/{job['id']}/results", params={"cursor": "bm9wZTox"}),
            422,
            "invalid-cursor",
        )
    with job_service.client("read", customer="cust-1") as own:
        assert own.get(f"/v1/jobs/{job['id']}/results").status_code == 200
