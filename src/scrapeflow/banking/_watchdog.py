"""The watchdog (the seed's scraping_state_observer): frees what a dead launch left in progress.

A launch killed mid-way (``kill -9``, a crashed machine) leaves its customer and accesses marked
"in progress", which blocks the next refresh. A live launcher stamps the accesses it holds
(queued or running) with a heartbeat every ``LaunchLimits.heartbeat`` seconds.
:func:`reset_stuck` ends every access in progress whose heartbeat is older than ``limit`` with
the timeout code, then sets back to idle every customer in progress since before ``limit`` that
has no access in progress left. :class:`Watchdog` does it every ``interval``. Choose ``limit``
a few heartbeats long: a slow scrape or a long queue is never reset under a live launcher.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow._util.logs import get_logger
from scrapeflow.banking._models import Access, Customer
from scrapeflow.banking._results import ResultCode, ScrapeState

__all__ = ["StuckReset", "Watchdog", "reset_stuck"]

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class StuckReset:
    """What one pass reset: access ids and customer ids."""

    accesses: tuple[int, ...] = ()
    customers: tuple[int, ...] = ()


async def reset_stuck(
    sessions: async_sessionmaker[AsyncSession],
    *,
    limit: timedelta,
    now: datetime | None = None,
) -> StuckReset:
    """Reset accesses and customers in progress since before ``now - limit``. Idempotent."""
    now = now or datetime.now(UTC)
    cutoff = now - limit
    detail = f"reset by the watchdog: still in progress after {_human(limit)}"
    async with sessions() as session, session.begin():
        alive_at = func.coalesce(Access.heartbeat_at, Access.scrape_started_at)
        accesses = (
            await session.scalars(
                select(Access.id).where(
                    Access.scrape_state == ScrapeState.IN_PROGRESS,
                    or_(alive_at < cutoff, alive_at.is_(None)),
                )
            )
        ).all()
        if accesses:
            await session.execute(
                update(Access)
                .where(Access.id.in_(accesses), Access.scrape_state == ScrapeState.IN_PROGRESS)
                .values(
                    scrape_state=ScrapeState.IDLE,
                    result_code=ResultCode.TIMEOUT,
                    result_detail=detail,
                    scrape_finished_at=now,
                )
            )
        busy = (
            select(Access.id)
            .where(
                Access.customer_id == Customer.id,
                Access.scrape_state == ScrapeState.IN_PROGRESS,
            )
            .exists()
        )
        customers = (
            await session.scalars(
                select(Customer.id).where(
                    Customer.scrape_state == ScrapeState.IN_PROGRESS,
                    Customer.scrape_started_at < cutoff,
                    ~busy,
                )
            )
        ).all()
        if customers:
            await session.execute(
                update(Customer)
                .where(Customer.id.in_(customers), Customer.scrape_state == ScrapeState.IN_PROGRESS)
                .values(scrape_state=ScrapeState.IDLE, scrape_finished_at=now)
            )
    if accesses or customers:
        _log.warning("reset stuck scrapes", accesses=list(accesses), customers=list(customers))
    return StuckReset(tuple(accesses), tuple(customers))


class Watchdog:
    """Runs :func:`reset_stuck` every ``interval`` seconds until cancelled."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        limit: timedelta = timedelta(minutes=15),
        interval: float = 60.0,
    ) -> None:
        self.sessions = sessions
        self.limit = limit
        self.interval = interval
        self.resets = 0

    async def run(self) -> None:
        while True:
            try:
                found = await reset_stuck(self.sessions, limit=self.limit)
            except Exception as exc:  # a database hiccup must not kill the watchdog
                _log.warning("watchdog pass failed", error=repr(exc))
            else:
                self.resets += len(found.accesses) + len(found.customers)
            await asyncio.sleep(self.interval)


def _human(limit: timedelta) -> str:
    seconds = int(limit.total_seconds())
    if seconds % 3600 == 0 and seconds:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0 and seconds:
        return f"{seconds // 60} min"
    return f"{seconds} s"
