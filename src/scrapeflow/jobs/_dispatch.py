"""procrastinate as a dispatcher of ``scrapeflow_jobs`` rows: connection, schema, retry policy.

What :class:`~scrapeflow.jobs.ProcrastinateJobQueue` needs from procrastinate beyond its public
task API: a psycopg connection string for the same database as the job store, its schema
applied once per database, a retry strategy that re-queues only a delivery handed back at
shutdown, and the look-ups that tie a job row to its dispatches (a dispatch's
``queueing_lock`` is ``scrapeflow.run:<job id>``); and what tells a run that the database went
away under it (:func:`database_lost`: such a run is run again, not failed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from procrastinate import jobs
from procrastinate.manager import JobManager
from procrastinate.retry import BaseRetryStrategy, RetryDecision
from procrastinate.schema import SchemaManager
from psycopg.conninfo import make_conninfo
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import connection_lost
from scrapeflow.errors import ConfigError

__all__: list[str] = []

RUN_TASK = "scrapeflow.run"
SWEEP_TASK = "scrapeflow.sweep"
LIVE = (jobs.Status.TODO.value, jobs.Status.DOING.value)

# pg_advisory_xact_lock key of the schema check: two processes starting together on a fresh
# database would otherwise both apply procrastinate's schema, which is not idempotent.
_SCHEMA_LOCK = 0x5C4A9E_0001


class Released(Exception):
    """A running job was handed back at shutdown: its dispatch goes back to the queue."""


class RetryReleased(BaseRetryStrategy):
    """Re-queue a dispatch at once when its run was handed back (:class:`Released`), never
    otherwise: a handler's error fails the job in ``scrapeflow_jobs``, and a user's abort must
    end the dispatch ``aborted`` (a generic strategy would turn it into ``failed``)."""

    def get_retry_decision(
        self, *, exception: BaseException, job: jobs.Job
    ) -> RetryDecision | None:
        if isinstance(exception, Released):
            return RetryDecision(retry_in={"seconds": 0})
        return None


database_lost = connection_lost
"""Whether a run's error is the database going away: such a run is run again."""


def dispatch_lock(job_id: str) -> str:
    """The queueing lock of a job's dispatches: at most one waiting dispatch per job."""
    return f"{RUN_TASK}:{job_id}"


def psycopg_conninfo(db_url: str) -> str:
    """The libpq connection string of a ``postgresql[+driver]://`` URL, with TCP keepalives so
    a connection to a vanished server is noticed instead of hanging a worker."""
    url = make_url(db_url)
    if url.get_backend_name() != "postgresql":
        raise ConfigError(f"the procrastinate job backend needs PostgreSQL, not {url.drivername}")
    # libpq's own parameters (sslmode, sslrootcert…) go on; asyncpg's "ssl" is libpq's sslmode.
    query = {k: v for k, v in url.query.items() if k != "ssl"}
    if "ssl" in url.query and "sslmode" not in url.query:
        query["sslmode"] = url.query["ssl"]
    plain = url.set(drivername="postgresql", query={}).render_as_string(hide_password=False)
    return make_conninfo(
        plain,
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=3,
        **{k: v if isinstance(v, str) else v[-1] for k, v in query.items()},
    )


async def ensure_schema(engine: AsyncEngine) -> bool:
    """Apply procrastinate's schema unless the database has it; True when it was applied.

    One transaction under an advisory lock: a second process waits, then finds the schema."""
    async with engine.begin() as connection:
        await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
        found = await connection.scalar(text("SELECT to_regclass('procrastinate_jobs') IS NULL"))
        if not found:
            return False
        raw = await connection.get_raw_connection()
        driver: Any = raw.driver_connection
        await driver.execute(SchemaManager.get_schema())  # a script: several statements
        return True


async def live_dispatches(manager: JobManager, job_id: str) -> list[int]:
    """The ids of the job's dispatches that are waiting or running."""
    found = await manager.list_jobs_async(queueing_lock=dispatch_lock(job_id))
    return [job.id for job in found if job.id is not None and job.status in LIVE]


async def undispatched(
    engine: AsyncEngine, queued_before: datetime, *, limit: int = 500
) -> list[str]:
    """Queued jobs created before ``queued_before`` that no dispatch waits for or runs (their
    defer failed, or the dispatch ended without running them)."""
    query = text(
        """
        SELECT s.id FROM scrapeflow_jobs s
        WHERE s.state = 'queued' AND s.created_at < :before
          AND NOT EXISTS (
            SELECT 1 FROM procrastinate_jobs p
            WHERE p.queueing_lock = :prefix || s.id
              AND p.status IN ('todo', 'doing'))
        ORDER BY s.created_at LIMIT :limit
        """
    )
    async with engine.connect() as connection:
        rows = await connection.execute(
            query, {"before": queued_before, "prefix": f"{RUN_TASK}:", "limit": limit}
        )
        return [row[0] for row in rows]
