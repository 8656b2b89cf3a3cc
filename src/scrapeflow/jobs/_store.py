"""Where jobs are kept: the :class:`JobStore` protocol, in SQL (:class:`SqlJobStore`) or memory.

Every state change is one conditional write, so two queue processes on one database never run
the same job twice: a claim is ``UPDATE … WHERE state = 'queued'``, a finish or a heartbeat
``… WHERE owner = me AND state = 'running'``, and only the row count says who won.

``claim`` and ``requeue_stalled`` take ``only`` (job ids): a process that runs just the jobs it
submitted (a command-line refresh beside the service) claims and sweeps those and leaves every
other job to the processes that run them. ``claim`` also takes the kinds of a lane (``kinds``,
or every kind but ``other_than``): refreshes are claimed in their own lane, never behind fetches.

Who submitted a job (``submitted_by``, an API key's id) and the customer it works for are
columns with their indexes (the table is in ``_jobtable``): a key's listing, its quota of active
jobs and an idempotency key's job are each one indexed query. What a worker of several jobs
writes in one statement is in ``_workerwrites``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    false,
    func,
    insert,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from scrapeflow.db import create_engine, single_statements, write
from scrapeflow.jobs._jobtable import (
    ended_values,
    job_from_row,
    job_row,
    jobs_from_rows,
    jobs_table,
    upgrade_jobs_table,
)
from scrapeflow.jobs._model import (
    ACTIVE_STATES,
    Job,
    JobScope,
    JobState,
    JobTally,
)
from scrapeflow.jobs._workerwrites import WorkerWrites

__all__ = ["JobStore", "SqlJobStore"]

_SUMMARY = [c for c in jobs_table.c if c.name not in ("params", "result")]
_SUMMARY_PART = 50
"""Rows of a listing made into jobs at a time (the loop serves others between two parts)."""


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

    async def cancels_asked(self, job_ids: Collection[str]) -> set[str]:
        """Which of these running jobs a user asked to cancel: one read."""
        ...

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


class SqlJobStore(WorkerWrites):
    """Jobs in the ``scrapeflow_jobs`` table of a SQL database (SQLite or PostgreSQL)."""

    def __init__(self, db_url: str, *, engine: AsyncEngine | None = None) -> None:
        self.db_url = db_url
        self._engine = engine
        self._single: AsyncEngine | None = None
        self._owns_engine = engine is None

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("open the job store first")
        return self._engine

    @property
    def single(self) -> AsyncEngine:
        if self._single is None:
            self._single = single_statements(self.engine)
        return self._single

    async def open(self) -> None:
        if self._engine is None:
            self._engine = create_engine(self.db_url)
        await upgrade_jobs_table(self.engine)

    async def close(self) -> None:
        if self._owns_engine and self._engine is not None:
            await self._engine.dispose()
            self._engine = None
        self._single = None

    async def add(self, job: Job) -> Job:
        store = insert(jobs_table).values(**job_row(job))
        for _ in range(3):
            try:
                await write(self.single, lambda c: c.execute(store))
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

    async def add_all(self, jobs: Sequence[Job]) -> list[Job | Exception]:
        """:meth:`add` of each job, in one transaction when that can store them all, else one
        by one (one of them taken: an id or a dedupe key another job has; a bad one; the
        database away): in order, each job stored or found, or the error storing it."""
        if len(jobs) > 1:
            try:
                rows = [job_row(job) for job in jobs]
                await write(self.engine, lambda c: c.execute(insert(jobs_table), rows))
            except Exception:  # noqa: S110 - each finds its own way, and error, below
                pass
            else:
                return list(jobs)
        added: list[Job | Exception] = []
        for job in jobs:
            try:
                added.append(await self.add(job))
            except Exception as exc:
                added.append(exc)
        return added

    async def active(self, key: str | None) -> Job | None:
        if key is None:
            return None
        async with self.single.connect() as connection:
            found = (
                await connection.execute(select(jobs_table).where(jobs_table.c.active_key == key))
            ).first()
        return None if found is None else job_from_row(found._mapping)

    async def get(self, job_id: str) -> Job | None:
        async with self.single.connect() as connection:
            found = (
                await connection.execute(select(jobs_table).where(jobs_table.c.id == job_id))
            ).first()
        return None if found is None else job_from_row(found._mapping)

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
        async with self.single.connect() as connection:
            return jobs_from_rows((await connection.execute(query)).all())

    async def latest(self, dedupe_key: str, since: datetime) -> Job | None:
        c = jobs_table.c
        query = (
            select(jobs_table)
            .where(c.dedupe_key == dedupe_key, c.created_at >= since)
            .order_by(c.created_at.desc())
            .limit(1)
        )
        async with self.single.connect() as connection:
            found = (await connection.execute(query)).first()
        return None if found is None else job_from_row(found._mapping)

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
        jobs: list[Job] = []
        async with self.engine.connect() as connection:  # a cursor: in a transaction
            # In parts, each read an await apart: a page of 500 made in one go held the loop
            # ~20 ms, and a client listing in a loop made every other request wait for it.
            result = await connection.stream(query)
            async for rows in result.partitions(_SUMMARY_PART):
                jobs += jobs_from_rows(rows)
        return jobs

    async def quota_used(self, submitted_by: str) -> int:
        c = jobs_table.c
        query = select(func.coalesce(func.sum(func.coalesce(c.cost, 1)), 0)).where(
            c.submitted_by == submitted_by,
            c.state.in_([s.value for s in ACTIVE_STATES]),
        )
        async with self.single.connect() as connection:
            return int((await connection.execute(query)).scalar_one())

    async def counts(self) -> dict[tuple[str, JobState], int]:
        c = jobs_table.c
        async with self.single.connect() as connection:
            rows = await connection.execute(
                select(c.kind, c.state, func.count()).group_by(c.kind, c.state)
            )
            return {(kind, JobState(state)): count for kind, state, count in rows}

    async def tally(self, job_ids: Collection[str]) -> JobTally:
        ids = list(job_ids)
        tally = JobTally()
        c = jobs_table.c
        async with self.single.connect() as connection:
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
        if self.engine.dialect.name == "postgresql":
            # Claimers skip each other's rows instead of waiting for them to commit.
            query = query.with_for_update(skip_locked=True)
        c = jobs_table.c
        # One statement for them all, in autocommit on PostgreSQL: an empty poll is one round
        # trip, where a read then an update in a transaction were three or four. The picked
        # rows are a materialized CTE: as an ``IN (subquery)`` the planner may scan the
        # subquery again, and with SKIP LOCKED a rescan picks other rows (past the limit).
        picked = query.cte("picked").prefix_with("MATERIALIZED")
        claim = (
            update(jobs_table)
            .where(c.id == picked.c.id, c.state == JobState.QUEUED.value)
            .values(
                state=JobState.RUNNING.value,
                owner=owner,
                started_at=now,
                heartbeat_at=now,
                attempts=c.attempts + 1,
            )
            .returning(*c)
        )

        def take(connection: Connection) -> list[Job]:
            won = [job_from_row(row._mapping) for row in connection.execute(claim)]
            return sorted(won, key=lambda job: (job.created_at, job.id))  # the queue's order

        return await write(self.single, take)

    async def heartbeat(
        self, owner: str, progress: dict[str, dict[str, int]], now: datetime
    ) -> set[str]:
        if not progress:
            return set()
        held = and_(jobs_table.c.owner == owner, jobs_table.c.state == JobState.RUNNING.value)
        stamp = (
            update(jobs_table)
            .where(jobs_table.c.id == bindparam("job_id"), held)
            .values(
                heartbeat_at=now, progress=bindparam("counts", type_=jobs_table.c.progress.type)
            )
        )
        rows = [{"job_id": job_id, "counts": counts} for job_id, counts in progress.items()]
        asked = select(jobs_table.c.id).where(
            jobs_table.c.id.in_(list(progress)), held, jobs_table.c.cancel_requested.is_(True)
        )

        def stamp_all(connection: Connection) -> set[str]:
            connection.execute(stamp, rows)  # one statement for every job (executemany)
            return set(connection.execute(asked).scalars())

        return await write(self.engine, stamp_all)

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
        end = (
            update(jobs_table)
            .where(
                jobs_table.c.id == job_id,
                jobs_table.c.owner == owner,
                jobs_table.c.state == JobState.RUNNING.value,
            )
            .values(**ended_values(state, now, result, error, progress))
        )
        return await write(self.single, lambda c: c.execute(end).rowcount == 1)

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
