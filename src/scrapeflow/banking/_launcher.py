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
"""

from __future__ import annotations

import asyncio
import inspect
import json
import secrets
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow._logging import get_logger
from scrapeflow._redact import redact
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

    def __post_init__(self) -> None:
        if self.per_bank < 1 or self.overall < 1 or self.access_timeout <= 0:
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

    @property
    def ok(self) -> bool:
        return all(a.code.ok for a in self.accesses)

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
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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

    # -- refreshing customers ----------------------------------------------------------------

    async def refresh_many(self, customers: Iterable[int | str]) -> list[LaunchReport]:
        """Refresh several customers at once (under the shared limits), reports in order."""
        return list(await asyncio.gather(*(self.refresh(c) for c in customers)))

    async def refresh(
        self, customer: int | str, *, otp: Mapping[int, str] | None = None
    ) -> LaunchReport:
        """Refresh every access of ``customer`` (its id, or its external id when a str).

        ``otp`` maps access ids to one-time codes the customer supplied (two-factor logins).
        """
        started = time.monotonic()
        launch_id = secrets.token_hex(4)
        customer_row = await self._claim(customer)
        jobs = await self._start_accesses(customer_row.id)
        log = LaunchLog(self.log_dir, external_id=customer_row.external_id, launch_id=launch_id)
        report = LaunchReport(launch_id, customer_row.id, customer_row.external_id)
        report.log_file = log.path
        log.write(
            "launch started",
            customer_id=customer_row.id,
            external_id=customer_row.external_id,
            accesses=[{"access_id": j.access_id, "bank": j.bank} for j in jobs],
        )
        await self._emit(log, LaunchEvent(EventKind.LAUNCH_STARTED, launch_id, customer_row.id))
        try:
            report.accesses = list(
                await asyncio.gather(
                    *(
                        self._run_access(job, launch_id, customer_row.id, log, started, otp)
                        for job in jobs
                    )
                )
            )
        finally:
            await asyncio.shield(self._finish_customer(customer_row.id))
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
                customer_row.id,
                result_code=ResultCode.SUCCESS if report.ok else ResultCode.UNKNOWN,
            ),
        )
        return report

    async def scrape_access(self, access_id: int, *, otp: str | None = None) -> AccessReport:
        """Scrape one access alone (the seed's test launchers; resuming a two-factor login).

        The access's customer is not marked; the access is, as in a refresh.
        """
        started = time.monotonic()
        launch_id = secrets.token_hex(4)
        async with self.sessions() as session, session.begin():
            access = await session.get(Access, access_id)
            if access is None:
                raise InputError(f"no access with id {access_id}")
            customer = await session.get(Customer, access.customer_id)
            assert customer is not None
            claimed = await session.execute(
                update(Access)
                .where(Access.id == access_id, Access.scrape_state != ScrapeState.IN_PROGRESS)
                .values(scrape_state=ScrapeState.IN_PROGRESS, scrape_started_at=_now())
            )
            if _rowcount(claimed) == 0:
                raise RefreshInProgress(f"access {access_id} is already being scraped")
            entity = await session.get(FinancialEntity, access.entity_id)
            assert entity is not None
            job = _AccessJob(
                access.id, entity.code, access.login, access.secret, access.session_state
            )
        log = LaunchLog(self.log_dir, external_id=customer.external_id, launch_id=launch_id)
        try:
            otps = {access_id: otp} if otp else None
            return await self._run_access(job, launch_id, customer.id, log, started, otps)
        finally:
            log.close()

    # -- steps ------------------------------------------------------------------------------

    async def _claim(self, customer: int | str) -> Customer:
        async with self.sessions() as session, session.begin():
            where = (
                Customer.external_id == customer
                if isinstance(customer, str)
                else Customer.id == customer
            )
            row = await session.scalar(select(Customer).where(where))
            if row is None:
                raise InputError(f"no customer {customer!r}")
            claimed = await session.execute(
                update(Customer)
                .where(Customer.id == row.id, Customer.scrape_state != ScrapeState.IN_PROGRESS)
                .values(
                    scrape_state=ScrapeState.IN_PROGRESS,
                    scrape_started_at=_now(),
                    scrape_finished_at=None,
                )
            )
            if _rowcount(claimed) == 0:
                raise RefreshInProgress(
                    f"customer {row.external_id!r} is already being refreshed "
                    "(a stuck refresh is reset by the watchdog)"
                )
            return row

    async def _start_accesses(self, customer_id: int) -> list[_AccessJob]:
        async with self.sessions() as session, session.begin():
            rows = (
                await session.execute(
                    select(Access, FinancialEntity.code)
                    .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
                    .where(Access.customer_id == customer_id)
                    .order_by(Access.id)
                )
            ).all()
            await session.execute(
                update(Access)
                .where(Access.customer_id == customer_id)
                .values(scrape_state=ScrapeState.IN_PROGRESS, scrape_started_at=_now())
            )
            return [
                _AccessJob(access.id, code, access.login, access.secret, access.session_state)
                for access, code in rows
            ]

    async def _run_access(
        self,
        job: _AccessJob,
        launch_id: str,
        customer_id: int,
        log: LaunchLog,
        launch_started: float,
        otp: Mapping[int, str] | None,
    ) -> AccessReport:
        report = AccessReport(job.access_id, job.bank, ResultCode.UNKNOWN)
        started = time.monotonic()
        state: dict[str, Any] = {}
        sink: AccessSink | None = None
        try:
            async with self._overall, self._bank_slot(job.bank):
                log.write("access started", access_id=job.access_id, bank=job.bank)
                state = self._open_state(job)
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
            await asyncio.shield(
                self._finish_access(job, report, state, log, launch_id, customer_id)
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
        report.seconds = time.monotonic() - started
        if sink is not None:
            report.accounts, report.movements = sink.accounts, sink.movements
            report.balances_seconds = sink.balances_at
        await asyncio.shield(self._finish_access(job, report, state, log, launch_id, customer_id))
        return report

    def _bank_slot(self, bank: str) -> asyncio.Semaphore:
        slot = self._per_bank.get(bank)
        if slot is None:
            slot = self._per_bank[bank] = asyncio.Semaphore(self.limits.per_bank)
        return slot

    def _open_state(self, job: _AccessJob) -> dict[str, Any]:
        if not job.state:
            return {}
        try:
            loaded = json.loads(self.vault.decrypt(job.state))
        except (VaultError, ValueError):
            _log.warning("access state unreadable; starting afresh", access_id=job.access_id)
            return {}
        return loaded if isinstance(loaded, dict) else {}

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
        state: dict[str, Any],
        log: LaunchLog,
        launch_id: str,
        customer_id: int,
    ) -> None:
        detail = redact(report.detail)[:500] or None
        values: dict[str, Any] = {
            "scrape_state": ScrapeState.IDLE,
            "result_code": report.code,
            "result_detail": detail,
            "scrape_finished_at": _now(),
            "accounts_count": report.accounts,
            "movements_count": report.movements,
            "session_state": self.vault.encrypt(json.dumps(state)) if state else None,
        }
        async with self.sessions() as session, session.begin():
            await session.execute(update(Access).where(Access.id == job.access_id).values(**values))
        log.write(
            "access finished",
            access_id=job.access_id,
            bank=job.bank,
            result=report.code.value,
            detail=detail,
            accounts=report.accounts,
            movements=report.movements,
            seconds=round(report.seconds, 3),
            balances_seconds=report.balances_seconds,
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

    async def _finish_customer(self, customer_id: int) -> None:
        async with self.sessions() as session, session.begin():
            await session.execute(
                update(Customer)
                .where(Customer.id == customer_id)
                .values(scrape_state=ScrapeState.ALL_UPDATED, scrape_finished_at=_now())
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


def _now() -> datetime:
    return datetime.now(UTC)


def _rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)
