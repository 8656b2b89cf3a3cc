"""A worker whose PostgreSQL went away takes jobs again about a second after it is back.

The worker runs on the default settings, on a PostgreSQL server of the test's own
(``tests/_pginstance.py``), stopped for 20 s and started again. procrastinate's connection pool,
left to itself, tries a lost database again 1, 3, 7, 15, 31… seconds after losing it: after this
outage its next attempt came about 10 s after the server was back, and every job waited for it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from scrapeflow.jobs import JobState, ProcrastinateJobQueue
from tests._pginstance import start_pg_instance

from ._kinds import KINDS

OUTAGE = 20.0  # seconds the server stays down
BACK_BOUND = 4.0  # a job submitted once it is back starts within this (a bound, not a target)


async def test_a_worker_takes_a_job_within_seconds_of_its_database_coming_back(
    tmp_path: Path,
) -> None:
    instance = await asyncio.to_thread(start_pg_instance, tmp_path)
    try:
        url = instance.url()
        async with ProcrastinateJobQueue(url, KINDS) as worker:  # the defaults
            before = await worker.submit("count_to", {"n": 1})
            async with asyncio.timeout(30):
                assert (await worker.wait(before.id)).state is JobState.SUCCEEDED

            await asyncio.to_thread(instance.stop)
            await asyncio.sleep(OUTAGE)  # the worker's job loop meets the outage meanwhile
            await asyncio.to_thread(instance.start)
            back = time.monotonic()

            async with ProcrastinateJobQueue(url, KINDS, run_jobs=False) as client:
                job = await client.submit("count_to", {"n": 1})
                async with asyncio.timeout(60):
                    while (await client.get(job.id)).state is JobState.QUEUED:
                        await asyncio.sleep(0.05)
                started = time.monotonic() - back
                async with asyncio.timeout(60):
                    done = await client.wait(job.id)
        assert done.state is JobState.SUCCEEDED
        assert started < BACK_BOUND, f"the job started {started:.1f} s after the return"
    finally:
        await asyncio.to_thread(instance.close)
