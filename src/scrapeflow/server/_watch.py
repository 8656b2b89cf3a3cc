"""The service's own watchdog: every little while, one pass of the bank watchdog
(:func:`~scrapeflow.banking.run_watchdog`), so nothing a dead or broken launch left in progress
waits for someone to run ``scrapeflow bank watchdog`` by hand."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import TracebackType

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow._util.logs import get_logger
from scrapeflow._util.tasks import stop_task
from scrapeflow.config import Settings
from scrapeflow.jobs import JobQueue

__all__ = ["ServiceWatchdog"]

_log = get_logger(__name__)
_LONGEST_PAUSE = 60.0


class ServiceWatchdog:
    """Runs the bank watchdog every ``min(60 s, a third of watchdog_minutes)`` while entered.

    A pass puts back the jobs whose process died and resets the accesses and customers stuck in
    progress that no live job holds (stale past ``watchdog_minutes`` and three of their
    launcher's heartbeats). A failing pass is logged and tried again at the next one.
    """

    def __init__(
        self,
        queue: JobQueue,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
    ) -> None:
        self.queue = queue
        self.sessions = sessions
        self.limit = timedelta(minutes=settings.watchdog_minutes)
        self.heartbeat = settings.heartbeat
        self.pause = min(_LONGEST_PAUSE, self.limit.total_seconds() / 3)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ServiceWatchdog:
        self._task = asyncio.create_task(self._watch(), name="bank-watchdog")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await stop_task(self._task)

    async def watch_once(self) -> None:
        from scrapeflow.banking import run_watchdog

        report = await run_watchdog(
            self.queue, self.sessions, limit=self.limit, heartbeat=self.heartbeat
        )
        if report.requeued or report.failed or report.accesses or report.customers:
            _log.warning(
                "watchdog",
                requeued=len(report.requeued),
                failed=len(report.failed),
                accesses=len(report.accesses),
                customers=len(report.customers),
            )

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.pause)
            try:
                await self.watch_once()
            except Exception as exc:  # a database hiccup: the next pass tries again
                _log.error("watchdog pass failed", error=repr(exc)[:300])
