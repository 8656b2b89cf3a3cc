"""Jobs: units of work (a bank refresh, a fetch, an engine run) queued, run, watched, cancelled.

* :class:`Job` and :class:`JobState` (``queued | running | succeeded | failed | cancelled``);
* the :class:`JobQueue` interface, and its embedded backend :class:`EmbeddedJobQueue` (asyncio
  tasks in this process) over a :class:`JobStore`: :class:`SqlJobStore` (SQLite or PostgreSQL,
  the ``scrapeflow_jobs`` table) or :class:`MemoryJobStore` (tests);
* :class:`ProcrastinateJobQueue`: the same interface across machines, procrastinate workers
  dispatching the jobs of the ``scrapeflow_jobs`` table on PostgreSQL (the ``distributed``
  extra);
* :class:`Scheduler`: a :class:`DailySchedule` (cron and time zone) whose run submits one job
  per target, spread over a window, once a day across restarts;
* job kinds are handlers registered by name (:data:`JobKinds`), never an import path; a
  running job may queue follow-up jobs and wait for them (:meth:`JobContext.submit`,
  :meth:`JobContext.join`; :func:`run_parts` splits a job into parts any worker may take);
* :class:`Lane`: kinds that run beside the others with a concurrency of their own;
  :class:`JobScope`: which jobs a caller may see (its own, its customers'), filtered in SQL.

>>> from scrapeflow.jobs import JobState
>>> JobState.CANCELLED.final
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapeflow.jobs._jobtable import jobs_table
from scrapeflow.jobs._memory import MemoryJobStore
from scrapeflow.jobs._model import (
    ACTIVE_STATES,
    Job,
    JobScope,
    JobState,
    JobTally,
    customer_of,
    follow_up_id,
    new_job_id,
)
from scrapeflow.jobs._parts import even_slices, part_ids, run_parts
from scrapeflow.jobs._runner import (
    EmbeddedJobQueue,
    JobContext,
    JobHandler,
    JobKinds,
    JobQueue,
    Lane,
)
from scrapeflow.jobs._schedule import DailySchedule
from scrapeflow.jobs._scheduler import Scheduler, ScheduleRun
from scrapeflow.jobs._store import JobStore, SqlJobStore

if TYPE_CHECKING:
    from scrapeflow.jobs._procrastinate import ProcrastinateJobQueue

__all__ = [
    "ACTIVE_STATES",
    "DailySchedule",
    "EmbeddedJobQueue",
    "Job",
    "JobContext",
    "JobHandler",
    "JobKinds",
    "JobQueue",
    "JobScope",
    "JobState",
    "JobStore",
    "JobTally",
    "Lane",
    "MemoryJobStore",
    "ProcrastinateJobQueue",
    "ScheduleRun",
    "Scheduler",
    "SqlJobStore",
    "customer_of",
    "even_slices",
    "follow_up_id",
    "jobs_table",
    "new_job_id",
    "part_ids",
    "run_parts",
]


def __getattr__(name: str) -> Any:
    # procrastinate is an optional extra: imported when the distributed backend is asked for
    if name == "ProcrastinateJobQueue":
        try:
            from scrapeflow.jobs._procrastinate import ProcrastinateJobQueue
        except ModuleNotFoundError as exc:
            if exc.name not in ("procrastinate", "psycopg", "psycopg_pool"):
                raise
            from scrapeflow.errors import MissingExtra

            raise MissingExtra("the procrastinate job backend", "distributed") from exc
        return ProcrastinateJobQueue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
