"""Every endpoint's authorization: no key, a bad key, the wrong scope, another customer."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ._shared import module_service
from .conftest import Service

# (method, path, the scope it needs, whether it names a customer)
ENDPOINTS = [
    ("GET", "/v1/customers", "read", False),
    ("GET", "/v1/banks", "read", False),
    ("POST", "/v1/customers", "admin", False),
    ("GET", "/v1/customers/cust-1", "read", True),
    ("POST", "/v1/customers/cust-1/accesses", "admin", True),
    ("POST", "/v1/customers/cust-1/accesses/1/otp", "refresh", True),
    ("DELETE", "/v1/customers/cust-1/accesses/1", "admin", True),
    ("PATCH", "/v1/customers/cust-1/accesses/1", "admin", True),
    ("PATCH", "/v1/customers/cust-1", "admin", True),
    ("DELETE", "/v1/customers/cust-1", "admin", True),
    ("GET", "/v1/customers/cust-1/status", "read", True),
    ("GET", "/v1/customers/cust-1/accounts", "read", True),
    ("GET", "/v1/customers/cust-1/movements", "read", True),
    ("GET", "/v1/customers/cust-1/movements/export", "read", True),
    ("GET", "/v1/customers/cust-1/sync", "read", True),
    ("GET", "/v1/schedule", "read", False),
    ("POST", "/v1/customers/cust-1/refresh", "refresh", True),
    ("GET", "/v1/jobs", "read", False),
    ("GET", "/v1/jobs/0000000000000000000000000000", "read", False),
    # a refresh needs 'refresh', any other job 'jobs': the row checks the 'jobs' side
    ("POST", "/v1/jobs/0000000000000000000000000000/cancel", "jobs", False),
    ("POST", "/v1/jobs", "jobs", False),
    ("GET", "/v1/jobs/0000000000000000000000000000/results", "read", False),
    ("GET", "/v1/customers/cust-1/events", "read", True),
    ("GET", "/v1/jobs/0000000000000000000000000000/events", "read", False),
    ("POST", "/v1/webhooks", "read", False),
    ("GET", "/v1/webhooks", "read", False),
    ("GET", "/v1/webhooks/wh_0000000000000000", "read", False),
    ("DELETE", "/v1/webhooks/wh_0000000000000000", "read", False),
    ("GET", "/v1/webhooks/wh_0000000000000000/deliveries", "read", False),
    ("GET", "/v1/keys", "admin", False),
    ("POST", "/v1/keys", "admin", False),
    ("GET", "/v1/keys/000000000000", "admin", False),
    ("DELETE", "/v1/keys/000000000000", "admin", False),
    ("POST", "/v1/keys/000000000000/rotate", "admin", False),
    ("GET", "/metrics", "metrics", False),
    ("GET", "/v1/stats", "metrics", False),
]


def status_of(client: httpx.Client, method: str, path: str) -> int:
    """The status of a request, without reading an endless event stream's body."""
    with client.stream(method, path) as response:
        return response.status_code


def problem(response: httpx.Response, status: int, type: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["type"] == type
    assert body["detail"]


def test_the_table_covers_every_endpoint_of_the_api(matrix_service: Service) -> None:
    spec = httpx.get(f"{matrix_service.url}/openapi.json").json()
    routes = {
        (method.upper(), path)
        for path, methods in spec["paths"].items()
        for method in methods
        if path not in ("/healthz", "/readyz")
    }
    covered = {
        (
            m,
            p.replace("cust-1", "{customer}")
            .replace("0" * 28, "{job_id}")
            .replace("/accesses/1", "/accesses/{access_id}")
            .replace("wh_" + "0" * 16, "{webhook_id}")
            .replace("/v1/keys/" + "0" * 12, "/v1/keys/{key_id}"),
        )
        for m, p, _, _ in ENDPOINTS
    }
    assert routes == covered


@pytest.fixture(scope="module")
def matrix_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for every row of the matrix (a service takes seconds to start; the rows
    only read what they are allowed, and what they change is theirs to change)."""
    with module_service(tmp_path_factory.mktemp("matrix"), customers=[1, 2, 3]) as running:
        yield running


@pytest.mark.parametrize(("method", "path", "scope", "per_customer"), ENDPOINTS)
def test_authorization_matrix(
    matrix_service: Service, method: str, path: str, scope: str, per_customer: bool
) -> None:
    service = matrix_service
    # Each row fails six times, from an address of its own (127.0.0.0/8 is all loopback):
    # from one, the rows together would pass the ten failures an address may make.
    row = ENDPOINTS.index((method, path, scope, per_customer))
    transport = httpx.HTTPTransport(local_address=f"127.0.{row // 200 + 1}.{row % 200 + 2}")
    with httpx.Client(base_url=service.url, transport=transport, timeout=30) as stranger:
        missing = stranger.request(method, path)
        problem(missing, 401, "unauthenticated")
        assert missing.headers["www-authenticate"].startswith("Bearer")
        bad_headers = (
            "Bearer nope",
            "Bearer sf_000000000000_wrong",
            "Basic dXNlcjpwYXNz",
            "Bearer",
        )
        for bad in bad_headers:
            problem(
                stranger.request(method, path, headers={"Authorization": bad}),
                401,
                "unauthenticated",
            )
        forged = service.key("admin")[:-3] + "abc"  # a real key id, a wrong secret
        problem(
            stranger.request(method, path, headers={"Authorization": f"Bearer {forged}"}),
            401,
            "unauthenticated",
        )

    other_scope = "jobs" if scope != "jobs" else "read"
    with service.client(other_scope) as wrong:
        problem(wrong.request(method, path), 403, "forbidden")
    with service.client(scope) as right:
        assert status_of(right, method, path) not in (401, 403)
    with service.client("admin") as admin:
        assert status_of(admin, method, path) not in (401, 403)
    if per_customer:
        with service.client(scope, customer="cust-2") as elsewhere:
            problem(elsewhere.request(method, path), 403, "forbidden")
        with service.client(scope, customer="cust-1") as own:
            assert status_of(own, method, path) not in (401, 403)


def test_health_needs_no_key(service: Service) -> None:
    assert httpx.get(f"{service.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{service.url}/readyz").json() == {"status": "ready"}


def test_repeated_failures_from_one_address_are_slowed_down(service: Service) -> None:
    url = f"{service.url}/v1/jobs"
    for _ in range(10):
        problem(httpx.get(url, headers={"Authorization": "Bearer guess"}), 401, "unauthenticated")
    blocked = httpx.get(url, headers={"Authorization": "Bearer guess"})
    problem(blocked, 429, "too-many-failed-attempts")
    assert int(blocked.headers["retry-after"]) >= 1
    # failures slow down failures only: a valid key from the same address (a proxy's other
    # clients) is let through (the secrets are 256 random bits: nobody guesses one)
    with service.client("read") as right:
        assert right.get("/v1/jobs").status_code == 200


def test_guessing_from_many_addresses_is_answered_slowly_and_a_valid_key_is_not(
    service: Service,
) -> None:
    """Past 50 failed attempts in a second from every address together (bad keys from rotating
    addresses: the per-address bound never trips), each further failure's answer is held a
    second; a valid key sent at the same moment is answered first."""
    host, port = service.url.removeprefix("http://").rsplit(":", 1)
    valid = service.key("read")

    async def attempt(token: str, source: str) -> tuple[int, float]:
        started = time.monotonic()
        reader, writer = await asyncio.open_connection(host, int(port), local_addr=(source, 0))
        try:
            writer.write(
                f"GET /v1/jobs HTTP/1.1\r\nHost: s\r\nConnection: close\r\n"
                f"Authorization: Bearer {token}\r\n\r\n".encode()
            )
            status = int((await reader.readline()).split()[1])
        finally:  # a guess still held when the test ends is cancelled: its socket closed too
            writer.close()
        return status, time.monotonic() - started

    async def guessing(answers: list[tuple[int, float]]) -> None:
        """Bad keys from rotating addresses, 50 every 0.25 s (200 a second), not waiting for
        their answers (held answers must not slow the guessing down), without end."""
        running: set[asyncio.Task[None]] = set()

        async def one(wave: int, n: int) -> None:
            source = f"127.{1 + wave % 250}.{wave // 250}.{1 + n}"
            answers.append(await attempt(f"sf_{wave:06x}{n:06x}_bad", source))

        try:
            for wave in itertools.count():
                for n in range(50):
                    task = asyncio.create_task(one(wave, n))
                    running.add(task)
                    task.add_done_callback(running.discard)
                await asyncio.sleep(0.25)
        finally:
            for task in list(running):
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def scenario() -> None:
        answers: list[tuple[int, float]] = []
        guesser = asyncio.ensure_future(guessing(answers))
        try:
            async with asyncio.timeout(30):  # until answers are held: failures are busy
                while not any(took >= 0.9 for _, took in answers):
                    await asyncio.sleep(0.05)
            bad = asyncio.ensure_future(attempt("sf_ffffffffffff_bad", "127.0.9.9"))
            good = asyncio.ensure_future(attempt(valid, "127.0.9.9"))  # the same address
            done, _ = await asyncio.wait({bad, good}, return_when=asyncio.FIRST_COMPLETED)
            assert done == {good} and good.result()[0] == 200
            status, took = await bad
            assert status == 401 and took >= 0.9
        finally:
            guesser.cancel()
            await asyncio.gather(guesser, return_exceptions=True)
        assert {status for status, _ in answers} == {401}  # each address failed once

    asyncio.run(scenario())


def test_a_restricted_key_sees_only_its_customers_refreshes(service: Service) -> None:
    with service.client("refresh", "read") as admin:
        mine = admin.post("/v1/customers/cust-1/refresh").json()
        theirs = admin.post("/v1/customers/cust-3/refresh").json()
    with service.client("read", "refresh", customer="cust-1") as own:
        listed = {job["id"] for job in own.get("/v1/jobs").json()["jobs"]}
        assert mine["id"] in listed
        assert theirs["id"] not in listed
        problem(own.get(f"/v1/jobs/{theirs['id']}"), 404, "job-not-found")
        problem(own.post(f"/v1/jobs/{theirs['id']}/cancel"), 404, "job-not-found")
        assert own.get(f"/v1/jobs/{mine['id']}").status_code == 200


def test_a_restricted_key_reads_nothing_counted_over_every_customer(service: Service) -> None:
    # An admin key restricted to a customer has the metrics scope, but not over the others.
    with service.client("admin", customer="cust-1") as restricted:
        for path in ("/metrics", "/v1/stats"):
            refused = restricted.get(path)
            problem(refused, 403, "forbidden")
            assert "every customer" in refused.json()["detail"]
        assert restricted.get("/v1/customers/cust-1").status_code == 200  # its own: yes
    with service.client("read", customer="cust-1") as reader:
        problem(reader.get("/v1/schedule"), 403, "forbidden")
    with service.client("read") as reader, service.client("metrics") as watcher:
        assert reader.get("/v1/schedule").status_code == 200
        assert watcher.get("/v1/stats").status_code == 200


def test_an_operator_creates_a_key_with_the_cli_and_it_works(service: Service) -> None:
    import subprocess
    import sys

    made = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "keys", "create", "--scope", "read"],
        env=service.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    key = made.stdout.split()[-1]  # printed once, as the last word
    assert key.startswith("sf_")
    listed = httpx.get(f"{service.url}/v1/jobs", headers={"Authorization": f"Bearer {key}"})
    assert listed.status_code == 200
    stored = Path(service.db_url.removeprefix("sqlite+aiosqlite:///")).read_bytes()
    # sf_<id>_<secret>: the whole secret, which may itself hold "_" (its last piece alone can be
    # one letter, found anywhere in the file)
    secret = key.split("_", 2)[2]
    assert secret.encode() not in stored  # only its hash is kept
    bad = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "keys", "create", "--scope", "root"],
        env=service.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "error: unknown scope 'root' (scopes: read, refresh, jobs, metrics, admin)"
    )
    command = ["keys", "create", "--scope", "metrics", "--customer", "cust-1"]
    restricted = subprocess.run(
        [sys.executable, "-m", "scrapeflow", *command],
        env=service.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert restricted.returncode == 2
    assert restricted.stderr.strip() == (
        "error: the metrics scope covers every customer: "
        "a key restricted to customers cannot have it"
    )
    assert "sf_" not in restricted.stdout
