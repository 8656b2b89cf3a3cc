"""Where jobs are kept: the :class:`JobStore` protocol, in SQL (:class:`SqlJobStore`) or memory.

Every state change is one conditional write, so two queue processes on one database never run
the same job twice: a claim is ``UPDATE … WHERE state = 'queued'``, a finish or a heartbeat
``… WHERE owner = me AND state = 'running'``, and only the row count says who won.

``claim`` and ``requeue_stalled`` take ``only`` (job ids): a process that runs just the jobs it
submitted (a command-line refresh beside the service) claims and sweeps those and leaves every
other job to the processes that run them. ``claim`` also takes the kinds of a lane (``kinds``,
or every kind but ``other_than``): refreshes are claimed in their own lane, never behind fetches.

Who submitted a job (``submitted_by``, an API key's id) and the customer it works for are
columns with their indexes: a key's listing, its quota of active jobs and an idempotency key's
job are each one indexed query. A table made before they existed gets them at start-up (the
columns are nullable); its older jobs get the customer their params name, and no submitter.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    false,
    func,
    insert,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.schema import CreateIndex
from sqlalchemy.sql.elements import ColumnElement

from scrapeflow.db import UTCDateTime, create_engine, create_tables
from scrapeflow.jobs._model import (
    ACTIVE_STATES,
    Job,
    JobScope,
    JobState,
    JobTally,
    customer_of,
)

__all__ = ["JobStore", "SqlJobStore", "jobs_table"]

metadata = MetaData()
jobs_table = Table(
    "scrapeflow_jobs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("dedupe_key", String(200)),
    Column("active_key", String(200)),
    Column("progress", JSON, nullable=False),
    Column("error", Text),
    Column("attempts", Integer, nullable=False, default=0),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime),
    Column("finished_at", UTCDateTime),
    Column("heartbeat_at", UTCDateTime),
    Column("owner", String(64)),
    # Added after the first release: nullable, so an older table gets them at start-up.
    Column("submitted_by", String(64)),
    Column("customer", String(64)),
    Column("cost", Integer),
    # What may be large, last: SQLite keeps a row's bytes in order, and reading a column that
    # follows a megabyte of params walked the megabyte's overflow pages (a listing of 200 such
    # jobs read 200 MB). A table made with them in the middle is rebuilt at start-up.
    Column("params", JSON, nullable=False),
    Column("result", JSON),
    # One active job per dedupe key: the key is copied to active_key while the job is queued
    # or running, and cleared when it ends. A plain unique index (NULLs never collide) works the
    # same on every dialect, where a partial index would not.
    Index("ix_scrapeflow_jobs_active_key", "active_key", unique=True),
    Index("ix_scrapeflow_jobs_state_created", "state", "created_at"),
    Index("ix_scrapeflow_jobs_kind_state", "kind", "state"),
    Index("ix_scrapeflow_jobs_submitted_by", "submitted_by", "state"),
    Index("ix_scrapeflow_jobs_customer", "customer", "id"),
    Index("ix_scrapeflow_jobs_dedupe_key", "dedupe_key", "created_at"),
)
_LATER_INDEXES = frozenset(
    {
        "ix_scrapeflow_jobs_submitted_by",
        "ix_scrapeflow_jobs_customer",
        "ix_scrapeflow_jobs_dedupe_key",
    }
)
"""The indexes added after the first release: made at start-up on a table that predates them."""
_FILL_BATCH = 500
_INDEX_LOCK = 0x5C4A9E_0003
"""The PostgreSQL advisory lock processes starting together take turns on to add them."""
_SUMMARY = [c for c in jobs_table.c if c.name not in ("params", "result")]
_BEAT = text(
    """
    UPDATE scrapeflow_jobs AS j
    SET heartbeat_at = :now, progress = CAST(v.progress AS JSON)
    FROM unnest(:ids, :owners, :progress) AS v(id, owner, progress)
    WHERE j.id = v.id AND j.owner = v.owner AND j.state = 'running'
    RETURNING j.id, j.cancel_requested
    """
)
"""Every running job of a worker stamped in one statement (PostgreSQL)."""


class JobStore(Protocol):
    """Keeps jobs. Every method is one atomic step; a queue process is its only writer of the
    jobs it owns."""

    async def open(self) -> None:
        """Create what is missing (the table); idempotent."""

    async def close(self) -> None: ...

    async def add(self, job: Job) -> Job:
        """Store a new job and return it (``job`` itself); if an active job holds its
        ``dedupe_key``, or a job of its id exists (a follow-up queued again), return that one."""

    async def get(self, job_id: str) -> Job | None: ...

    async def active(self, key: str | None) -> Job | None:
        """The queued or running job holding dedupe key ``key``, if any (None for None)."""

    async def find(
        self,
        *,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        """Newest first; ``before`` a job id (the page after it)."""

    async def latest(self, dedupe_key: str, since: datetime) -> Job | None:
        """The newest job created since ``since`` that held ``dedupe_key``, in any state."""

    async def summaries(
        self,
        *,
        scope: JobScope,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        """The jobs ``scope`` allows, newest first, without their params and result (left
        empty: they are not read); ``before`` a job id (the page after it)."""

    async def quota_used(self, submitted_by: str) -> int:
        """What the active jobs of API key ``submitted_by`` take of its quota (their cost)."""

    async def claim(
        self,
        owner: str,
        now: datetime,
        limit: int,
        *,
        only: Collection[str] | None = None,
        kinds: Collection[str] | None = None,
        other_than: Collection[str] = (),
    ) -> list[Job]:
        """Move up to ``limit`` queued jobs, oldest first, to running under ``owner``; with
        ``only``, jobs of those ids alone (none when it is empty); with ``kinds``, of those
        kinds alone; never of the kinds ``other_than`` (another lane's)."""

    async def heartbeat(
        self, owner: str, progress: dict[str, dict[str, int]], now: datetime
    ) -> set[str]:
        """Stamp the jobs ``owner`` runs (and store their progress); the ids of those whose
        cancellation was asked."""

    async def finish(
        self,
        job_id: str,
        owner: str,
        state: JobState,
        now: datetime,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        progress: dict[str, int] | None = None,
    ) -> bool:
        """End a job ``owner`` runs; False when it no longer holds it."""

    async def release(self, job_id: str, owner: str) -> None:
        """Put a running job back in the queue (a shutdown that leaves it resumable)."""

    async def tally(self, job_ids: Collection[str]) -> JobTally:
        """How many of these jobs are in each state, and when the last ended."""

    async def counts(self) -> dict[tuple[str, JobState], int]:
        """How many jobs there are of each kind in each state (pairs with none left out)."""

    async def cancel(self, job_id: str, now: datetime) -> Job | None:
        """Cancel a queued job at once; ask a running one to stop. The job after, or None."""

    async def requeue_stalled(
        self, older_than: datetime, max_attempts: int, *, only: Collection[str] | None = None
    ) -> list[str]:
        """Running jobs whose heartbeat stopped before ``older_than`` (their process died) go
        back to the queue, or fail once they have had ``max_attempts``; their ids. With
        ``only``, jobs of those ids alone."""


class SqlJobStore:
    """Jobs in the ``scrapeflow_jobs`` table of a SQL database (SQLite or PostgreSQL)."""

    def __init__(self, db_url: str, *, engine: AsyncEngine | None = None) -> None:
        self.db_url = db_url
        self._engine = engine
        self._owns_engine = engine is None

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("open the job store first")
        return self._engine

    async def open(self) -> None:
        if self._engine is None:
            self._engine = create_engine(self.db_url)
        await create_tables(self.engine, metadata)
        await self._large_columns_last()
        # create_tables adds the later columns to an older table, not their indexes.
        later = [ix for ix in jobs_table.indexes if ix.name in _LATER_INDEXES]
        async with self.engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                lock = text("SELECT pg_advisory_xact_lock(:key)")
                await connection.execute(lock, {"key": _INDEX_LOCK})
            for index in later:
                await connection.execute(CreateIndex(index, if_not_exists=True))
        await self._fill_customers()

    async def _large_columns_last(self) -> None:
        """On SQLite, a table made before params and result came last is rebuilt with them last,
        in one transaction (a crash leaves the old table whole); elsewhere nothing changes (a
        large value is stored apart from its row)."""
        if self.engine.dialect.name != "sqlite":
            return
        name = jobs_table.name
        async with self.engine.connect() as connection:
            info = f"PRAGMA table_info({name})"
            order = [r._mapping["name"] for r in await connection.exec_driver_sql(info)]
            if order.index("params") > order.index("state"):
                return
            await connection.exec_driver_sql("BEGIN IMMEDIATE")  # DDL too, in one transaction
            still = [r._mapping["name"] for r in await connection.exec_driver_sql(info)]
            if still != order:  # another process rebuilt it meanwhile
                await connection.rollback()
                return
            for index in jobs_table.indexes:
                await connection.exec_driver_sql(f"DROP INDEX IF EXISTS {index.name}")
            await connection.exec_driver_sql(f"ALTER TABLE {name} RENAME TO {name}__old")
            await connection.run_sync(jobs_table.create)
            columns = ", ".join(c.name for c in jobs_table.c)
            copy = f"INSERT INTO {name} ({columns}) SELECT {columns} FROM {name}__old"  # noqa: S608
            await connection.exec_driver_sql(copy)  # our table's own names, nothing given
            await connection.exec_driver_sql(f"DROP TABLE {name}__old")
            await connection.commit()

    async def _fill_customers(self) -> None:
        """Jobs stored before the customer column (their cost is empty) get the customer their
        params name, once: a restricted key's listing filters on it."""
        c = jobs_table.c
        # Only bank jobs name a customer: the others are marked in one statement, without
        # reading their params (a fetch or run job's may be a megabyte).
        async with self.engine.begin() as connection:
            await connection.execute(
                update(jobs_table).where(c.cost.is_(None), c.kind.not_like("bank.%")).values(cost=1)
            )
        while True:
            # Read, then write in a transaction of its own: on SQLite a transaction that read
            # and then writes is refused at once when another wrote meanwhile (no busy wait).
            async with self.engine.connect() as connection:
                rows = (
                    await connection.execute(
                        select(c.id, c.params)
                        .where(c.cost.is_(None), c.kind.like("bank.%"))
                        .limit(_FILL_BATCH)
                    )
                ).all()
            if not rows:
                return
            async with self.engine.begin() as connection:
                for row in rows:
                    params = json.loads(row.params) if isinstance(row.params, str) else row.params
                    customer = customer_of(params) if isinstance(params, dict) else None
                    await connection.execute(
                        update(jobs_table)
                        .where(c.id == row.id, c.cost.is_(None))
                        .values(customer=customer, cost=1)
                    )
            if len(rows) < _FILL_BATCH:
                return

    async def close(self) -> None:
        if self._owns_engine and self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def add(self, job: Job) -> Job:
        for _ in range(3):
            try:
                async with self.engine.begin() as connection:
                    await connection.execute(insert(jobs_table).values(**_row(job)))
            except IntegrityError:
                same = await self.get(job.id)
                if same is not None:  # a follow-up queued again: the one queued before
                    return same
                existing = await self.active(job.dedupe_key)
                if existing is not None:
                    return existing
                if job.dedupe_key is None:
                    raise
                continue  # the holder ended between the insert and the look-up: try again
            return job
        raise RuntimeError(f"could not store job {job.id}: its dedupe key keeps changing hands")

    async def active(self, key: str | None) -> Job | None:
        if key is None:
            return None
        async with self.engine.connect() as connection:
            found = (
                await connection.execute(select(jobs_table).where(jobs_table.c.active_key == key))
            ).first()
        return None if found is None else _job(found._mapping)

    async def get(self, job_id: str) -> Job | None:
        async with self.engine.connect() as connection:
            found = (
                await connection.execute(select(jobs_table).where(jobs_table.c.id == job_id))
            ).first()
        return None if found is None else _job(found._mapping)

    async def find(
        self,
        *,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        query = select(jobs_table).order_by(jobs_table.c.id.desc()).limit(limit)
        if kind is not None:
            query = query.where(jobs_table.c.kind == kind)
        if states:
            query = query.where(jobs_table.c.state.in_([s.value for s in states]))
        if before is not None:
            query = query.where(jobs_table.c.id < before)
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        return [_job(r._mapping) for r in rows]

    async def latest(self, dedupe_key: str, since: datetime) -> Job | None:
        c = jobs_table.c
        query = (
            select(jobs_table)
            .where(c.dedupe_key == dedupe_key, c.created_at >= since)
            .order_by(c.created_at.desc())
            .limit(1)
        )
        async with self.engine.connect() as connection:
            found = (await connection.execute(query)).first()
        return None if found is None else _job(found._mapping)

    async def summaries(
        self,
        *,
        scope: JobScope,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        c = jobs_table.c
        query = select(*_SUMMARY).where(_allowed(scope)).order_by(c.id.desc()).limit(limit)
        if kind is not None:
            query = query.where(c.kind == kind)
        if states:
            query = query.where(c.state.in_([s.value for s in states]))
        if before is not None:
            query = query.where(c.id < before)
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        return [_job(r._mapping) for r in rows]

    async def quota_used(self, submitted_by: str) -> int:
        c = jobs_table.c
        query = select(func.coalesce(func.sum(func.coalesce(c.cost, 1)), 0)).where(
            c.submitted_by == submitted_by,
            c.state.in_([s.value for s in ACTIVE_STATES]),
        )
        async with self.engine.connect() as connection:
            return int((await connection.execute(query)).scalar_one())

    async def counts(self) -> dict[tuple[str, JobState], int]:
        c = jobs_table.c
        async with self.engine.connect() as connection:
            rows = await connection.execute(
                select(c.kind, c.state, func.count()).group_by(c.kind, c.state)
            )
            return {(kind, JobState(state)): count for kind, state, count in rows}

    async def tally(self, job_ids: Collection[str]) -> JobTally:
        ids = list(job_ids)
        tally = JobTally()
        c = jobs_table.c
        async with self.engine.connect() as connection:
            for start in range(0, len(ids), 500):  # bounded IN lists on every dialect
                rows = await connection.execute(
                    select(c.state, func.count(), func.max(c.finished_at))
                    .where(c.id.in_(ids[start : start + 500]))
                    .group_by(c.state)
                )
                for state, count, finished in rows:
                    tally.add(JobState(state), count, finished)
        return tally

    async def claim(
        self,
        owner: str,
        now: datetime,
        limit: int,
        *,
        only: Collection[str] | None = None,
        kinds: Collection[str] | None = None,
        other_than: Collection[str] = (),
    ) -> list[Job]:
        if limit < 1 or (only is not None and not only) or (kinds is not None and not kinds):
            return []
        query = (
            select(jobs_table.c.id)
            .where(jobs_table.c.state == JobState.QUEUED.value)
            .order_by(jobs_table.c.created_at, jobs_table.c.id)
            .limit(limit)
        )
        if only is not None:
            query = query.where(jobs_table.c.id.in_(list(only)))
        if kinds is not None:
            query = query.where(jobs_table.c.kind.in_(list(kinds)))
        if other_than:
            query = query.where(jobs_table.c.kind.not_in(list(other_than)))
        claimed: list[Job] = []
        async with self.engine.begin() as connection:
            candidates = (await connection.execute(query)).scalars()
            for job_id in list(candidates):
                won = await connection.execute(
                    update(jobs_table)
                    .where(jobs_table.c.id == job_id, jobs_table.c.state == JobState.QUEUED.value)
                    .values(
                        state=JobState.RUNNING.value,
                        owner=owner,
                        started_at=now,
                        heartbeat_at=now,
                        attempts=jobs_table.c.attempts + 1,
                    )
                )
                if won.rowcount == 1:
                    row = (
                        await connection.execute(
                            select(jobs_table).where(jobs_table.c.id == job_id)
                        )
                    ).one()
                    claimed.append(_job(row._mapping))
        return claimed

    async def heartbeat(
        self, owner: str, progress: dict[str, dict[str, int]], now: datetime
    ) -> set[str]:
        if not progress:
            return set()
        held = and_(jobs_table.c.owner == owner, jobs_table.c.state == JobState.RUNNING.value)
        async with self.engine.begin() as connection:
            for job_id, counts in progress.items():
                await connection.execute(
                    update(jobs_table)
                    .where(jobs_table.c.id == job_id, held)
                    .values(heartbeat_at=now, progress=counts)
                )
            asked = (
                await connection.execute(
                    select(jobs_table.c.id).where(
                        jobs_table.c.id.in_(list(progress)),
                        held,
                        jobs_table.c.cancel_requested.is_(True),
                    )
                )
            ).scalars()
            return set(asked)

    async def finish(
        self,
        job_id: str,
        owner: str,
        state: JobState,
        now: datetime,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        progress: dict[str, int] | None = None,
    ) -> bool:
        values: dict[str, Any] = {
            "state": state.value,
            "finished_at": now,
            "result": result,
            "error": error,
            "active_key": None,
            "owner": None,
        }
        if progress is not None:
            values["progress"] = progress
        async with self.engine.begin() as connection:
            done = await connection.execute(
                update(jobs_table)
                .where(
                    jobs_table.c.id == job_id,
                    jobs_table.c.owner == owner,
                    jobs_table.c.state == JobState.RUNNING.value,
                )
                .values(**values)
            )
        return bool(done.rowcount == 1)

    async def release(self, job_id: str, owner: str) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(
                update(jobs_table)
                .where(
                    jobs_table.c.id == job_id,
                    jobs_table.c.owner == owner,
                    jobs_table.c.state == JobState.RUNNING.value,
                )
                .values(state=JobState.QUEUED.value, owner=None, heartbeat_at=None)
            )

    # -- what a worker of several jobs writes in one statement (the procrastinate backend) --

    async def beat(
        self, runs: Mapping[str, tuple[str, dict[str, int]]], now: datetime
    ) -> dict[str, bool]:
        """Stamp the heartbeat and progress of running jobs, each under its run's owner
        (``{job id: (owner, progress)}``), in one statement on PostgreSQL: the ids still held,
        each with whether its cancel was asked (an id left out was taken over, or ended)."""
        if not runs:
            return {}
        if self.engine.dialect.name != "postgresql":
            return await self._beat_each(runs, now)
        ids = list(runs)
        query = _BEAT.bindparams(
            bindparam("now", type_=UTCDateTime()),
            bindparam("ids", type_=ARRAY(String)),
            bindparam("owners", type_=ARRAY(String)),
            bindparam("progress", type_=ARRAY(Text)),
        )
        async with self.engine.begin() as connection:
            rows = await connection.execute(
                query,
                {
                    "now": now,
                    "ids": ids,
                    "owners": [runs[job_id][0] for job_id in ids],
                    "progress": [json.dumps(runs[job_id][1]) for job_id in ids],
                },
            )
            return {row.id: bool(row.cancel_requested) for row in rows}

    async def _beat_each(
        self, runs: Mapping[str, tuple[str, dict[str, int]]], now: datetime
    ) -> dict[str, bool]:
        c = jobs_table.c
        held: dict[str, bool] = {}
        async with self.engine.begin() as connection:
            for job_id, (owner, counts) in runs.items():
                row = (
                    await connection.execute(
                        update(jobs_table)
                        .where(c.id == job_id, c.owner == owner, c.state == JobState.RUNNING.value)
                        .values(heartbeat_at=now, progress=counts)
                        .returning(c.id, c.cancel_requested)
                    )
                ).first()
                if row is not None:
                    held[row.id] = bool(row.cancel_requested)
        return held

    async def cancels_asked(self, job_ids: Collection[str]) -> set[str]:
        """Which of these running jobs a user asked to cancel: one indexed read."""
        if not job_ids:
            return set()
        c = jobs_table.c
        query = select(c.id).where(
            c.id.in_(list(job_ids)),
            c.cancel_requested.is_(True),
            c.state == JobState.RUNNING.value,
        )
        async with self.engine.connect() as connection:
            return set((await connection.execute(query)).scalars())

    async def states(
        self, job_ids: Collection[str]
    ) -> dict[str, tuple[JobState, str | None, datetime | None]]:
        """The state, owner and heartbeat of each of these jobs (unknown ids left out): one
        read."""
        c = jobs_table.c
        found: dict[str, tuple[JobState, str | None, datetime | None]] = {}
        ids = list(job_ids)
        async with self.engine.connect() as connection:
            for start in range(0, len(ids), 500):  # bounded IN lists on every dialect
                rows = await connection.execute(
                    select(c.id, c.state, c.owner, c.heartbeat_at).where(
                        c.id.in_(ids[start : start + 500])
                    )
                )
                found.update(
                    {row.id: (JobState(row.state), row.owner, row.heartbeat_at) for row in rows}
                )
        return found

    async def many(self, job_ids: Sequence[str]) -> list[Job]:
        """These jobs, in the order given (unknown ids left out): one read."""
        if not job_ids:
            return []
        async with self.engine.connect() as connection:
            rows = await connection.execute(
                select(jobs_table).where(jobs_table.c.id.in_(list(job_ids)))
            )
            found = {row.id: _job(row._mapping) for row in rows}
        return [found[job_id] for job_id in job_ids if job_id in found]

    async def finish_run(
        self,
        job_id: str,
        owner: str,
        state: JobState,
        now: datetime,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        progress: dict[str, int] | None = None,
    ) -> Job | None:
        """:meth:`finish` that returns the job as ended (None when ``owner`` no longer held
        it): one statement, and what a listener is told needs no second read."""
        c = jobs_table.c
        values: dict[str, Any] = {
            "state": state.value,
            "finished_at": now,
            "result": result,
            "error": error,
            "active_key": None,
            "owner": None,
        }
        if progress is not None:
            values["progress"] = progress
        async with self.engine.begin() as connection:
            row = (
                await connection.execute(
                    update(jobs_table)
                    .where(c.id == job_id, c.owner == owner, c.state == JobState.RUNNING.value)
                    .values(**values)
                    .returning(*jobs_table.c)
                )
            ).first()
        return None if row is None else _job(row._mapping)

    async def cancel(self, job_id: str, now: datetime) -> Job | None:
        async with self.engine.begin() as connection:
            await connection.execute(
                update(jobs_table)
                .where(jobs_table.c.id == job_id, jobs_table.c.state == JobState.QUEUED.value)
                .values(state=JobState.CANCELLED.value, finished_at=now, active_key=None)
            )
            await connection.execute(
                update(jobs_table)
                .where(jobs_table.c.id == job_id, jobs_table.c.state == JobState.RUNNING.value)
                .values(cancel_requested=True)
            )
        return await self.get(job_id)

    async def requeue_stalled(
        self, older_than: datetime, max_attempts: int, *, only: Collection[str] | None = None
    ) -> list[str]:
        if only is not None and not only:
            return []
        stalled = and_(
            jobs_table.c.state == JobState.RUNNING.value,
            jobs_table.c.heartbeat_at < older_than,
        )
        if only is not None:
            stalled = and_(stalled, jobs_table.c.id.in_(list(only)))
        async with self.engine.begin() as connection:
            ids = list((await connection.execute(select(jobs_table.c.id).where(stalled))).scalars())
            if not ids:
                return []
            await connection.execute(
                update(jobs_table)
                .where(stalled, jobs_table.c.id.in_(ids), jobs_table.c.attempts >= max_attempts)
                .values(
                    state=JobState.FAILED.value,
                    finished_at=older_than,
                    active_key=None,
                    owner=None,
                    error=f"gave up after {max_attempts} attempts: its process stopped each time",
                )
            )
            await connection.execute(
                update(jobs_table)
                .where(stalled, jobs_table.c.id.in_(ids))
                .values(state=JobState.QUEUED.value, owner=None, heartbeat_at=None)
            )
        return ids


def _row(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "params": job.params,
        "state": job.state.value,
        "dedupe_key": job.dedupe_key,
        "active_key": job.dedupe_key if job.state in ACTIVE_STATES else None,
        "progress": job.progress,
        "result": job.result,
        "error": job.error,
        "attempts": job.attempts,
        "cancel_requested": job.cancel_requested,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "heartbeat_at": job.heartbeat_at,
        "owner": job.owner,
        "submitted_by": job.submitted_by,
        "customer": job.customer,
        "cost": job.cost,
    }


def _allowed(scope: JobScope) -> ColumnElement[bool]:
    """:meth:`JobScope.allows` as a condition on the table (its indexed columns)."""
    c = jobs_table.c
    if scope.everything:
        return true()
    mine = c.submitted_by == scope.submitted_by if scope.submitted_by is not None else false()
    if not scope.customer_kinds:
        return mine
    theirs = c.customer.is_not(None)
    if scope.customers is not None:
        theirs = c.customer.in_(sorted(scope.customers))
    return or_(mine, and_(c.kind.in_(sorted(scope.customer_kinds)), theirs))


def _job(row: Any) -> Job:
    def loaded(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    # A summary's row has no params nor result: they stay empty.
    return Job(
        id=row["id"],
        kind=row["kind"],
        params=loaded(row.get("params")) or {},
        state=JobState(row["state"]),
        created_at=row["created_at"],
        dedupe_key=row["dedupe_key"],
        progress=loaded(row["progress"]) or {},
        result=loaded(row.get("result")),
        error=row["error"],
        attempts=row["attempts"],
        cancel_requested=bool(row["cancel_requested"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        heartbeat_at=row["heartbeat_at"],
        owner=row["owner"],
        submitted_by=row["submitted_by"],
        customer=row["customer"],
        cost=1 if row["cost"] is None else row["cost"],
    )
