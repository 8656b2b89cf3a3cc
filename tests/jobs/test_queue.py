"""The embedded job queue on every store: run, fail, dedupe, cancel, limits, restarts."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scrapeflow.errors import JobNotFound, UnknownJobKind
from scrapeflow.jobs import EmbeddedJobQueue, JobContext, JobState, JobStore, MemoryJobStore

from ._kinds import KINDS

# The queue stops a cancelled job within its poll interval (0.5 s): the 2 s documented, and
# half a second for a loaded machine.
CANCEL_BOUND = 2.5


def queue(store: JobStore, **options: Any) -> EmbeddedJobQueue:
    options = {"heartbeat": 0.2, "poll": 0.05, **options}
    return EmbeddedJobQueue(store, KINDS, **options)


async def test_a_job_runs_reports_progress_and_succeeds(job_store: JobStore) -> None:
    async with queue(job_store) as jobs:
        job = await jobs.submit("count_to", {"n": 3})
        assert job.state is JobState.QUEUED
        async with asyncio.timeout(10):
            done = await jobs.wait(job.id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"counted": 3}
    assert done.progress == {"done": 3, "total": 3}
    assert done.attempts == 1
    assert done.started_at is not None and done.finished_at is not None
    assert done.created_at <= done.started_at <= done.finished_at


async def test_a_failing_job_records_its_error_without_secrets(job_store: JobStore) -> None:
    async with queue(job_store) as jobs:
        job = await jobs.submit("explode")
        async with asyncio.timeout(10):
            done = await jobs.wait(job.id)
    assert done.state is JobState.FAILED
    assert done.error is not None
    assert done.error.startswith("RuntimeError: the site changed")
    assert "s3cret" not in done.error


async def test_kinds_are_chosen_by_registered_name_only(job_store: JobStore) -> None:
    async with queue(job_store) as jobs:
        with pytest.raises(UnknownJobKind, match=r"no job kind 'os.system' \(known: count_to"):
            await jobs.submit("os.system", {"command": "true"})
        with pytest.raises(JobNotFound, match="no job 'nope'"):
            await jobs.get("nope")
        with pytest.raises(JobNotFound):
            await jobs.cancel("nope")
        assert await jobs.find() == []


async def test_a_second_submit_with_the_same_key_gets_the_active_job(job_store: JobStore) -> None:
    async with queue(job_store, concurrency=1) as jobs:
        first = await jobs.submit("count_to", {"n": 5, "pause": 0.05}, dedupe_key="customer:7")
        again = await jobs.submit("count_to", {"n": 5}, dedupe_key="customer:7")
        other = await jobs.submit("count_to", {"n": 1}, dedupe_key="customer:8")
        assert again.id == first.id
        assert other.id != first.id
        async with asyncio.timeout(10):
            await jobs.wait(first.id)
        later = await jobs.submit("count_to", {"n": 1}, dedupe_key="customer:7")
        assert later.id != first.id  # the first has ended: a new refresh is a new job
        async with asyncio.timeout(10):
            assert (await jobs.wait(later.id)).state is JobState.SUCCEEDED
        assert len(await jobs.find(kind="count_to")) == 3


async def test_cancel_a_queued_job_ends_it_and_it_never_runs(
    job_store: JobStore, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    async with queue(job_store, run_jobs=False) as jobs:
        job = await jobs.submit("count_to", {"n": 1, "marks": str(marks)})
        cancelled = await jobs.cancel(job.id)
    assert cancelled.state is JobState.CANCELLED
    async with queue(job_store) as jobs:
        await asyncio.sleep(0.3)
        assert (await jobs.get(job.id)).state is JobState.CANCELLED
    assert not marks.exists()


async def test_cancel_a_running_job_stops_it_within_two_seconds(
    job_store: JobStore, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    async with queue(job_store) as jobs:
        job = await jobs.submit("hang", {"marks": str(marks)})
        async with asyncio.timeout(10):
            while (await jobs.get(job.id)).state is not JobState.RUNNING:
                await asyncio.sleep(0.02)
        started = time.monotonic()
        await jobs.cancel(job.id)
        async with asyncio.timeout(CANCEL_BOUND):
            done = await jobs.wait(job.id)
        assert time.monotonic() - started < CANCEL_BOUND
    assert done.state is JobState.CANCELLED
    assert marks.read_text() == "stored before the cancel\n"  # what it stored stays


async def test_no_more_jobs_run_at_once_than_the_concurrency(job_store: JobStore) -> None:
    running = peak = 0

    async def track(context: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1

    async with EmbeddedJobQueue(job_store, {"track": track}, concurrency=2, poll=0.02) as jobs:
        submitted = [await jobs.submit("track") for _ in range(6)]
        async with asyncio.timeout(20):
            ended = [await jobs.wait(job.id) for job in submitted]
    assert {job.state for job in ended} == {JobState.SUCCEEDED}
    assert peak == 2


async def test_a_job_queued_before_a_stop_runs_after_the_restart(job_store: JobStore) -> None:
    async with queue(job_store, run_jobs=False) as jobs:  # a server that only enqueues, then stops
        job = await jobs.submit("count_to", {"n": 2})
    async with queue(job_store) as jobs:
        async with asyncio.timeout(10):
            assert (await jobs.wait(job.id)).state is JobState.SUCCEEDED


async def test_stopping_puts_a_running_job_back_in_the_queue(job_store: JobStore) -> None:
    async with queue(job_store) as jobs:
        job = await jobs.submit("count_to", {"n": 100, "pause": 0.05})
        async with asyncio.timeout(10):
            while (await jobs.get(job.id)).state is not JobState.RUNNING:
                await asyncio.sleep(0.02)
        await jobs.stop(grace=0.1)
        assert (await jobs.get(job.id)).state is JobState.QUEUED
    async with queue(job_store) as jobs:
        async with asyncio.timeout(20):
            done = await jobs.wait(job.id)
    assert done.state is JobState.SUCCEEDED
    assert done.attempts == 2


async def test_a_job_whose_process_stopped_is_found_by_its_heartbeat_and_run_again(
    job_store: JobStore,
) -> None:
    # A process claimed the job, then died: its heartbeat stopped.
    await job_store.open()
    async with queue(job_store, run_jobs=False) as jobs:
        job = await jobs.submit("count_to", {"n": 2})
    await job_store.open()
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    [claimed] = await job_store.claim("dead-host:1:x", long_ago, 1)
    assert claimed.id == job.id
    if not isinstance(job_store, MemoryJobStore):
        await job_store.close()
    async with queue(job_store, heartbeat=0.2, stalled_after=1.0) as jobs:
        async with asyncio.timeout(10):
            done = await jobs.wait(job.id)
    assert done.state is JobState.SUCCEEDED
    assert done.attempts == 2


async def test_a_job_that_keeps_killing_its_process_fails_after_max_attempts(
    job_store: JobStore,
) -> None:
    await job_store.open()
    async with queue(job_store, run_jobs=False) as jobs:
        job = await jobs.submit("count_to", {"n": 1})
    await job_store.open()
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    await job_store.claim("dead-host:1:x", long_ago, 1)
    if not isinstance(job_store, MemoryJobStore):
        await job_store.close()
    async with queue(job_store, stalled_after=1.0, max_attempts=1) as jobs:
        async with asyncio.timeout(10):
            done = await jobs.wait(job.id)
    assert done.state is JobState.FAILED
    assert done.error == "gave up after 1 attempts: its process stopped each time"
