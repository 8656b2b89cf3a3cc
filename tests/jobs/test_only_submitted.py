"""A queue that runs only what it submitted (a command beside the service), and the stalled-job
sweep as one call (a watchdog), on every store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from scrapeflow.jobs import (
    EmbeddedJobQueue,
    Job,
    JobState,
    JobStore,
    SqlJobStore,
    new_job_id,
)

from ._kinds import KINDS


def queue(store: JobStore, **options: Any) -> EmbeddedJobQueue:
    options = {"heartbeat": 0.2, "poll": 0.05, **options}
    return EmbeddedJobQueue(store, KINDS, **options)


def twin(store: JobStore) -> JobStore:
    """The same jobs for a second queue: a store of its own on the same database (each queue
    closes its store), or the same store in memory."""
    return SqlJobStore(store.db_url) if isinstance(store, SqlJobStore) else store


async def test_only_its_own_and_joined_jobs_run_and_the_rest_stay_queued(
    job_store: JobStore,
) -> None:
    async with queue(job_store, run_jobs=False) as service:  # the service's queued work
        unrelated = await service.submit("count_to", {"n": 1})
        keyed = await service.submit("count_to", {"n": 2}, dedupe_key="customer:1")
        async with queue(twin(job_store), only_submitted=True) as command:
            own = await command.submit("count_to", {"n": 3})
            joined = await command.submit("count_to", {"n": 2}, dedupe_key="customer:1")
            assert joined.id == keyed.id
            assert command.submitted_here(own.id)
            assert not command.submitted_here(joined.id)
            async with asyncio.timeout(10):
                done = [await command.wait(job.id) for job in (own, joined)]
            assert [job.state for job in done] == [JobState.SUCCEEDED] * 2
            await asyncio.sleep(0.5)  # ten polls: time enough to have claimed it
            left = await command.get(unrelated.id)
        assert left.state is JobState.QUEUED
        assert left.attempts == 0 and left.owner is None


async def test_a_joined_job_whose_process_died_is_run_here_and_no_other(
    job_store: JobStore,
) -> None:
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    async with queue(job_store, run_jobs=False) as service:
        keyed = await service.submit("count_to", {"n": 1}, dedupe_key="customer:1")
        other = await service.submit("count_to", {"n": 1})
        # A process claimed both, then died: their heartbeats stopped five minutes ago.
        claimed = await job_store.claim("dead-host:1:x", long_ago, 2)
        assert {job.id for job in claimed} == {keyed.id, other.id}
        async with queue(twin(job_store), only_submitted=True, stalled_after=1.0) as command:
            joined = await command.submit("count_to", {"n": 1}, dedupe_key="customer:1")
            assert joined.id == keyed.id and joined.state is JobState.RUNNING
            async with asyncio.timeout(10):
                done = await command.wait(joined.id)
            await asyncio.sleep(0.5)
            still = await command.get(other.id)
    assert done.state is JobState.SUCCEEDED
    assert done.attempts == 2
    assert still.state is JobState.RUNNING  # another's: left to the queues that run it
    assert still.owner == "dead-host:1:x"


async def test_the_store_claims_and_sweeps_only_the_jobs_named(job_store: JobStore) -> None:
    now = datetime.now(UTC)
    jobs = [
        Job(new_job_id(), "count_to", {"n": 1}, JobState.QUEUED, now + timedelta(seconds=i))
        for i in range(3)
    ]
    first, second, third = (job.id for job in jobs)
    await job_store.open()
    try:
        for job in jobs:
            await job_store.add(job)
        assert await job_store.claim("me", now, 10, only=[]) == []
        claimed = await job_store.claim("me", now, 10, only=[second, "no-such-job"])
        assert [job.id for job in claimed] == [second]
        assert [job.state for job in claimed] == [JobState.RUNNING]
        rest = await job_store.claim("dead", now - timedelta(minutes=5), 10)
        assert [job.id for job in rest] == [first, third]

        assert await job_store.requeue_stalled(now, 5, only=[]) == []
        assert await job_store.requeue_stalled(now, 5, only=[first, second]) == [first]
        states = {job_id: (await job_store.get(job_id)) for job_id in (first, second, third)}
        assert {job_id: job.state for job_id, job in states.items() if job} == {
            first: JobState.QUEUED,
            second: JobState.RUNNING,  # beating: not stalled
            third: JobState.RUNNING,  # stalled, but not named
        }
    finally:
        await job_store.close()


async def test_requeue_stalled_is_the_sweep_as_one_call(job_store: JobStore) -> None:
    now = datetime.now(UTC)
    long_ago = now - timedelta(minutes=5)
    # stalled_after 30 s: the live job's claim stays fresh however slow a loaded machine is
    async with queue(job_store, run_jobs=False, max_attempts=2, stalled_after=30) as jobs:
        dead = await jobs.submit("count_to", {"n": 1})
        tired = await jobs.submit("count_to", {"n": 1})
        live = await jobs.submit("count_to", {"n": 1})
        for _ in range(2):  # its process died twice already
            await job_store.claim("dead-host:1:x", long_ago, 1, only=[tired.id])
            await job_store.requeue_stalled(now, 10, only=[tired.id])
        await job_store.claim("dead-host:1:x", long_ago, 1, only=[tired.id])
        await job_store.claim("dead-host:1:x", long_ago, 1, only=[dead.id])
        await job_store.claim("live-host:1:x", now, 1, only=[live.id])

        assert await jobs.requeue_stalled(silent_for=3600) == []  # silent for 5 min only
        swept = await jobs.requeue_stalled(silent_for=60)
        assert {job.id: job.state for job in swept} == {
            dead.id: JobState.QUEUED,
            tired.id: JobState.FAILED,
        }
        assert (await jobs.get(tired.id)).error == (
            "gave up after 2 attempts: its process stopped each time"
        )
        assert (await jobs.get(live.id)).state is JobState.RUNNING
        assert await jobs.requeue_stalled() == []  # nothing left to sweep
