"""A daily schedule's runs, stored and submitted: each day's run submits one job per target (a
customer) spread over its window, once per day whatever the restarts.

How "once per day" holds: a run is recorded by its local date in ``scrapeflow_schedule_runs``
(primary key: schedule name and date) in the same transaction as its plan — one row per target
in ``scrapeflow_schedule_slots`` with the time it is due. A second process, or the same one
after a restart, finds the date taken and plans nothing; it only submits the slots still due.

How each slot is submitted once: a process first claims the slot (a conditional update that
only one process wins, with a lease), then submits its job and records the job's id. A process
that dies between the claim and the record leaves the slot to be claimed again when the lease
ends; the job's dedupe key turns that second submission into the same job if the first is
still queued or running (and a job's effects are idempotent anyway: every queue here delivers
at least once).

A fire missed while no process ran is made up when one starts before the fire's window ends (or
within :data:`~scrapeflow.jobs._schedule.MAKE_UP` when the window is shorter); its slots are
spread over what is left of the window. An expression that fires several times a day runs at
the first fire of each day. Runs older than :data:`KEEP` are deleted when a new one is planned.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from types import TracebackType

from sqlalchemy import (
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    and_,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from scrapeflow._util.logs import get_logger
from scrapeflow._util.tasks import stop_task
from scrapeflow.db import UTCDateTime, create_tables
from scrapeflow.jobs._schedule import DailySchedule

__all__ = [
    "KEEP",
    "ScheduleRun",
    "Scheduler",
    "schedule_runs_table",
    "schedule_slots_table",
]

_log = get_logger(__name__)

STALE = timedelta(hours=24)
"""Slots of a run older than this are no longer submitted (the next day's run has them)."""
KEEP = timedelta(days=30)
"""Runs are kept this long (what ``runs`` can show)."""
LEASE = timedelta(minutes=10)
"""How long a claimed slot waits for its job's id before another process may claim it."""
_IDLE = 60.0
"""Seconds the scheduler sleeps at most between two looks (a clock change, a restored DB)."""

metadata = MetaData()
schedule_runs_table = Table(
    "scrapeflow_schedule_runs",
    metadata,
    Column("schedule", String(64), nullable=False),
    Column("run_date", String(10), nullable=False),
    Column("fire_at", UTCDateTime, nullable=False),
    Column("planned_at", UTCDateTime, nullable=False),
    Column("planned", Integer, nullable=False),
    PrimaryKeyConstraint("schedule", "run_date"),
)
schedule_slots_table = Table(
    "scrapeflow_schedule_slots",
    metadata,
    Column("schedule", String(64), nullable=False),
    Column("run_date", String(10), nullable=False),
    Column("target", String(200), nullable=False),
    Column("due_at", UTCDateTime, nullable=False),
    Column("claimed_by", String(32)),
    Column("claimed_at", UTCDateTime),
    Column("job_id", String(32)),
    Column("submitted_at", UTCDateTime),
    PrimaryKeyConstraint("schedule", "run_date", "target"),
    Index("ix_scrapeflow_schedule_slots_due", "schedule", "job_id", "due_at"),
)


@dataclass(frozen=True)
class ScheduleRun:
    """One day's run as recorded: its targets planned, submitted, and expired (still without a
    job a day after they were due)."""

    run_date: date
    fire_at: datetime
    planned_at: datetime
    planned: int
    submitted: int
    expired: int
    last_due_at: datetime | None

    @property
    def complete(self) -> bool:
        """Every planned target has its job, or never will."""
        return self.submitted + self.expired >= self.planned


Targets = Callable[[], Awaitable[Sequence[str]]]
"""Every target of a run (the customers' ids), read when the run is planned."""
Submit = Callable[[str], Awaitable[str]]
"""Submits one target's job; returns the job's id (the same job when one is already active)."""


class Scheduler:
    """Runs a :class:`~scrapeflow.jobs.DailySchedule` in the background of a service: plans each
    day's run once, submits each slot when due. Use as an async context manager; :meth:`tick`
    is one pass (what the loop calls, and what a test calls with its own clock).

    Several processes on one database may each run one: the run's row decides who plans, and a
    slot's claim decides who submits it.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        schedule: DailySchedule,
        *,
        targets: Targets,
        submit: Submit,
        name: str = "daily-refresh",
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.engine = engine
        self.schedule = schedule
        self.name = name
        self.owner = secrets.token_hex(8)
        self._targets = targets
        self._submit = submit
        self._clock = clock or (lambda: datetime.now(UTC))
        self._task: asyncio.Task[None] | None = None
        self.checked_at: datetime | None = None
        """When this scheduler's last pass ended (None before the first)."""

    async def open(self) -> None:
        """Create the schedule's tables when missing."""
        await create_tables(self.engine, metadata)

    async def __aenter__(self) -> Scheduler:
        await self.open()
        self._task = asyncio.create_task(self._loop(), name=f"scheduler {self.name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await stop_task(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                wake_at = await self.tick(self._clock())
                self.checked_at = self._clock()
            except Exception as exc:  # a database hiccup: look again soon, never stop
                _log.warning("schedule pass failed", schedule=self.name, error=str(exc))
                wake_at = self._clock() + timedelta(seconds=10)
            delay = (wake_at - self._clock()).total_seconds()
            await asyncio.sleep(min(max(delay, 0.05), _IDLE))

    async def tick(self, now: datetime) -> datetime:
        """Plan the day's run if its fire has come and nobody planned it, submit what is due;
        returns when to look again."""
        fire = self.schedule.last_fire(now)
        if now < self.schedule.make_up_until(fire):
            await self._plan(fire, now)
        await self._submit_due(now)
        upcoming = [self.schedule.next_fire(now)]
        due = await self._next_due(now)
        if due is not None:
            upcoming.append(due)
        return min(upcoming)

    async def next_run(self, now: datetime) -> datetime:
        """The next fire that will plan a run (not a second fire of a day already run)."""
        runs = await self.runs(now, limit=1)
        taken = runs[0].run_date if runs else None
        return self.schedule.next_run(now, taken)

    async def _plan(self, fire: datetime, now: datetime) -> None:
        run_date = self.schedule.run_date(fire).isoformat()
        runs = schedule_runs_table.c
        async with self.engine.connect() as connection:
            taken = await connection.scalar(
                select(func.count()).where(runs.schedule == self.name, runs.run_date == run_date)
            )
        if taken:
            return
        slots = self.schedule.spread(fire, await self._targets(), now=now)
        oldest_kept = (self.schedule.run_date(fire) - KEEP).isoformat()
        try:
            async with self.engine.begin() as connection:
                await connection.execute(
                    insert(schedule_runs_table).values(
                        schedule=self.name,
                        run_date=run_date,
                        fire_at=fire,
                        planned_at=now,
                        planned=len(slots),
                    )
                )
                if slots:
                    await connection.execute(
                        insert(schedule_slots_table),
                        [
                            {
                                "schedule": self.name,
                                "run_date": run_date,
                                "target": target,
                                "due_at": due,
                            }
                            for target, due in slots
                        ],
                    )
                for table in (schedule_slots_table, schedule_runs_table):
                    await connection.execute(
                        delete(table).where(
                            table.c.schedule == self.name, table.c.run_date < oldest_kept
                        )
                    )
        except IntegrityError:
            return  # another process planned the day first
        _log.info("scheduled run planned", schedule=self.name, date=run_date, targets=len(slots))

    async def _submit_due(self, now: datetime) -> None:
        slots = schedule_slots_table.c
        async with self.engine.connect() as connection:
            due = (
                await connection.execute(
                    select(slots.run_date, slots.target)
                    .where(
                        slots.schedule == self.name,
                        slots.job_id.is_(None),
                        slots.due_at <= now,
                        slots.due_at > now - STALE,
                    )
                    .order_by(slots.due_at)
                )
            ).all()
        for run_date, target in due:
            if not await self._claim(run_date, target, now):
                continue  # another process has it
            try:
                job_id = await self._submit(target)
            except Exception as exc:  # this target only; its claim lapses and it is tried again
                _log.warning(
                    "scheduled job not submitted",
                    schedule=self.name,
                    target=target,
                    error=type(exc).__name__,
                )
                continue
            async with self.engine.begin() as connection:
                await connection.execute(
                    update(schedule_slots_table)
                    .where(self._slot(run_date, target), slots.job_id.is_(None))
                    .values(job_id=job_id, submitted_at=now)
                )

    def _slot(self, run_date: str, target: str) -> ColumnElement[bool]:
        slots = schedule_slots_table.c
        return and_(slots.schedule == self.name, slots.run_date == run_date, slots.target == target)

    async def _claim(self, run_date: str, target: str, now: datetime) -> bool:
        """Take the slot for this process; False when another holds it or submitted it."""
        slots = schedule_slots_table.c
        async with self.engine.begin() as connection:
            done = await connection.execute(
                update(schedule_slots_table)
                .where(
                    self._slot(run_date, target),
                    slots.job_id.is_(None),
                    or_(slots.claimed_at.is_(None), slots.claimed_at < now - LEASE),
                )
                .values(claimed_by=self.owner, claimed_at=now)
            )
        return bool(done.rowcount)

    async def _next_due(self, now: datetime) -> datetime | None:
        slots = schedule_slots_table.c
        async with self.engine.connect() as connection:
            found: datetime | None = await connection.scalar(
                select(func.min(slots.due_at)).where(
                    slots.schedule == self.name, slots.job_id.is_(None), slots.due_at > now
                )
            )
        return found

    async def runs(self, now: datetime, limit: int = 7) -> list[ScheduleRun]:
        """The latest runs, newest first, as they stand at ``now``."""
        runs, slots = schedule_runs_table.c, schedule_slots_table.c
        counts = (
            select(
                slots.run_date,
                func.count(slots.job_id).label("submitted"),
                func.sum(
                    case((and_(slots.job_id.is_(None), slots.due_at <= now - STALE), 1), else_=0)
                ).label("expired"),
                func.max(slots.due_at).label("last_due_at"),
            )
            .where(slots.schedule == self.name)
            .group_by(slots.run_date)
            .subquery()
        )
        query = (
            select(schedule_runs_table, counts.c.submitted, counts.c.expired, counts.c.last_due_at)
            .outerjoin(counts, counts.c.run_date == runs.run_date)
            .where(runs.schedule == self.name)
            .order_by(runs.run_date.desc())
            .limit(limit)
        )
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        return [
            ScheduleRun(
                run_date=date.fromisoformat(row.run_date),
                fire_at=row.fire_at,
                planned_at=row.planned_at,
                planned=row.planned,
                submitted=int(row.submitted or 0),
                expired=int(row.expired or 0),
                last_due_at=row.last_due_at,
            )
            for row in rows
        ]

    async def job_ids(self, run_date: date) -> list[str]:
        """The jobs a run submitted so far."""
        slots = schedule_slots_table.c
        async with self.engine.connect() as connection:
            found = await connection.scalars(
                select(slots.job_id).where(
                    slots.schedule == self.name,
                    slots.run_date == run_date.isoformat(),
                    slots.job_id.is_not(None),
                )
            )
            return [job_id for job_id in found if job_id is not None]
