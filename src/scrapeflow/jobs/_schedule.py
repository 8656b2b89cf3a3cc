"""A daily schedule: a cron expression in a time zone, whose run submits one job per target
(a customer) spread over a window, once per day whatever the restarts.

How "once per day" holds: a run is recorded by its local date in ``scrapeflow_schedule_runs``
(primary key: schedule name and date) in the same transaction as its plan — one row per target
in ``scrapeflow_schedule_slots`` with the time it is due. A second process, or the same one
after a restart, finds the date taken and plans nothing; it only submits the slots still due.
A slot is marked with its job once submitted; a crash between the two submits it again, which
the job's dedupe key turns into the same job while that one is queued or running (and a job's
effects are idempotent anyway: every queue here delivers at least once).

A fire missed while no process ran is made up when one starts before the fire's window ends (or
within :data:`MAKE_UP` when the window is shorter); its slots are spread over what is left of
the window. A cron expression that fires several times a day runs at the first fire of each day.

>>> from datetime import datetime, timedelta, UTC
>>> daily = DailySchedule("0 4 * * *", "Europe/Madrid", timedelta(hours=2))
>>> daily.next_fire(datetime(2026, 7, 1, 12, tzinfo=UTC)).isoformat()
'2026-07-02T02:00:00+00:00'
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from types import TracebackType
from zoneinfo import ZoneInfo

from croniter import croniter
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    and_,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow.db import UTCDateTime

__all__ = [
    "MAKE_UP",
    "DailySchedule",
    "ScheduleRun",
    "Scheduler",
    "schedule_runs_table",
    "schedule_slots_table",
]

_log = get_logger(__name__)

MAKE_UP = timedelta(hours=1)
"""How late a missed fire is still made up when its window is shorter than this."""
_STALE = timedelta(hours=24)
"""Slots of a run older than this are no longer submitted (the next day's run has them)."""
_IDLE = 60.0
"""Seconds the scheduler sleeps at most between two looks (a clock change, a new customer)."""

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
    Column("job_id", String(32)),
    Column("submitted_at", UTCDateTime),
    PrimaryKeyConstraint("schedule", "run_date", "target"),
)


@dataclass(frozen=True)
class DailySchedule:
    """When a run fires (``cron`` in ``timezone``) and how long its submissions spread."""

    cron: str
    timezone: str
    window: timedelta

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def next_fire(self, after: datetime) -> datetime:
        """The first fire strictly after ``after`` (UTC)."""
        local = after.astimezone(self.zone)
        fire: datetime = croniter(self.cron, local).get_next(datetime)
        return fire.astimezone(UTC)

    def last_fire(self, at: datetime) -> datetime:
        """The latest fire at or before ``at`` (UTC)."""
        local = at.astimezone(self.zone)
        fire: datetime = croniter(self.cron, local + timedelta(microseconds=1)).get_prev(datetime)
        return fire.astimezone(UTC)

    def run_date(self, fire: datetime) -> date:
        """The local date a fire belongs to: the day's one run."""
        return fire.astimezone(self.zone).date()

    def make_up_until(self, fire: datetime) -> datetime:
        """Until when a missed ``fire`` is still run."""
        return fire + max(self.window, MAKE_UP)

    def spread(
        self, fire: datetime, targets: Sequence[str], *, now: datetime
    ) -> list[tuple[str, datetime]]:
        """Each target with its due time: evenly over what is left of the window after ``now``,
        in an order that changes every day (so the same customers are not always last)."""
        day = self.run_date(fire).isoformat()
        ordered = sorted(targets, key=lambda t: hashlib.sha256(f"{day}:{t}".encode()).digest())
        start = max(fire, now)
        span = max(fire + self.window - start, timedelta(0))
        count = len(ordered)
        return [(target, start + span * i / count) for i, target in enumerate(ordered)]


@dataclass(frozen=True)
class ScheduleRun:
    """One day's run as recorded: how many targets were planned and submitted so far."""

    run_date: date
    fire_at: datetime
    planned_at: datetime
    planned: int
    submitted: int
    last_due_at: datetime | None
    job_ids: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Every planned target has its job."""
        return self.submitted >= self.planned


Targets = Callable[[], Awaitable[Sequence[str]]]
"""Every target of a run (the customers' ids), read when the run is planned."""
Submit = Callable[[str], Awaitable[str]]
"""Submits one target's job; returns the job's id (the same job when one is already active)."""


class Scheduler:
    """Runs a :class:`DailySchedule` in the background of a service: plans each day's run once,
    submits each slot when due. Use as an async context manager; :meth:`tick` is one pass (what
    the loop calls, and what a test calls with its own clock).

    Several processes on one database may each run one: the run's row decides who plans, and a
    slot is submitted by whoever sees it due (the job's dedupe key makes two submissions one).
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
        self._targets = targets
        self._submit = submit
        self._clock = clock or (lambda: datetime.now(UTC))
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.checked_at: datetime | None = None
        """When this scheduler's last pass ended (None before the first)."""

    async def open(self) -> None:
        """Create the schedule's tables when missing."""
        async with self.engine.begin() as connection:
            await connection.run_sync(metadata.create_all, checkfirst=True)

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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                wake_at = await self.tick(self._clock())
                self.checked_at = self._clock()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a database hiccup: look again soon, never stop
                _log.warning("schedule pass failed", schedule=self.name, error=str(exc))
                wake_at = self._clock() + timedelta(seconds=10)
            delay = min(max((wake_at - self._clock()).total_seconds(), 0.05), _IDLE)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()

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

    async def _plan(self, fire: datetime, now: datetime) -> None:
        run_date = self.schedule.run_date(fire).isoformat()
        async with self.engine.connect() as connection:
            taken = await connection.scalar(
                select(func.count()).where(
                    schedule_runs_table.c.schedule == self.name,
                    schedule_runs_table.c.run_date == run_date,
                )
            )
        if taken:
            return
        slots = self.schedule.spread(fire, await self._targets(), now=now)
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
                        slots.due_at > now - _STALE,
                    )
                    .order_by(slots.due_at)
                )
            ).all()
        for run_date, target in due:
            job_id = await self._submit(target)
            async with self.engine.begin() as connection:
                await connection.execute(
                    update(schedule_slots_table)
                    .where(
                        slots.schedule == self.name,
                        slots.run_date == run_date,
                        slots.target == target,
                        slots.job_id.is_(None),
                    )
                    .values(job_id=job_id, submitted_at=now)
                )

    async def _next_due(self, now: datetime) -> datetime | None:
        slots = schedule_slots_table.c
        async with self.engine.connect() as connection:
            found: datetime | None = await connection.scalar(
                select(func.min(slots.due_at)).where(
                    slots.schedule == self.name, slots.job_id.is_(None), slots.due_at > now
                )
            )
        return found

    def poke(self) -> None:
        """Look again now (the clock moved, or a test wants a pass)."""
        self._wake.set()

    async def runs(self, limit: int = 7) -> list[ScheduleRun]:
        """The latest runs, newest first."""
        runs_c, slots = schedule_runs_table.c, schedule_slots_table.c
        async with self.engine.connect() as connection:
            rows = (
                await connection.execute(
                    select(schedule_runs_table)
                    .where(runs_c.schedule == self.name)
                    .order_by(runs_c.run_date.desc())
                    .limit(limit)
                )
            ).all()
            found = []
            for row in rows:
                jobs = (
                    await connection.execute(
                        select(slots.job_id, slots.due_at).where(
                            and_(slots.schedule == self.name, slots.run_date == row.run_date)
                        )
                    )
                ).all()
                found.append(
                    ScheduleRun(
                        run_date=date.fromisoformat(row.run_date),
                        fire_at=row.fire_at,
                        planned_at=row.planned_at,
                        planned=row.planned,
                        submitted=sum(1 for j in jobs if j.job_id is not None),
                        last_due_at=max((j.due_at for j in jobs), default=None),
                        job_ids=tuple(j.job_id for j in jobs if j.job_id is not None),
                    )
                )
        return found
