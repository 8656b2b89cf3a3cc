"""A ``fetch`` job of several shards: each shard a ``fetch`` job of its own that any worker may
take, the job summing them; its URLs' outcomes read through their shards, in the order given;
on two procrastinate workers the shards spread over both."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from scrapeflow.config import Settings
from scrapeflow.fetch import FETCH_KIND, FetchJobs
from scrapeflow.jobs import (
    EmbeddedJobQueue,
    JobContext,
    JobState,
    ProcrastinateJobQueue,
    SqlJobStore,
    follow_up_id,
)
from tests._databases import _pg_database
from tests._servers import RunningSite

BOUND = 120.0


def fetch_kinds(
    jobs: FetchJobs, ran: list[str] | None = None, spread: asyncio.Event | None = None
) -> dict[str, Any]:
    async def fetch(context: JobContext) -> dict[str, Any]:
        if ran is not None and "shards" not in context.params:
            ran.append(context.job.id)
            if spread is not None:  # a shard waits until the other worker has taken one
                await spread.wait()
        return await jobs.run_shards(context)

    return {FETCH_KIND: fetch}


@pytest.fixture
def fetch_jobs(tmp_path: Path) -> FetchJobs:
    # The sandbox is on loopback, which fetch jobs (clients' URLs) reach only when allowed.
    return FetchJobs.from_settings(
        Settings.load(flags={"jobs_dir": tmp_path / "jobs", "egress_allow": "127.0.0.1"})
    )


async def test_a_sharded_fetch_job_stores_every_url_through_its_shards(
    fetch_jobs: FetchJobs, plain_site: RunningSite, tmp_path: Path
) -> None:
    urls = [plain_site.page_url(n) for n in range(10)] + [f"{plain_site.url}/status/404"]
    served = {url: httpx.get(url).content for url in urls[:-1]}
    store = SqlJobStore(f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}")
    async with EmbeddedJobQueue(store, fetch_kinds(fetch_jobs), concurrency=1, poll=0.05) as queue:
        job = await queue.submit(FETCH_KIND, {"urls": urls, "shards": 3, "concurrency": 4})
        async with asyncio.timeout(BOUND):
            done = await queue.wait(job.id)
        shards = await queue.find(kind=FETCH_KIND, limit=10)

    assert done.state is JobState.SUCCEEDED, done.error
    assert done.result is not None
    assert (done.result["urls"], done.result["failed"]) == (11, 1)
    assert done.result["bytes"] == sum(len(body) for body in served.values())
    assert done.result["shards"] == [follow_up_id(job.id, f"shard-{n}") for n in range(3)]
    assert done.progress == {"done": 11, "total": 11, "stored": 10, "failed": 1}
    assert len(shards) == 4  # the job and its three shards
    sizes = sorted(len(s.params["urls"]) for s in shards if s.id != job.id)
    assert sizes == [3, 4, 4]

    items = await fetch_jobs.outcomes(job.id, done.params, active=False, start=2, limit=8)
    assert [item.index for item in items] == list(range(2, 10))
    assert [item.url for item in items] == urls[2:10]
    for item in items:
        assert item.outcome == "stored"
        assert item.sha384 == hashlib.sha384(served[item.url]).hexdigest()
    [last] = await fetch_jobs.outcomes(job.id, done.params, active=False, start=10, limit=5)
    assert (last.index, last.outcome, last.status) == (10, "failed", 404)


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with _pg_database(template=None) as url:
        yield url


async def test_the_shards_of_a_fetch_spread_over_procrastinate_workers(
    fetch_jobs: FetchJobs, slow_site: RunningSite, pg_url: str
) -> None:
    # The first shard taken waits until the other worker has taken one: on a busy machine the
    # worker waiting for its shards ran all four before the other's first poll (twice in CI).
    # Were the shards not open to both workers, the wait would end at the bound and fail.
    urls = [slow_site.page_url(n) for n in range(40)]
    spread = asyncio.Event()

    class Both(list[str]):
        def append(self, job_id: str) -> None:
            super().append(job_id)
            if ran_a and ran_b:
                spread.set()

    ran_a, ran_b = Both(), Both()
    timings: dict[str, Any] = {"heartbeat": 0.5, "stalled_after": 2.0, "sweep_every": 1}
    timings |= {"poll": 0.2, "grace": 2.0, "concurrency": 1}
    async with (
        ProcrastinateJobQueue(pg_url, fetch_kinds(fetch_jobs, ran_a, spread), **timings) as a,
        ProcrastinateJobQueue(pg_url, fetch_kinds(fetch_jobs, ran_b, spread), **timings),
    ):
        job = await a.submit(FETCH_KIND, {"urls": urls, "shards": 4, "concurrency": 2})
        async with asyncio.timeout(BOUND):
            done = await a.wait(job.id)
    assert done.state is JobState.SUCCEEDED, done.error
    assert done.result is not None and (done.result["urls"], done.result["failed"]) == (40, 0)
    assert sorted(ran_a + ran_b) == sorted(done.result["shards"])  # each shard ran once
    assert ran_a and ran_b  # on both workers
