"""The procrastinate job backend on a real PostgreSQL database (a fresh one per test).

Workers run in this process or in another one (``procrastinate_worker``): a job runs to its
end with its progress, a cancel reaches a job another process runs, a killed worker's job
and a stopped worker's job are finished by another worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scrapeflow.db import create_engine
from scrapeflow.jobs import Job, JobState, ProcrastinateJobQueue, SqlJobStore, new_job_id
from scrapeflow.jobs._dispatch import ensure_schema
from tests._databases import _pg_database

from ._kinds import KINDS
from .procrastinate_worker import TIMINGS

REPO = Path(__file__).resolve().parents[2]

# A cancel reaches a job another process runs within the 2 s documented (half a second more
# for a loaded machine); the timings make a dead worker's job run again within seconds.
CANCEL_BOUND = 2.5
RECOVERY_BOUND = 90.0


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """An empty PostgreSQL database (skipped without a server, a failure under CI=true)."""
    async with _pg_database(template=None) as url:
        yield url


def queue(url: str, **options: object) -> ProcrastinateJobQueue:
    return ProcrastinateJobQueue(url, KINDS, **{**TIMINGS, **options})  # type: ignore[arg-type]


@asynccontextmanager
async def worker_process(db_url: str) -> AsyncIterator[subprocess.Popen[str]]:
    """A worker in a process of its own, once it takes jobs. Its ready line is awaited in a
    thread: a queue of this test in this process must go on beating meanwhile (blocked, it
    would look dead to the new worker, which prunes workers silent for ``stalled_after``)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.jobs.procrastinate_worker", db_url],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert process.stdout is not None
        assert (await asyncio.to_thread(process.stdout.readline)).strip() == "ready"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        await asyncio.to_thread(process.wait, 10)
        if process.stdout is not None:
            process.stdout.close()


async def until_running(jobs: ProcrastinateJobQueue, job_id: str, marks: Path | None = None) -> Job:
    """Until the job runs (and, with ``marks``, its handler has written its first mark: a
    claimed row alone does not mean the handler has started)."""
    async with asyncio.timeout(30):
        while (job := await jobs.get(job_id)).state is not JobState.RUNNING or (
            marks is not None and not (marks.exists() and marks.read_text().endswith("\n"))
        ):
            await asyncio.sleep(0.05)
    return job


async def test_a_submitted_job_runs_to_its_result_with_its_progress(pg_url: str) -> None:
    seen: list[tuple[str, JobState]] = []

    async def on_change(job: Job) -> None:
        seen.append((job.id, job.state))

    async with queue(pg_url, on_change=on_change) as jobs:
        job = await jobs.submit("count_to", {"n": 3})
        assert job.state is JobState.QUEUED
        async with asyncio.timeout(30):
            done = await jobs.wait(job.id)
        assert (await jobs.counts())[("count_to", JobState.SUCCEEDED)] == 1
        assert (await jobs.tally([job.id])).counts == {JobState.SUCCEEDED: 1}
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"counted": 3}
    assert done.progress == {"done": 3, "total": 3}
    assert done.attempts == 1
    assert seen == [
        (job.id, JobState.QUEUED),
        (job.id, JobState.RUNNING),
        (job.id, JobState.SUCCEEDED),
    ]


async def test_a_failing_job_fails_with_its_error_redacted(pg_url: str) -> None:
    async with queue(pg_url) as jobs:
        job = await jobs.submit("explode")
        async with asyncio.timeout(30):
            done = await jobs.wait(job.id)
    assert done.state is JobState.FAILED
    assert done.error is not None and "the site changed" in done.error
    assert "s3cret" not in done.error


async def test_a_dedupe_key_returns_the_active_job(pg_url: str) -> None:
    async with queue(pg_url, run_jobs=False) as jobs:
        first = await jobs.submit("count_to", {"n": 1}, dedupe_key="customer-7")
        again = await jobs.submit("count_to", {"n": 2}, dedupe_key="customer-7")
        other = await jobs.submit("count_to", {"n": 1}, dedupe_key="customer-8")
        assert again.id == first.id
        assert jobs.submitted_here(first.id) and not jobs.submitted_here("nope")
        assert other.id != first.id
        assert (await jobs.active("customer-7")) == first
        await jobs.cancel(first.id)
        assert await jobs.active("customer-7") is None
        third = await jobs.submit("count_to", {"n": 1}, dedupe_key="customer-7")
        assert third.id != first.id


async def test_jobs_submitted_at_the_same_moment_are_stored_and_dispatched_once_each(
    pg_url: str,
) -> None:
    """Submits made together are queued in one transaction and one dispatch; a dedupe key
    held twice in that batch, or already, still gives one job, and each job one dispatch."""
    async with queue(pg_url, run_jobs=False) as jobs:
        held = await jobs.submit("count_to", {"n": 1}, dedupe_key="customer-1")
        together = await asyncio.gather(
            *(jobs.submit("count_to", {"n": n}) for n in range(1, 6)),
            jobs.submit("count_to", {"n": 1}, dedupe_key="customer-2"),
            jobs.submit("count_to", {"n": 2}, dedupe_key="customer-2"),
            jobs.submit("count_to", {"n": 3}, dedupe_key="customer-1"),
        )
        plain, (second, again, held_again) = together[:5], together[5:]
        assert len({job.id for job in plain}) == 5
        assert [job.params["n"] for job in plain] == [1, 2, 3, 4, 5]
        assert again.id == second.id and held_again.id == held.id
        stored = await jobs.find(kind="count_to")
        assert len(stored) == 7 and {job.state for job in stored} == {JobState.QUEUED}
        async with jobs.app.open_async():
            dispatches = await jobs.app.job_manager.list_jobs_async()
        assert Counter(d.task_kwargs["job_id"] for d in dispatches) == Counter(
            job.id for job in stored
        )


async def test_a_job_that_cannot_be_stored_fails_alone_among_those_submitted_with_it(
    pg_url: str,
) -> None:
    """A batch of submits with one job the database refuses: that submit raises, the others
    are stored, told and dispatched."""
    async with queue(pg_url, run_jobs=False) as jobs:
        answers = await asyncio.gather(
            jobs.submit("count_to", {"n": 1}),
            jobs.submit("count_to", {"n": object()}),  # not JSON: its insert fails
            jobs.submit("count_to", {"n": 3}),
            return_exceptions=True,
        )
        first, refused, third = answers
        assert isinstance(refused, Exception)
        assert isinstance(first, Job) and isinstance(third, Job)
        stored = await jobs.find(kind="count_to")
        assert {job.id for job in stored} == {first.id, third.id}
        async with jobs.app.open_async():
            dispatches = await jobs.app.job_manager.list_jobs_async()
        assert sorted(d.task_kwargs["job_id"] for d in dispatches) == sorted([first.id, third.id])


async def test_cancelling_a_queued_job_ends_it_and_no_worker_runs_it(
    pg_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    async with queue(pg_url, run_jobs=False) as client:
        job = await client.submit("count_to", {"n": 1, "marks": str(marks)})
        cancelled = await client.cancel(job.id)
        assert cancelled.state is JobState.CANCELLED
        async with queue(pg_url) as worker:
            waiting = await client.submit("count_to", {"n": 1})  # runs: the worker works
            async with asyncio.timeout(30):
                assert (await worker.wait(waiting.id)).state is JobState.SUCCEEDED
        assert (await client.get(job.id)).state is JobState.CANCELLED
    assert not marks.exists()


async def test_a_cancel_stops_a_job_running_in_another_process(pg_url: str, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    async with queue(pg_url, run_jobs=False) as client:
        job = await client.submit("hang", {"marks": str(marks)})
        async with worker_process(pg_url):
            await until_running(client, job.id, marks)
            asked = await client.cancel(job.id)
            assert asked.cancel_requested
            async with asyncio.timeout(CANCEL_BOUND):
                done = await client.wait(job.id)
    assert done.state is JobState.CANCELLED
    assert marks.read_text() == "stored before the cancel\n"


async def test_a_killed_workers_job_is_finished_by_another_worker(
    pg_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    async with queue(pg_url, run_jobs=False) as client:
        job = await client.submit("count_to", {"n": 40, "pause": 0.1, "marks": str(marks)})
        async with worker_process(pg_url) as process:
            await until_running(client, job.id, marks)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        assert (await client.get(job.id)).state is JobState.RUNNING  # as the dead one left it
        async with queue(pg_url) as survivor:
            async with asyncio.timeout(RECOVERY_BOUND):
                done = await survivor.wait(job.id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"counted": 40}
    assert done.attempts == 2
    assert marks.read_text().splitlines() == [str(process.pid), str(os.getpid())]


async def test_the_sweep_runs_in_a_process_that_runs_no_jobs_and_with_every_slot_busy(
    pg_url: str, tmp_path: Path
) -> None:
    """A killed worker's job is put back in the queue by the sweep of a process that runs no
    jobs (the API's), and by a worker whose only slot is taken: the sweep is not a job, it
    never waits for a slot."""
    marks = tmp_path / "marks"
    async with queue(pg_url, run_jobs=False) as api:
        job = await api.submit("count_to", {"n": 40, "pause": 0.1, "marks": str(marks)})
        async with worker_process(pg_url) as process:
            await until_running(api, job.id, marks)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        async with asyncio.timeout(RECOVERY_BOUND):  # no worker runs: the API's sweep alone
            while (await api.get(job.id)).state is not JobState.QUEUED:
                await asyncio.sleep(0.1)
        await api.cancel(job.id)

    later = tmp_path / "later"
    async with queue(pg_url, concurrency=1) as only:  # the only process left
        busy = await only.submit("hang", {})
        await until_running(only, busy.id)  # its one slot taken, for good
        again = await only.submit("count_to", {"n": 40, "pause": 0.1, "marks": str(later)})
        async with worker_process(pg_url) as second:
            await until_running(only, again.id, later)
            second.send_signal(signal.SIGKILL)
            second.wait(timeout=10)
        async with asyncio.timeout(RECOVERY_BOUND):  # swept by the worker with no slot free
            while (await only.get(again.id)).state is not JobState.QUEUED:
                await asyncio.sleep(0.1)
        await only.cancel(busy.id)
        async with asyncio.timeout(RECOVERY_BOUND):
            done = await only.wait(again.id)
    assert done.state is JobState.SUCCEEDED and done.attempts == 2


async def test_a_stopped_worker_hands_its_job_back_and_another_finishes_it(
    pg_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    async with queue(pg_url, run_jobs=False) as client:
        job = await client.submit("count_to", {"n": 30, "pause": 0.1, "marks": str(marks)})
        async with queue(pg_url, grace=0.3) as first:
            await until_running(client, job.id)
        handed_back = await client.get(job.id)
        assert handed_back.state is JobState.QUEUED
        assert handed_back.owner is None
        async with queue(pg_url) as second:
            async with asyncio.timeout(RECOVERY_BOUND):
                done = await second.wait(job.id)
        assert first is not second
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"counted": 30}
    assert len(marks.read_text().splitlines()) == 2  # one run each


async def queued_without_dispatch(
    pg_url: str, params: dict[str, object], *, created_at: datetime | None = None, attempts: int = 0
) -> Job:
    """A queued ``count_to`` row stored straight into the job table, with no dispatch."""
    store = SqlJobStore(pg_url)
    await store.open()
    try:
        return await store.add(
            Job(
                id=new_job_id(),
                kind="count_to",
                params=params,
                state=JobState.QUEUED,
                created_at=created_at or datetime.now(UTC),
                attempts=attempts,
            )
        )
    finally:
        await store.close()


async def test_a_queued_job_left_without_a_dispatch_is_dispatched_by_the_sweep(
    pg_url: str,
) -> None:
    async with queue(pg_url, run_jobs=False):
        pass  # the tables
    orphan = await queued_without_dispatch(pg_url, {"n": 2})  # stored, then the defer failed
    async with queue(pg_url) as worker:
        async with asyncio.timeout(RECOVERY_BOUND):
            done = await worker.wait(orphan.id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"counted": 2}


async def test_a_job_that_ran_before_is_dispatched_ahead_of_the_backlog(pg_url: str) -> None:
    """A job put back in the queue after it ran (here: found queued without a dispatch by the
    sweep, as a part handed back whose new dispatch was lost) runs before the jobs queued
    earlier that never ran, not behind all of them: its new dispatch has the highest id, and
    procrastinate fetches by priority, then id."""
    async with queue(pg_url, run_jobs=False) as client:
        backlog = [await client.submit("count_to", {"n": 5, "pause": 0.2}) for _ in range(3)]
    resumed = await queued_without_dispatch(
        pg_url, {"n": 1}, created_at=datetime.now(UTC) - timedelta(minutes=1), attempts=1
    )
    async with queue(pg_url, concurrency=1) as worker:  # one job at a time
        async with asyncio.timeout(RECOVERY_BOUND):
            ended = [await worker.wait(job.id) for job in [*backlog, resumed]]
    started = {job.id: job.started_at for job in ended}
    assert all(job.state is JobState.SUCCEEDED for job in ended)
    # The first of the backlog may start before the sweep dispatched it; not the others.
    assert sum(1 for job in backlog if started[job.id] < started[resumed.id]) <= 1, started


async def test_processes_starting_together_apply_the_schema_once(pg_url: str) -> None:
    engines = [create_engine(pg_url) for _ in range(3)]
    try:
        applied = await asyncio.gather(*(ensure_schema(engine) for engine in engines))
        assert sorted(applied) == [False, False, True]
        assert await ensure_schema(engines[0]) is False
    finally:
        for engine in engines:
            await engine.dispose()
