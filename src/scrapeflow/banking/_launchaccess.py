"""One claimed access scraped: its scraper built and run under the limits per bank and overall
and the time limit per access, then how it ended stored, whatever happened (a stop included).

Kept apart from :class:`~scrapeflow.banking.Launcher`, which decides which accesses a launch
claims and when it ends: this is the part that talks to a bank, the same for every access
whether it runs in a whole refresh or alone.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.banking._events import EventKind, LaunchEvent
from scrapeflow.banking._launchclaims import STOPPED, LaunchClaims
from scrapeflow.banking._launches import Launch
from scrapeflow.banking._launchlog import LaunchLog
from scrapeflow.banking._registry import get_scraper
from scrapeflow.banking._reports import AccessReport, LaunchLimits
from scrapeflow.banking._results import ResultCode
from scrapeflow.banking._scraper import (
    AccessSink,
    BasicScraper,
    Credential,
    IncrementalPolicy,
    ScrapeContext,
    result_for,
    write_failed,
)
from scrapeflow.banking._state import (
    UNCHANGED,
    ClaimedAccess,
    finish_access,
    read_session_state,
    seal_session_state,
)
from scrapeflow.banking._vault import CredentialVault
from scrapeflow.banking._writequeue import WriteQueue
from scrapeflow.banking._writer import Writer
from scrapeflow.errors import AccessFailed, UnknownScraper, VaultError
from scrapeflow.http import HttpClient

__all__ = ["AccessRunner", "BaseUrl", "Emit"]

_log = get_logger("scrapeflow.banking._launcher")  # the launcher's log, as before the split
BaseUrl = Callable[[str, type[BasicScraper]], str | None]
"""The URL a launch uses for a bank (None: none configured)."""
Emit = Callable[[LaunchLog | None, LaunchEvent], Awaitable[None]]
"""Tells an event (and writes it in the launch's log, when one is given)."""


class AccessRunner:
    """Scrapes the claimed accesses of a launcher's launches, sharing its limits, HTTP client
    and write queue (given by :meth:`open`)."""

    def __init__(
        self,
        *,
        vault: CredentialVault,
        policy: IncrementalPolicy,
        limits: LaunchLimits,
        claims: LaunchClaims,
        base_url: BaseUrl,
        emit: Emit,
    ) -> None:
        self.vault = vault
        self.policy = policy
        self.limits = limits
        self._claims = claims
        self._base_url = base_url
        self._emit = emit
        self._writer: Writer | None = None
        self._queue: WriteQueue | None = None
        self._http: HttpClient | None = None
        self._overall = asyncio.Semaphore(limits.overall)
        self._per_bank: dict[str, asyncio.Semaphore] = {}

    def open(self, *, writer: Writer, queue: WriteQueue, http: HttpClient) -> None:
        self._writer, self._queue, self._http = writer, queue, http

    async def run(self, job: ClaimedAccess, launch: Launch) -> AccessReport:
        """Scrape one claimed access and store how it ended. Never raises but to cancel."""
        report = AccessReport(job.access_id, job.bank, ResultCode.UNKNOWN)
        started = time.monotonic()
        kept = read_session_state(self.vault, job)  # None: unreadable, so never overwritten
        state = {} if kept is None else kept
        assert self._writer is not None and self._queue is not None
        sink = AccessSink(
            self._writer,
            self._queue,
            job.access_id,
            lambda kind, ref, count, stored: self._emit(
                launch.log, launch.event(kind, job, account_ref=ref, count=count, stored=stored)
            ),
        )
        sink.started = launch.started
        launch.begun.add(job.access_id)  # from here its end is stored below, whatever happens
        try:
            # The bank's slot first: waiting for a busy bank must not hold an overall slot.
            async with self._bank_slot(job.bank), self._overall:
                started = time.monotonic()
                launch.log.write("access started", access_id=job.access_id, bank=job.bank)
                scraper = self._scraper(job, sink, state, launch)
                async with asyncio.timeout(self.limits.access_timeout):
                    await scraper.main()
            short = sink.shortfall()
            if short is not None:  # read, but not stored as read: the page is not as it was
                raise AccessFailed(ResultCode.SITE_CHANGED, short)
            report.code = ResultCode.SUCCESS
        except asyncio.CancelledError:
            report.code, report.detail = ResultCode.TIMEOUT, STOPPED
            raise
        except Exception as exc:
            report.code, report.detail = result_for(exc)
            if write_failed(exc):  # the database, not the bank: what was read is not stored
                launch.lost.append(exc)
            if isinstance(exc, UnknownScraper | VaultError):
                report.detail = str(exc)
            if report.code is ResultCode.UNKNOWN:
                launch.log.write(
                    "access error",
                    access_id=job.access_id,
                    traceback="".join(traceback.format_exception(exc))[-2000:],
                )
        finally:
            report.seconds = time.monotonic() - started
            report.accounts, report.movements = sink.accounts, sink.movements
            report.accounts_stored = sink.accounts_stored
            report.movements_stored = sink.movements_stored
            report.balances_seconds = sink.balances_at
            # Shielded: a stopped launch still stores how each of its accesses ended.
            await asyncio.shield(self.finish(job, report, None if kept is None else state, launch))
        finished = launch.event(
            EventKind.ACCESS_FINISHED, job, count=report.movements, result_code=report.code.value
        )
        await self._emit(None, finished)
        return report

    def _scraper(
        self, job: ClaimedAccess, sink: AccessSink, state: dict[str, Any], launch: Launch
    ) -> BasicScraper:
        # Checked before the claim (Launcher._ready); an access added since still ends with a
        # code.
        scraper_cls = get_scraper(job.bank)
        base_url = self._base_url(job.bank, scraper_cls)
        if not base_url:
            raise UnknownScraper(f"no URL configured for bank {job.bank!r}")
        assert self._http is not None
        context = ScrapeContext(
            access_id=job.access_id,
            login=job.login,
            credential=Credential(self.vault, job.secret),
            base_url=base_url,
            http=self._http,
            sink=sink,
            today=launch.today,
            policy=self.policy,
            state=state,
            otp=launch.otp.get(job.access_id),
        )
        return scraper_cls(context)

    def _bank_slot(self, bank: str) -> asyncio.Semaphore:
        slot = self._per_bank.get(bank)
        if slot is None:
            slot = self._per_bank[bank] = asyncio.Semaphore(self.limits.per_bank)
        return slot

    async def finish(
        self,
        job: ClaimedAccess,
        report: AccessReport,
        state: dict[str, Any] | None,
        launch: Launch,
    ) -> None:
        """Store how the access ended (``state``: its session state, None to keep the stored
        one) and write it in the launch's log; a failed write is one the launch ``lost``."""
        detail = redact(report.detail)[:500] or None  # scrubbed before it is cut
        token = UNCHANGED if state is None else seal_session_state(self.vault, state)
        try:
            await self._claims.write(
                lambda session: finish_access(
                    session,
                    job.access_id,
                    report.code,
                    detail=detail,
                    accounts=report.accounts,
                    movements=report.movements,
                    accounts_stored=report.accounts_stored,
                    movements_stored=report.movements_stored,
                    session_state=token,
                )
            )
        except Exception as exc:  # the launch runs again (or the watchdog frees it)
            launch.lost.append(exc)
            _log.error(
                "could not store an access's result", access_id=job.access_id, error=repr(exc)
            )
        launch.log.write(
            "access finished",
            access_id=job.access_id,
            bank=job.bank,
            launch_id=launch.id,
            result=report.code.value,
            detail=detail,
            accounts=report.accounts,
            movements=report.movements,
            seconds=round(report.seconds, 3),
            balances_seconds=report.balances_seconds,
        )
