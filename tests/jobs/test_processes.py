"""Queues in separate processes on one database: a killed worker's job is run again; a cancel
from one process stops the job another runs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scrapeflow.jobs import EmbeddedJobQueue, JobState, SqlJobStore

from ._kinds import KINDS

# The queue stops a cancelled job within its poll interval (0.5 s): the 2 s documented, and
# half a second for a loaded machine.
CANCEL_BOUND = 2.5

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def worker(db_url: str) -> Iterator[subprocess.Popen[str]]:
    """A queue process with the default poll (0.5 s) and a 0.2 s heartbeat."""
    program = textwrap.dedent(
        f"""
        import asyncio
        from scrapeflow.jobs import EmbeddedJobQueue, SqlJobStore
        from tests.jobs._kinds import KINDS

        async def main():
            async with EmbeddedJobQueue(SqlJobStore({db_url!r}), KINDS, heartbeat=0.2):
                print("ready", flush=True)
                await asyncio.Event().wait()

        asyncio.run(main())
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


async def until_running(jobs: EmbeddedJobQueue, job_id: str) -> None:
    async with asyncio.timeout(15):
        while (await jobs.get(job_id)).state is not JobState.RUNNING:
            await asyncio.sleep(0.05)


async def test_a_job_of_a_killed_worker_is_run_again_elsewhere(
    sql_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    async with EmbeddedJobQueue(SqlJobStore(sql_url), KINDS, run_jobs=False) as client:
        job = await client.submit("count_to", {"n": 40, "pause": 0.05, "marks": str(marks)})
        with worker(sql_url) as process:
            await until_running(client, job.id)
            # Running in the store is the claim; the kind's first line comes a moment later
            # (on a loaded machine, later than the kill once was): killed once it is written.
            async with asyncio.timeout(15):
                while not (marks.exists() and marks.read_text()):
                    await asyncio.sleep(0.02)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        killed_at = await client.get(job.id)
        assert killed_at.state is JobState.RUNNING  # as the dead process left it
    async with EmbeddedJobQueue(
        SqlJobStore(sql_url), KINDS, heartbeat=0.2, stalled_after=1.0, poll=0.05
    ) as survivor:
        async with asyncio.timeout(20):
            done = await survivor.wait(job.id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"counted": 40}
    assert done.attempts == 2
    assert len(marks.read_text().splitlines()) == 2  # one line per attempt, no third


async def test_a_cancel_from_another_process_stops_the_job_within_two_seconds(
    sql_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    async with EmbeddedJobQueue(SqlJobStore(sql_url), KINDS, run_jobs=False) as client:
        job = await client.submit("hang", {"marks": str(marks)})
        with worker(sql_url):
            await until_running(client, job.id)
            started = time.monotonic()
            asked = await client.cancel(job.id)
            assert asked.cancel_requested
            async with asyncio.timeout(CANCEL_BOUND):
                done = await client.wait(job.id)
            assert time.monotonic() - started < CANCEL_BOUND
    assert done.state is JobState.CANCELLED
    assert marks.read_text() == "stored before the cancel\n"
