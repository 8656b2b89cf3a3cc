"""Jobs: units of work (a bank refresh, a fetch, an engine run) queued, run, watched, cancelled.

* :class:`Job` and :class:`JobState` (``queued | running | succeeded | failed | cancelled``);
* the :class:`JobQueue` interface, and its embedded backend :class:`EmbeddedJobQueue` (asyncio
  tasks in this process) over a :class:`JobStore`: :class:`SqlJobStore` (SQLite or PostgreSQL,
  the ``scrapeflow_jobs`` table) or :class:`MemoryJobStore` (tests);
* :class:`Scheduler`: a :class:`DailySchedule` (cron and time zone) whose run submits one job
  per target, spread over a window, once a day across restarts;
* job kinds are handlers registered by name (:data:`JobKinds`), never an import path.

>>> from scrapeflow.jobs import JobState
>>> JobState.CANCELLED.final
True
"""

from __future__ import annotations

from scrapeflow.jobs._memory import MemoryJobStore
from scrapeflow.jobs._model import ACTIVE_STATES, Job, JobState, JobTally, new_job_id
from scrapeflow.jobs._runner import EmbeddedJobQueue, JobContext, JobHandler, JobKinds, JobQueue
from scrapeflow.jobs._schedule import DailySchedule
from scrapeflow.jobs._scheduler import Scheduler, ScheduleRun
from scrapeflow.jobs._store import JobStore, SqlJobStore, jobs_table

__all__ = [
    "ACTIVE_STATES",
    "DailySchedule",
    "EmbeddedJobQueue",
    "Job",
    "JobContext",
    "JobHandler",
    "JobKinds",
    "JobQueue",
    "JobState",
    "JobStore",
    "JobTally",
    "MemoryJobStore",
    "ScheduleRun",
    "Scheduler",
    "SqlJobStore",
    "jobs_table",
    "new_job_id",
]
