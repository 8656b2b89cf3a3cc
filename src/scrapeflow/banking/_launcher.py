"""The launcher (the seed's MainLauncher): refresh a customer, one scraper per access at once.

``refresh(customer)``:

1. marks the customer "in progress" — atomically, so two refreshes of one customer cannot run
   together (the second gets :class:`~scrapeflow.errors.RefreshInProgress`) — and each access;
2. runs one scraper per access in parallel, under limits per bank and overall and a time limit
   per access; each scraper's batches go through the write queue as soon as they are read;
3. records each access's result code, detail, counts and times, and its encrypted state;
4. marks the customer "all updated".

Every batch landed and every access finished is an event (``on_event``) for live delivery, and
the launch writes one log file. Several customers may be refreshed at once
(:meth:`Launcher.refresh_many`); they share the limits, the HTTP client and the write queue.
Every database write — the scrapers' batches and the launcher's own state changes — goes through
the write queue. While it holds accesses (queued or running), the launcher stamps their
``heartbeat_at`` every ``heartbeat`` seconds: the watchdog resets only accesses whose heartbeat
stopped, so a long queue is never mistaken for a dead launch.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import secrets
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.banking._directory import find_customer
from scrapeflow.banking._events import EventKind, EventSink, LaunchEvent
from scrapeflow.banking._launchlog import LaunchLog
from scrapeflow.banking._models import Access, Customer, FinancialEntity
from scrapeflow.banking._registry import get_scraper
from scrapeflow.banking._results import ResultCode, ScrapeState
from scrapeflow.banking._scraper import (
    AccessSink,
    Credential,
    IncrementalPolicy,
    ScrapeContext,
    result_for,
)
from scrapeflow.banking._vault import CredentialVault
from scrapeflow.banking._writequeue import WriteQueue, writers_for
from scrapeflow.banking._writer import SqlWriter, Writer
from scrapeflow.db import create_engine, session_factory
from scrapeflow.errors import InputError, RefreshInProgress, UnknownScraper, VaultError
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.proxies import ProxyProvider

__all__ = ["AccessReport", "LaunchLimits", "LaunchReport", "Launcher"]

_log = get_logger(__name__)
T = TypeVar("T")
Today = Callable[[], date | Awaitable[date]]


@dataclass(frozen=True, slots=True)
class LaunchLimits:
    """How much runs at once, and for how long."""

    per_bank: int = 50
    """Accesses scraped at once at one bank (all customers together)."""
    overall: int = 200
    """Accesses scraped at once in all."""
    access_timeout: float = 300.0
    """Seconds one access's scrape may take before it ends with the timeout code."""
    heartbeat: float = 30.0
    """Seconds between two heartbeats of the accesses a launcher holds."""

    def __post_init__(self) -> None:
        if min(self.per_bank, self.overall) < 1 or min(self.access_timeout, self.heartbeat) <= 0:
            raise ValueError("launch limits must be positive")


@dataclass(slots=True)
class AccessReport:
    """How one access's scrape ended."""

    access_id: int
    bank: str
    code: ResultCode
    detail: str = ""
    accounts: int = 0
    movements: int = 0
    seconds: float = 0.0
    balances_seconds: float | None = None
    """From the launch's start to the last accounts batch (balances) landing."""

    @property
    def message(self) -> str:
        return self.code.message


@dataclass(slots=True)
class LaunchReport:
    """What one refresh did."""

    launch_id: str
    customer_id: int
    external_id: str
    accesses: list[AccessReport] = field(default_factory=list)
    seconds: float = 0.0
    log_file: Path | None = None
    refused: str | None = None
    """Why the customer was not refreshed at all (already being refreshed), else None."""

    @property
    def ok(self) -> bool:
        return self.refused is None and all(a.code.ok for a in self.accesses)

    @property
    def balances_seconds(self) -> float | None:
        """When the last balance of the customer landed (None: no access got that far)."""
        times = [a.balances_seconds for a in self.accesses if a.balances_seconds is not None]
        return max(times) if times else None


@dataclass(slots=True)
class _AccessJob:
    access_id: int
    bank: str
    login: str
    secret: bytes
    state: bytes | None


class Launcher:
    """Refreshes customers. Use as an async context manager (it owns engine, HTTP, queue).

    >>> async with Launcher(db_url, vault=vault, bank_urls=urls) as launcher:  # doctest: +SKIP
    ...     report = await launcher.refresh("customer-42")
    """

    def __init__(
        self,
        db_url: str,
        *,
        vault: CredentialVault,
        bank_urls: Mapping[str, str] | None = None,
        writer: Writer | None = None,
        http: HttpClient | None = None,
        http_config: HttpConfig | None = None,
        proxy_provider: ProxyProvider | None = None,
        limits: LaunchLimits | None = None,
        policy: IncrementalPolicy | None = None,
        today: Today | None = None,
        log_dir: Path | None = None,
        on_event: EventSink | None = None,
        writers: int | None = None,
    ) -> None:
        self.db_url = db_url
        self.vault = vault
        self.bank_urls = dict(bank_urls or {})
        self.limits = limits or LaunchLimits()
        self.policy = policy or IncrementalPolicy()
        self.today = today or (lambda: datetime.now(UTC).date())
        self.log_dir = log_dir
        self.on_event = on_event
        self._writer = writer
        self._http = http
        self._owns_http = http is None
        self._http_config = http_config or HttpConfig(max_connections=400)
        self._proxy_provider = proxy_provider
        self._writers = writers or writers_for(db_url)
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        self._queue: WriteQueue | None = None
        self._overall = asyncio.Semaphore(self.limits.overall)
        self._per_bank: dict[str, asyncio.Semaphore] = {}
        self._held: set[int] = set()  # accesses this launcher holds, queued or running
        self._heartbeat: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Launcher:
        self._engine = create_engine(self.db_url)
        self._sessions = session_factory(self._engine)
        if self._writer is None:
            self._writer = SqlWriter(self._sessions)
        if self._http is None:
            self._http = HttpClient(self._http_config, proxy_provider=self._proxy_provider)
        if self._owns_http:
            await self._http.__aenter__()
        self._queue = WriteQueue(writers=self._writers)
        await self._queue.__aenter__()
        self._heartbeat = asyncio.create_task(self._beat(), name="launcher-heartbeat")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        if self._queue is not None:
            await self._queue.close()
        if self._owns_http and self._http is not None:
            await self._http.aclose()
        if self._engine is not None:
            await self._engine.dispose()

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        if self._sessions is None:
            raise RuntimeError("use the launcher as 'async with Launcher(...)'")
        return self._sessions

    async def _write(self, write: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """One transaction of the launcher's own, through the write queue."""
        assert self._queue is not None

        async def run() -> T:
            async with self.sessions() as session, session.begin():
                return await write(session)

        return await self._queue.submit(run)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.limits.heartbeat)
            held = list(self._held)
            if not held:
                continue
            try:
                await self._write(partial(_stamp_heartbeats, ids=held))
            except Exception as exc:  # the next beat tries again; the watchdog allows several
                _log.warning("heartbeat failed", error=repr(exc))

    # -- refreshing customers ----------------------------------------------------------------

    async def refresh_many(self, customers: Iterable[int | str]) -> list[LaunchReport]:
        """Refresh several customers at once, under the shared limits; reports in order.

        Every customer is looked up first: an unknown one raises :class:`InputError` before
        anything starts. A customer already being refreshed gets a report with ``refused``.
        """
        wanted = list(customers)
        async with self.sessions() as session:
            for customer in wanted:
                await find_customer(session, customer)
        outcomes = await asyncio.gather(
            *(self._refresh_or_refuse(c) for c in wanted), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return [o for o in outcomes if isinstance(o, LaunchReport)]

    async def _refresh_or_refuse(self, customer: int | str) -> LaunchReport:
        try:
            return await self.refresh(customer)
        except RefreshInProgress as exc:
            async with self.sessions() as session:
                row = await find_customer(session, customer)
            return LaunchReport("-", row.id, row.external_id, refused=str(exc))

    async def refresh(
        self, customer: int | str, *, otp: Mapping[int, str] | None = None
    ) -> LaunchReport:
        """Refresh every access of ``customer`` (its id, or its external id when a str).

        ``otp`` maps access ids to one-time codes the customer supplied (two-factor logins).
        """
        started = time.monotonic()
        launch_id = secrets.token_hex(4)
        async with self.sessions() as session:
            found = await find_customer(session, customer)
            customer_id, external_id = found.id, found.external_id
        # The log file before the claim: an unwritable log directory must not leave the
        # customer marked "in progress".
        log = LaunchLog(self.log_dir, external_id=external_id, launch_id=launch_id)
        report = LaunchReport(launch_id, customer_id, external_id, log_file=log.path)
        try:
            await self._claim(customer_id, external_id)
        except BaseException:
            log.close()
            raise
        jobs: list[_AccessJob] = []
        try:
            jobs = await self._start_accesses(customer_id, log)
            log.write(
                "launch started",
                customer_id=customer_id,
                external_id=external_id,
                accesses=[{"access_id": j.access_id, "bank": j.bank} for j in jobs],
            )
            await self._emit(log, LaunchEvent(EventKind.LAUNCH_STARTED, launch_id, customer_id))
            report.accesses = list(
                await asyncio.gather(
                    *(self._run_access(j, launch_id, customer_id, log, started, otp) for j in jobs)
                )
            )
        finally:
            self._held.difference_update(j.access_id for j in jobs)
            try:
                # Shielded: a stop (Ctrl-C) still marks the customer; a second stop while
                # that write runs leaves it to the watchdog, but the log is closed anyway.
                await asyncio.shield(self._finish_customer(customer_id))
            finally:
                report.seconds = time.monotonic() - started
                log.write(
                    "launch finished",
                    seconds=round(report.seconds, 3),
                    results={a.access_id: a.code.value for a in report.accesses},
                )
                log.close()
        await self._emit(
            None,
            LaunchEvent(
                EventKind.LAUNCH_FINISHED,
                launch_id,
                customer_id,
                result_code=ResultCode.SUCCESS if report.ok else ResultCode.UNKNOWN,
            ),
        )
        return report

    async def scrape_access(self, access_id: int, *, otp: str | None = None) -> AccessReport:
        """Scrape one access alone (the seed's test launchers; resuming a two-factor login).

        The access is claimed as in a refresh (:class:`RefreshInProgress` when it is already
        being scraped); its customer's state is left alone.
        """
        started = time.monotonic()
        launch_id = secrets.token_hex(4)
        async with self.sessions() as session:
            access = await session.get(Access, access_id)
            if access is None:
                raise InputError(f"no access with id {access_id}")
            customer = await session.get(Customer, access.customer_id)
            entity = await session.get(FinancialEntity, access.entity_id)
            assert customer is not None and entity is not None
            customer_id, external_id, bank = customer.id, customer.external_id, entity.code
        log = LaunchLog(self.log_dir, external_id=external_id, launch_id=launch_id)
        try:
            job = await self._claim_access(access_id, bank)
            if job is None:
                raise RefreshInProgress(f"access {access_id} is already being scraped")
            try:
                otps = {access_id: otp} if otp else None
                return await self._run_access(job, launch_id, customer_id, log, started, otps)
            finally:
                self._held.discard(access_id)
        finally:
            log.close()

    # -- steps ------------------------------------------------------------------------------

    async def _claim(self, customer_id: int, external_id: str) -> None:
        async def claim(session: AsyncSession) -> int:
            result = await session.execute(
                update(Customer)
                .where(Customer.id == customer_id, Customer.scrape_state != ScrapeState.IN_PROGRESS)
                .values(
                    scrape_state=ScrapeState.IN_PROGRESS,
                    scrape_started_at=_now(),
                    scrape_finished_at=None,
                )
            )
            return _rowcount(result)

        if await self._write(claim) == 0:
            raise RefreshInProgress(
                f"customer {external_id!r} is already being refreshed "
                "(a stuck refresh is reset by the watchdog)"
            )

    async def _claim_access(self, access_id: int, bank: str) -> _AccessJob | None:
        """Mark one access in progress unless it already is; its job, or None."""

        async def claim(session: AsyncSession) -> _AccessJob | None:
            now = _now()
            result = await session.execute(
                update(Access)
                .where(Access.id == access_id, Access.scrape_state != ScrapeState.IN_PROGRESS)
                .values(
                    scrape_state=ScrapeState.IN_PROGRESS, scrape_started_at=now, heartbeat_at=now
                )
            )
            if _rowcount(result) == 0:
                return None
            access = await session.get(Access, access_id, populate_existing=True)
            assert access is not None
            return _AccessJob(access.id, bank, access.login, access.secret, access.session_state)

        job = await self._write(claim)
        if job is not None:
            self._held.add(access_id)
        return job

    async def _start_accesses(self, customer_id: int, log: LaunchLog) -> list[_AccessJob]:
        """Claim every access of the customer not already in progress, in one transaction."""

        async def claim(session: AsyncSession) -> tuple[list[_AccessJob], list[int]]:
            now = _now()
            claimed = set(
                (
                    await session.scalars(
                        update(Access)
                        .where(
                            Access.customer_id == customer_id,
                            Access.scrape_state != ScrapeState.IN_PROGRESS,
                        )
                        .values(
                            scrape_state=ScrapeState.IN_PROGRESS,
                            scrape_started_at=now,
                            heartbeat_at=now,
                        )
                        .returning(Access.id)
                    )
                ).all()
            )
            rows = (
                await session.execute(
                    select(Access, FinancialEntity.code)
                    .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
                    .where(Access.customer_id == customer_id)
                    .order_by(Access.id)
                    .execution_options(populate_existing=True)
                )
            ).all()
            jobs = [
                _AccessJob(a.id, code, a.login, a.secret, a.session_state)
                for a, code in rows
                if a.id in claimed
            ]
            return jobs, [a.id for a, _ in rows if a.id not in claimed]

        jobs, busy = await self._write(claim)
        self._held.update(job.access_id for job in jobs)
        for access_id in busy:  # a one-time code is being tried on it right now
            log.write("access skipped: already being scraped", access_id=access_id)
        return jobs

    async def _run_access(
        self,
        job: _AccessJob,
        launch_id: str,
        customer_id: int,
        log: LaunchLog,
        launch_started: float,
        otp: Mapping[int, str] | None,
    ) -> AccessReport:
        """Scrape one claimed access and store how it ended. Never raises but to cancel."""
        report = AccessReport(job.access_id, job.bank, ResultCode.UNKNOWN)
        started = time.monotonic()
        state, state_opened = self._open_state(job)
        sink: AccessSink | None = None
        try:
            # The bank's slot first: waiting for a busy bank must not hold an overall slot.
            async with self._bank_slot(job.bank), self._overall:
                started = time.monotonic()
                log.write("access started", access_id=job.access_id, bank=job.bank)
                scraper_cls = get_scraper(job.bank)
                base_url = self.bank_urls.get(job.bank) or getattr(scraper_cls, "default_url", None)
                if not base_url:
                    raise UnknownScraper(f"no URL configured for bank {job.bank!r}")

                async def on_batch(kind: EventKind, account_ref: str | None, count: int) -> None:
                    await self._emit(
                        log,
                        LaunchEvent(
                            kind,
                            launch_id,
                            customer_id,
                            job.access_id,
                            job.bank,
                            account_ref=account_ref,
                            count=count,
                        ),
                    )

                assert self._writer is not None and self._queue is not None
                assert self._http is not None
                sink = AccessSink(self._writer, self._queue, job.access_id, on_batch)
                sink.started = launch_started
                context = ScrapeContext(
                    access_id=job.access_id,
                    login=job.login,
                    credential=Credential(self.vault, job.secret),
                    base_url=base_url,
                    http=self._http,
                    sink=sink,
                    today=await self._today(),
                    policy=self.policy,
                    state=state,
                    otp=(otp or {}).get(job.access_id),
                )
                async with asyncio.timeout(self.limits.access_timeout):
                    await scraper_cls(context).main()
            report.code = ResultCode.SUCCESS
        except asyncio.CancelledError:
            report.code, report.detail = ResultCode.TIMEOUT, "the launch was stopped"
            self._measure(report, sink, started)
            await asyncio.shield(
                self._finish_access(job, report, state if state_opened else None, log, launch_id)
            )
            raise
        except Exception as exc:
            report.code, report.detail = result_for(exc)
            if isinstance(exc, UnknownScraper | VaultError):
                report.detail = str(exc)
            if report.code is ResultCode.UNKNOWN:
                log.write(
                    "access error",
                    access_id=job.access_id,
                    traceback="".join(traceback.format_exception(exc))[-2000:],
                )
        self._measure(report, sink, started)
        await asyncio.shield(
            self._finish_access(job, report, state if state_opened else None, log, launch_id)
        )
        await self._emit(
            None,
            LaunchEvent(
                EventKind.ACCESS_FINISHED,
                launch_id,
                customer_id,
                job.access_id,
                job.bank,
                count=report.movements,
                result_code=report.code.value,
            ),
        )
        return report

    @staticmethod
    def _measure(report: AccessReport, sink: AccessSink | None, started: float) -> None:
        report.seconds = time.monotonic() - started
        if sink is not None:
            report.accounts, report.movements = sink.accounts, sink.movements
            report.balances_seconds = sink.balances_at

    def _bank_slot(self, bank: str) -> asyncio.Semaphore:
        slot = self._per_bank.get(bank)
        if slot is None:
            slot = self._per_bank[bank] = asyncio.Semaphore(self.limits.per_bank)
        return slot

    def _open_state(self, job: _AccessJob) -> tuple[dict[str, Any], bool]:
        """The access's saved state, and whether it may be written back (it was readable)."""
        if not job.state:
            return {}, True
        try:
            loaded = json.loads(self.vault.decrypt(job.state))
        except (VaultError, ValueError):
            # Keep what is stored: another key (a rotation in progress) may still open it.
            _log.warning("access state unreadable; not using it", access_id=job.access_id)
            return {}, False
        return (loaded, True) if isinstance(loaded, dict) else ({}, False)

    async def _today(self) -> date:
        value = self.today()
        if inspect.isawaitable(value):
            value = await value
        assert isinstance(value, date)
        return value

    async def _finish_access(
        self,
        job: _AccessJob,
        report: AccessReport,
        state: dict[str, Any] | None,
        log: LaunchLog,
        launch_id: str,
    ) -> None:
        detail = redact(report.detail)[:500] or None
        values: dict[str, Any] = {
            "scrape_state": ScrapeState.IDLE,
            "result_code": report.code,
            "result_detail": detail,
            "scrape_finished_at": _now(),
            "accounts_count": report.accounts,
            "movements_count": report.movements,
        }
        if state is not None:  # None: never read, so never overwritten
            values["session_state"] = self.vault.encrypt(json.dumps(state)) if state else None
        try:
            await self._write(
                lambda session: session.execute(
                    update(Access).where(Access.id == job.access_id).values(**values)
                )
            )
        except Exception as exc:  # the watchdog will free it; the report still goes out
            _log.error(
                "could not store an access's result", access_id=job.access_id, error=repr(exc)
            )
        log.write(
            "access finished",
            access_id=job.access_id,
            bank=job.bank,
            launch_id=launch_id,
            result=report.code.value,
            detail=detail,
            accounts=report.accounts,
            movements=report.movements,
            seconds=round(report.seconds, 3),
            balances_seconds=report.balances_seconds,
        )

    async def _finish_customer(self, customer_id: int) -> None:
        try:
            await self._write(
                lambda session: session.execute(
                    update(Customer)
                    .where(Customer.id == customer_id)
                    .values(scrape_state=ScrapeState.ALL_UPDATED, scrape_finished_at=_now())
                )
            )
        except Exception as exc:  # the watchdog will free it
            _log.error(
                "could not mark a customer updated", customer_id=customer_id, error=repr(exc)
            )

    async def _emit(self, log: LaunchLog | None, event: LaunchEvent) -> None:
        if log is not None:
            log.write("batch", **{k: v for k, v in event.as_dict().items() if v is not None})
        if self.on_event is None:
            return
        try:
            result = self.on_event(event)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # a broken listener must not fail a scrape
            _log.warning("event listener failed", error=repr(exc))


async def _stamp_heartbeats(session: AsyncSession, *, ids: list[int]) -> None:
    await session.execute(update(Access).where(Access.id.in_(ids)).values(heartbeat_at=_now()))


def _now() -> datetime:
    return datetime.now(UTC)


def _rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)
