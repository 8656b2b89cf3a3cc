"""When a daily run fires: a cron expression in a time zone, and the window its submissions are
spread over. Pure time arithmetic; :mod:`scrapeflow.jobs._scheduler` stores and runs the runs.

>>> from datetime import datetime, timedelta, UTC
>>> daily = DailySchedule("0 4 * * *", "Europe/Madrid", timedelta(hours=2))
>>> daily.next_fire(datetime(2026, 7, 1, 12, tzinfo=UTC)).isoformat()
'2026-07-02T02:00:00+00:00'
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

__all__ = ["MAKE_UP", "DailySchedule"]

MAKE_UP = timedelta(hours=1)
"""How late a missed fire is still made up when its window is shorter than this."""


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

    def next_run(self, now: datetime, taken: date | None) -> datetime:
        """The next fire that will run: after ``now``, on a day other than ``taken`` (the day
        whose run is already planned, when the expression fires again later that day)."""
        fire = self.next_fire(now)
        if taken is None or self.run_date(fire) != taken:
            return fire
        midnight = datetime.combine(taken + timedelta(days=1), time(), self.zone)
        return self.next_fire(midnight.astimezone(UTC) - timedelta(microseconds=1))

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
