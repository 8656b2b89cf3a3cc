"""The service's daily run: every customer refreshed once a day, on the ``schedule`` settings
(cron, time zone, window), by the same ``bank.refresh`` job a client's refresh makes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow.config import Settings
from scrapeflow.jobs import DailySchedule, JobQueue, Scheduler

__all__ = ["DAILY_REFRESH", "daily_refresh", "daily_schedule"]

DAILY_REFRESH = "daily-refresh"
"""The schedule's name in the schedule tables."""


def daily_schedule(settings: Settings) -> DailySchedule | None:
    """The settings' schedule, or None when it is ``off``."""
    if settings.schedule == "off":
        return None
    return DailySchedule(
        settings.schedule,
        settings.schedule_timezone,
        timedelta(minutes=settings.schedule_window),
    )


def daily_refresh(
    settings: Settings,
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    queue: JobQueue,
) -> Scheduler | None:
    """The scheduler that refreshes every customer each day, or None when the schedule is off.
    A customer whose refresh is already queued or running joins that job."""
    schedule = daily_schedule(settings)
    if schedule is None:
        return None
    from scrapeflow.banking import BANK_REFRESH, Customer, refresh_key

    async def customers() -> Sequence[str]:
        async with sessions() as session:
            return list(await session.scalars(select(Customer.external_id)))

    async def refresh(customer: str) -> str:
        job = await queue.submit(
            BANK_REFRESH,
            {"customer": customer, "trigger": "schedule"},
            dedupe_key=refresh_key(customer),
        )
        return job.id

    return Scheduler(engine, schedule, targets=customers, submit=refresh, name=DAILY_REFRESH)
