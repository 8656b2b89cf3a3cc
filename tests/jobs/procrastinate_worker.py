"""A procrastinate job worker in a process of its own, for the job tests.

``python -m tests.jobs.procrastinate_worker DB_URL``: runs the test job kinds with the tests'
short timings, prints ``ready`` once it takes jobs, and runs until killed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from scrapeflow.jobs import ProcrastinateJobQueue
from tests.jobs._kinds import KINDS

TIMINGS: dict[str, Any] = {
    "heartbeat": 0.5,
    "stalled_after": 2.0,
    "sweep_every": 1,
    "poll": 0.5,
    "grace": 2.0,
}
"""Seconds: a dead worker's job is found within a few seconds, so the tests stay short."""


async def main(db_url: str) -> None:
    async with ProcrastinateJobQueue(db_url, KINDS, concurrency=2, **TIMINGS):
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
