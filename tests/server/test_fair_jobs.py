"""Fair use of jobs, against a real ``scrapeflow serve``: a key sees and cancels only its own
fetch and run jobs; listings are summaries, small whatever the jobs' params; URLs are shown
with their secrets as ``***``; an Idempotency-Key is found at once among many jobs; a key has
a quota of active jobs (parts counted) and a bound on shards; a refresh starts at once while
fetch jobs fill their lane."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert

from scrapeflow.db import create_engine
from scrapeflow.jobs import JobState, jobs_table, new_job_id
from scrapeflow.sandbox import PlainSite, Sandbox, SiteConfig, serve_in_thread
from scrapeflow.server._keys import split_token
from tests._servers import RunningSite

from .conftest import Service, running_service, service_database

SLEEP_MS = 3_000.0


@pytest.fixture
def sleepy_site() -> Iterator[RunningSite]:
    """The plain site answering each page after 3 s: a fetch of it keeps its job running."""
    site = PlainSite(SiteConfig(pages=100, latency_ms=(SLEEP_MS, SLEEP_MS)))
    with serve_in_thread(site.app) as url:
        yield RunningSite(site, url)


def problem(answer: httpx.Response, status: int, type: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert body["type"] == type, body
    return body


def fetch(*urls: str, **params: Any) -> dict[str, Any]:
    return {"kind": "fetch", "params": {"urls": list(urls), **params}}


def wait_ended(client: httpx.Client, job_id: str, seconds: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end in {seconds} s")


def test_a_key_sees_and_cancels_only_its_own_jobs_and_urls_hide_their_secrets(
    service: Service, plain_site: RunningSite
) -> None:
    secret_url = plain_site.page_url(1) + "?page=2&token=SECRET-7f3a&api_key=K-99"
    with (
        service.client("jobs", "read") as mine,
        service.client("jobs", "read", "refresh") as other,
        service.client("admin") as admin,
    ):
        created = mine.post("/v1/jobs", json=fetch(secret_url, plain_site.page_url(2)))
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        done = wait_ended(mine, job_id)
        assert done["state"] == "succeeded", done
        assert done["params"]["urls"][0] == (
            plain_site.page_url(1) + "?page=2&token=***&api_key=***"
        )
        listed = mine.get("/v1/jobs").json()["jobs"]
        assert [job["id"] for job in listed] == [job_id]
        assert "params" not in listed[0] and "result" not in listed[0]
        results = mine.get(f"/v1/jobs/{job_id}/results").json()
        assert results["items"][0]["url"].endswith("token=***&api_key=***")
        seen = " ".join(
            answer.text
            for answer in (
                mine.get(f"/v1/jobs/{job_id}"),
                mine.get("/v1/jobs"),
                mine.get(f"/v1/jobs/{job_id}/results"),
                created,
            )
        )
        assert "SECRET-7f3a" not in seen and "K-99" not in seen

        # Another key, not an admin: no such job, as far as it can tell.
        problem(other.get(f"/v1/jobs/{job_id}"), 404, "job-not-found")
        problem(other.post(f"/v1/jobs/{job_id}/cancel"), 404, "job-not-found")
        problem(other.get(f"/v1/jobs/{job_id}/results"), 404, "job-not-found")
        problem(other.get(f"/v1/jobs/{job_id}/events"), 404, "job-not-found")
        assert other.get("/v1/jobs").json()["jobs"] == []
        # ...but a customer's refresh is everyone's to see (its customers'), and the admin's.
        refresh = other.post("/v1/customers/cust-1/refresh").json()
        assert refresh["id"] in {job["id"] for job in mine.get("/v1/jobs").json()["jobs"]}
        every = {job["id"] for job in admin.get("/v1/jobs").json()["jobs"]}
        assert {job_id, refresh["id"]} <= every


async def add_large_jobs(db_url: str, key_id: str, count: int, urls: int) -> None:
    """Ended fetch jobs of about 1 MiB of params each, as the key would have made them over
    time (stored in one transaction: the test is about reading them)."""
    engine = create_engine(db_url)
    tail = "abcdefghijklmnopqrstuvwxyz0123456789" * 2
    try:
        async with engine.begin() as connection:
            for _ in range(count):
                params = {"urls": [f"https://shop.example/{n:08d}?ref={tail}" for n in range(urls)]}
                row = {
                    "id": new_job_id(),
                    "kind": "fetch",
                    "params": params,
                    "state": JobState.SUCCEEDED.value,
                    "progress": {},
                    "result": {"urls": urls},
                    "attempts": 1,
                    "cancel_requested": False,
                    "created_at": datetime.now(UTC),
                    "submitted_by": key_id,
                    "cost": 1,
                }
                await connection.execute(insert(jobs_table).values(**row))
    finally:
        await engine.dispose()


def test_a_listing_of_large_jobs_is_small_and_an_idempotency_key_is_found_at_once(
    service: Service, plain_site: RunningSite
) -> None:
    token = service.key("jobs", "read")
    key_id = (split_token(token) or ("?", ""))[0]
    asyncio.run(add_large_jobs(service.db_url, key_id, 200, 9_500))
    with service.client("jobs", "read") as client:
        listing = client.get("/v1/jobs", params={"limit": 200})
        assert listing.status_code == 200
        assert len(listing.json()["jobs"]) == 200
        assert len(listing.content) < 200_000, len(listing.content)  # 200 MB before
        one = client.get(f"/v1/jobs/{listing.json()['jobs'][0]['id']}")
        assert len(one.content) < 64_000, len(one.content)
        assert one.json()["params"]["urls_total"] == 9_500
        assert len(one.json()["params"]["urls"]) == 20

        body = fetch(plain_site.page_url(3))
        again = {"Idempotency-Key": "order-42"}
        timings, ids = [], []
        for _ in range(3):
            started = time.perf_counter()
            answer = client.post("/v1/jobs", json=body, headers=again)
            timings.append(time.perf_counter() - started)
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        assert len(set(ids)) == 1
        assert max(timings[1:]) < 0.5, timings  # an index, not 200 MB read back


def test_a_key_s_jobs_have_a_quota_and_shards_a_bound(
    tmp_path: Path,
    sandbox: Sandbox,
    sleepy_site: RunningSite,
    request: pytest.FixtureRequest,
) -> None:
    db_url = service_database(request, tmp_path, "embedded")
    limits = {"SCRAPEFLOW_MAX_JOBS_PER_KEY": "3"}
    with (
        running_service(tmp_path, sandbox, db_url, customers=[1], env=limits) as service,
        service.client("jobs", "read") as mine,
        service.client("jobs", "read", "refresh") as other,
        service.client("jobs", "read", "metrics") as third,
    ):
        too_many = fetch(*(sleepy_site.page_url(n) for n in range(20)), shards=17)
        problem(mine.post("/v1/jobs", json=too_many), 422, "invalid-request")
        problem(mine.post("/v1/jobs", json=fetch("http://169.254.169.254/")), 422, "egress-blocked")
        # A job of 3 shards takes 4 places: more than the quota of 3, even with none used.
        split = fetch(*(sleepy_site.page_url(n) for n in range(3)), shards=3)
        problem(third.post("/v1/jobs", json=split), 429, "too-many-jobs")

        held = []
        for n in range(3):
            answer = mine.post("/v1/jobs", json=fetch(sleepy_site.page_url(n)))
            assert answer.status_code == 202, answer.text
            held.append(answer.json()["id"])
        refused = mine.post("/v1/jobs", json=fetch(sleepy_site.page_url(9)))
        problem(refused, 429, "too-many-jobs")
        assert int(refused.headers["retry-after"]) >= 1
        assert other.post("/v1/jobs", json=fetch(sleepy_site.page_url(9))).status_code == 202
        assert mine.post(f"/v1/jobs/{held[0]}/cancel").status_code == 200
        wait_ended(mine, held[0])
        assert mine.post("/v1/jobs", json=fetch(sleepy_site.page_url(8))).status_code == 202
        assert len(mine.get("/v1/jobs").json()["jobs"]) == 4  # the refused made nothing


def test_a_refresh_starts_at_once_while_fetch_jobs_fill_their_lane(
    job_service: Service, sleepy_site: RunningSite
) -> None:
    with job_service.client("jobs", "read", "refresh") as client:
        fetches = []
        for n in range(50):
            answer = client.post("/v1/jobs", json=fetch(sleepy_site.page_url(n)))
            assert answer.status_code == 202, answer.text
            fetches.append(answer.json()["id"])
        refresh = client.post("/v1/customers/cust-1/refresh").json()
        deadline = time.monotonic() + 10
        job = refresh
        while job["started_at"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
            job = client.get(f"/v1/jobs/{refresh['id']}").json()
        assert job["started_at"] is not None, "the refresh waited behind the fetch jobs"
        waited = datetime.fromisoformat(job["started_at"]) - datetime.fromisoformat(
            job["created_at"]
        )
        assert waited.total_seconds() < 1.0, waited
        queued = client.get("/v1/jobs", params={"kind": "fetch", "state": "queued"}).json()
        assert len(queued["jobs"]) >= 10  # fetches still waited for their lane: it was full
        for job_id in fetches:
            client.post(f"/v1/jobs/{job_id}/cancel")
