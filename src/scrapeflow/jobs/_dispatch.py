"""procrastinate as a dispatcher of ``scrapeflow_jobs`` rows: connection, schema, retry policy.

What :class:`~scrapeflow.jobs.ProcrastinateJobQueue` needs from procrastinate beyond its public
task API: a psycopg connection string for the same database as the job store, its schema
applied once per database, a retry strategy that re-queues only a delivery handed back at
shutdown, and the look-ups that tie a job row to its dispatches (a dispatch's
``queueing_lock`` is ``scrapeflow.run:<job id>``); and what tells a run that the database went
away under it (:func:`database_lost`: such a run is run again, not failed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from procrastinate import jobs
from procrastinate.manager import JobManager, NotificationCallback
from procrastinate.retry import BaseRetryStrategy, RetryDecision
from procrastinate.schema import SchemaManager
from psycopg.conninfo import make_conninfo
from sqlalchemy import bindparam, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.db import UTCDateTime, connection_lost
from scrapeflow.errors import ConfigError
from scrapeflow.jobs._jobtable import job_from_row, jobs_table
from scrapeflow.jobs._model import Job

__all__: list[str] = []

RUN_TASK = "scrapeflow.run"
SWEEP_TASK = "scrapeflow.sweep"
LIVE = (jobs.Status.TODO.value, jobs.Status.DOING.value)

_log = get_logger(__name__)
_OUTAGE_PAUSE = 1.0
"""Seconds between two tries of procrastinate's worker to reach a database that went away."""

# pg_advisory_xact_lock key of the schema check: two processes starting together on a fresh
# database would otherwise both apply procrastinate's schema, which is not idempotent.
_SCHEMA_LOCK = 0x5C4A9E_0001


RESUMED_PRIORITY = 1
"""procrastinate's priority of a dispatch whose job ran before (handed back by a shutdown or an
outage, or its worker died): it is fetched before the jobs that never ran (priority 0). A
dispatch put back keeps its id, and procrastinate fetches by priority then id; a new one (a part
that ran inside its parent's delivery and was handed back, a job the sweep found without one)
would otherwise wait behind every job queued since, the whole backlog of a batch."""


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
            return RetryDecision(retry_in={"seconds": 0}, priority=RESUMED_PRIORITY)
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


_CLAIM = (
    text(
        """
        WITH claimed AS (
            UPDATE scrapeflow_jobs
            SET state = 'running', owner = :owner, started_at = :now, heartbeat_at = :now,
                attempts = attempts + 1
            WHERE id = :id AND (
                state = 'queued'
                OR (state = 'running' AND attempts < :max_attempts AND (
                    heartbeat_at < :dead_before
                    OR (owner LIKE :earlier AND owner NOT LIKE :this_run
                        AND owner NOT LIKE :this_run_parts AND heartbeat_at < :missed_before))))
            RETURNING *
        ), dropped AS (
            DELETE FROM procrastinate_jobs
            WHERE queueing_lock = :lock AND status = 'todo' AND EXISTS (SELECT 1 FROM claimed)
        )
        SELECT * FROM claimed
        """
    )
    .bindparams(
        bindparam("now", type_=UTCDateTime()), bindparam("dead_before", type_=UTCDateTime())
    )
    .columns(*jobs_table.c)
)


def run_tag(dispatch_id: int | None, attempt: int) -> str:
    """What names a delivery in the owners of the rows it runs: its dispatch and attempt."""
    return f"{dispatch_id}.{attempt}"


def run_owner(name: str, tag: str, token: str, *, part: bool = False) -> str:
    """The owner of a row run by delivery ``tag`` of process ``name`` (``part``: a follow-up
    the delivery runs inline): the tag stays whole, the process name is cut if need be."""
    return f"{name}:{tag}:{'p' if part else ''}{token}"[-64:]


def earlier_run(owner: str | None, dispatch_id: int | None, attempt: int) -> bool:
    """Whether ``owner`` is a run of an earlier delivery of dispatch ``dispatch_id``:
    procrastinate delivers a dispatch again only once it found its worker stalled (or the run
    handed it back), so such a run is dead once it has also missed its own beats."""
    if not owner or dispatch_id is None:
        return False
    return f":{dispatch_id}." in owner and f":{run_tag(dispatch_id, attempt)}:" not in owner


async def claim_run(
    engine: AsyncEngine,
    job_id: str,
    owner: str,
    now: datetime,
    *,
    dead_before: datetime,
    missed_before: datetime,
    max_attempts: int,
    dispatch_id: int | None,
    attempt: int,
    inline: bool,
) -> Job | None:
    """Claim job ``job_id`` for ``owner`` in one statement: queued, or running under a run
    known dead — silent since ``dead_before``, or an earlier delivery of dispatch
    ``dispatch_id`` (whose worker procrastinate found stalled) silent since ``missed_before``
    (a live worker that procrastinate wrongly took for dead, its event loop held up, keeps
    its job) — while it has had fewer than ``max_attempts`` runs. ``inline``: the job
    runs inside another job's delivery, so its own waiting dispatch is dropped in the same
    statement (no worker fetches it to find it taken). The job as claimed, or None."""
    tag = run_tag(dispatch_id, attempt)
    params = {
        "id": job_id,
        "owner": owner,
        "now": now,
        "dead_before": dead_before,
        "missed_before": missed_before,
        "max_attempts": max_attempts,
        "earlier": f"%:{dispatch_id}.%" if dispatch_id is not None else "",
        "this_run": f"%:{tag}:%",
        "this_run_parts": f"%:{tag}:p%",
        "lock": dispatch_lock(job_id) if inline else None,
    }
    async with engine.begin() as connection:
        row = (await connection.execute(_CLAIM, params)).first()
    return None if row is None else job_from_row(row._mapping)


class OutageRidingJobManager(JobManager):
    """procrastinate's job manager, riding a database outage out: its worker stops at the
    first error of fetching a job, of its heartbeat or of its listener, and with it every job
    it runs (after the grace period); here those wait for the database to come back instead,
    trying every second, so the jobs a worker runs go on and store their ends once it has."""

    def __init__(self, connector: Any) -> None:
        super().__init__(connector)
        self._lost_since: float | None = None

    def _lost(self, what: str, exc: BaseException) -> None:
        if self._lost_since is None:
            self._lost_since = time.monotonic()
            _log.warning(
                "the job queue lost its database: waiting for it",
                step=what,
                error=redact(repr(exc)),
            )

    def _back(self) -> None:
        if self._lost_since is not None:
            away = time.monotonic() - self._lost_since
            self._lost_since = None
            _log.warning("the job queue has its database again", seconds=round(away, 1))

    async def fetch_job(self, queues: Iterable[str] | None, worker_id: int) -> jobs.Job | None:
        try:
            job = await super().fetch_job(queues, worker_id)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            self._lost("fetch", exc)
            await asyncio.sleep(_OUTAGE_PAUSE)
            return None  # the worker waits for a NOTIFY or its poll, then fetches again
        self._back()
        return job

    async def update_heartbeat(self, worker_id: int) -> None:
        try:
            await super().update_heartbeat(worker_id)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            self._lost("heartbeat", exc)
            return
        self._back()

    async def listen_for_jobs(
        self, *, on_notification: NotificationCallback, queues: Iterable[str] | None = None
    ) -> None:
        while True:
            try:
                await super().listen_for_jobs(on_notification=on_notification, queues=queues)
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                self._lost("listen", exc)
                await asyncio.sleep(_OUTAGE_PAUSE)
