"""The launcher (the seed's MainLauncher): refresh a customer, one scraper per access at once.

``refresh(customer)``:

0. checks, before anything is claimed, what the launch needs of its configuration: a scraper
   and a URL for each access's bank (``bank_urls``, else the scraper's ``default_url``), a vault
   that opens each stored credential, the day (``today``) and a writable log directory. A
   launch that could only fail for want of them is refused — ``ConfigError``, ``VaultError``,
   ``UnknownScraper`` naming the bank, the access and the setting — and every stored result,
   count and time stays as it was (``refresh_many`` checks every customer before starting any);
1. marks the customer "in progress" — atomically, so two refreshes of one customer cannot run
   together (the second gets :class:`~scrapeflow.errors.RefreshInProgress`) — and each access,
   in one transaction;
2. runs one scraper per access in parallel, under limits per bank and overall and a time limit
   per access; each scraper's batches go through the write queue as soon as they are read;
3. records each access's result code, detail, counts and times, and its encrypted state;
4. marks the customer "all updated".

Every batch landed and every access finished is an event (``on_event``) for live delivery, and
the launch writes one log file. Several customers may be refreshed at once
(:meth:`Launcher.refresh_many`); they share the limits, the HTTP client and the write queue.
Every database write — the scrapers' batches and the launcher's own state changes (claims,
heartbeats, finishes: the functions of :mod:`scrapeflow.banking._state`, where the state machine
is described) — goes through the write queue. While it holds accesses (queued or running), the
launcher stamps their ``heartbeat_at`` (and its customers') every ``heartbeat`` seconds, and its
claims store that interval: the watchdog resets only rows whose heartbeat stopped for three
intervals, so a long queue is never mistaken for a dead launch.

A stop (a cancelled job, Ctrl-C) leaves nothing claimed wherever it lands: each access whose
scraper ran, or was stopped before it began, ends ``timeout`` ("the launch was stopped") and
the customer is marked; a claim still being written when the stop lands is left to land and
is then given back. What the scrapers had stored stays.

This module holds the launches' course; what the launcher holds in the database (claims,
heartbeats, give-backs) is :mod:`scrapeflow.banking._launchclaims`, and one access's scrape
:mod:`scrapeflow.banking._launchaccess`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from types import TracebackType

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow._util.logs import get_logger
from scrapeflow.banking._directory import find_customer
from scrapeflow.banking._events import EventKind, EventSink, LaunchEvent
from scrapeflow.banking._launchaccess import AccessRunner
from scrapeflow.banking._launchclaims import STOPPED, LaunchClaims
from scrapeflow.banking._launches import Launch, SpreadLaunch
from scrapeflow.banking._launchlog import LaunchLog, prepare_log_dir
from scrapeflow.banking._models import Access, Customer
from scrapeflow.banking._readiness import check_ready
from scrapeflow.banking._reports import AccessReport, LaunchLimits, LaunchReport
from scrapeflow.banking._results import ResultCode
from scrapeflow.banking._scraper import BasicScraper, IncrementalPolicy
from scrapeflow.banking._state import ClaimedAccess, holding_job
from scrapeflow.banking._vault import CredentialVault
from scrapeflow.banking._writequeue import WriteQueue, writers_for
from scrapeflow.banking._writer import SqlWriter, Writer
from scrapeflow.db import create_engine, session_factory, single_statements
from scrapeflow.errors import InputError, RefreshInProgress, ResultsNotStored
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.proxies import ProxyProvider

__all__ = ["Launcher"]

_log = get_logger(__name__)
Today = Callable[[], date | Awaitable[date]]


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
        self._reads: async_sessionmaker[AsyncSession] | None = None
        self._queue: WriteQueue | None = None
        self._claims = LaunchClaims(self.limits)
        self._runner = AccessRunner(
            vault=vault,
            policy=self.policy,
            limits=self.limits,
            claims=self._claims,
            base_url=self._base_url,
            emit=self._emit,
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Launcher:
        self._engine = create_engine(self.db_url)
        self._sessions = session_factory(self._engine)
        self._reads = session_factory(single_statements(self._engine))
        if self._writer is None:
            self._writer = SqlWriter(self._sessions)
        if self._http is None:
            self._http = HttpClient(self._http_config, proxy_provider=self._proxy_provider)
        if self._owns_http:
            await self._http.__aenter__()
        self._queue = WriteQueue(writers=self._writers, engine=self._engine)
        await self._queue.__aenter__()
        self._runner.open(writer=self._writer, queue=self._queue, http=self._http)
        self._claims.open(self._queue)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._claims.close()  # it writes through the queue: before it closes
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

    @property
    def reads(self) -> async_sessionmaker[AsyncSession]:
        """Sessions for reads alone (:func:`~scrapeflow.db.single_statements`): on
        PostgreSQL without a transaction's two round trips around each."""
        if self._reads is None:
            raise RuntimeError("use the launcher as 'async with Launcher(...)'")
        return self._reads

    # -- refreshing customers ----------------------------------------------------------------

    async def refresh_many(self, customers: Iterable[int | str]) -> list[LaunchReport]:
        """Refresh several customers at once, under the shared limits; reports in order.

        Every customer is looked up and every access checked first (see :meth:`refresh`): an
        unknown customer raises :class:`InputError`, a configuration that cannot do for one of
        them raises before anything starts. A customer already being refreshed gets a report
        with ``refused``.
        """
        async with self.reads() as session:
            found = [await find_customer(session, customer) for customer in customers]
        today = await self._ready(Access.customer_id.in_([row.id for row in found]))
        outcomes = await asyncio.gather(
            *(self._refresh_or_refuse(row.id, row.external_id, today) for row in found),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return [o for o in outcomes if isinstance(o, LaunchReport)]

    async def _refresh_or_refuse(
        self, customer_id: int, external_id: str, today: date
    ) -> LaunchReport:
        try:
            return await self._refresh(customer_id, external_id, today=today, otp={})
        except RefreshInProgress as exc:
            return LaunchReport("-", customer_id, external_id, refused=str(exc))

    async def refresh(
        self, customer: int | str, *, otp: Mapping[int, str] | None = None
    ) -> LaunchReport:
        """Refresh every access of ``customer`` (its id, or its external id when a str).

        ``otp`` maps access ids to one-time codes the customer supplied (two-factor logins).
        Before anything is claimed, the launch is refused when an access's bank has no scraper
        (:class:`~scrapeflow.errors.UnknownScraper`) or no URL
        (:class:`~scrapeflow.errors.ConfigError`), when the vault cannot open a stored
        credential (:class:`~scrapeflow.errors.VaultError`), or when the log directory cannot
        be written: nothing stored changes.
        """
        async with self.reads() as session:
            found = await find_customer(session, customer)
            customer_id, external_id = found.id, found.external_id
        today = await self._ready(Access.customer_id == customer_id)
        return await self._refresh(customer_id, external_id, today=today, otp=otp or {})

    async def _refresh(
        self, customer_id: int, external_id: str, *, today: date, otp: Mapping[int, str]
    ) -> LaunchReport:
        started = time.monotonic()
        # The log file before the claim: an unwritable log directory must not leave the
        # customer marked "in progress".
        launch = Launch.open(
            self.log_dir, customer_id, external_id, started=started, today=today, otp=otp
        )
        report = LaunchReport(launch.id, customer_id, external_id, log_file=launch.log.path)
        try:
            claims = await self._claims.claim_launch(customer_id, holding_job.get())
        except BaseException:
            launch.log.close()
            raise
        self._claims.customers.add(customer_id)
        jobs = list(claims.claimed)
        self._claims.accesses.update(job.access_id for job in jobs)
        try:
            for access_id in claims.busy:  # a one-time code is being tried on it right now
                launch.log.write("access skipped: already being scraped", access_id=access_id)
            launch.log.write(
                "launch started",
                customer_id=customer_id,
                external_id=external_id,
                accesses=[{"access_id": j.access_id, "bank": j.bank} for j in jobs],
            )
            await self._emit(launch.log, launch.event(EventKind.LAUNCH_STARTED))
            report.accesses = list(
                await asyncio.gather(*(self._runner.run(job, launch) for job in jobs))
            )
        finally:
            self._claims.accesses.difference_update(j.access_id for j in jobs)
            stranded = [job for job in jobs if job.access_id not in launch.begun]
            try:
                # Shielded: a stop (Ctrl-C, a cancelled job) still ends each access it stopped
                # before its scraper began and marks the customer; a second stop while that
                # write runs leaves it to the watchdog, but the log is closed anyway.
                await asyncio.shield(self._finish_stopped(customer_id, stranded, launch))
            finally:
                self._claims.customers.discard(customer_id)
                report.seconds = time.monotonic() - started
                launch.log.write(
                    "launch finished",
                    seconds=round(report.seconds, 3),
                    results={a.access_id: a.code.value for a in report.accesses},
                )
                launch.log.close()
        launch.check_stored(f"the refresh of {external_id}")
        outcome = report.outcome
        await self._emit(None, launch.event(EventKind.LAUNCH_FINISHED, outcome=outcome))
        return report

    @contextlib.asynccontextmanager
    async def spread_launch(
        self, customer: int | str, *, take_over: bool = False
    ) -> AsyncIterator[SpreadLaunch]:
        """Refresh ``customer`` with its accesses scraped elsewhere: each by a part of the
        launch (:meth:`scrape_access` with the launch's id, on any worker), which claims the
        access itself.

        On entry, the checks of :meth:`refresh`, then the customer alone is claimed
        (:class:`RefreshInProgress` when it is being refreshed) and the launch starts; while
        inside, the customer's heartbeat is kept; on exit — the parts ended, or the launch was
        stopped — it is marked all updated, and the launch's end is told with ``ok``.
        ``take_over``: the launch runs again after its process died, so a customer in progress
        whose heartbeat goes stale within a few beats is taken over (its accesses' parts may
        still be running: their rows are left alone).
        """
        async with self.reads() as session:
            found = await find_customer(session, customer)
            customer_id, external_id = found.id, found.external_id
            accesses = list(
                await session.scalars(
                    select(Access.id)
                    .where(Access.customer_id == customer_id, Access.enabled.is_(True))
                    .order_by(Access.id)
                )
            )
        day = await self._ready(Access.customer_id == customer_id)
        await self._claims.hold_customer(customer_id, holding_job.get(), take_over=take_over)
        spread = SpreadLaunch(secrets.token_hex(4), customer_id, external_id, tuple(accesses), day)
        self._claims.customers.add(customer_id)
        try:
            await self._emit(None, spread.event(EventKind.LAUNCH_STARTED))
            yield spread
        finally:
            try:
                failed = await asyncio.shield(self._claims.finish_customer(customer_id))
            finally:
                self._claims.customers.discard(customer_id)
        if failed is not None:
            raise ResultsNotStored(
                f"the refresh of {external_id} could not mark it all updated: run it again"
            ) from failed
        await self._emit(None, spread.event(EventKind.LAUNCH_FINISHED, outcome=spread.outcome))

    async def scrape_access(
        self,
        access_id: int,
        *,
        otp: str | None = None,
        launch_id: str | None = None,
        day: date | None = None,
    ) -> AccessReport:
        """Scrape one access alone (the seed's test launchers; resuming a two-factor login; a
        part of a launch spread over workers, whose ``launch_id`` its events and log carry, and
        whose ``day`` is its launch's: else today, by the launcher's clock).

        The access is claimed as in a refresh (:class:`RefreshInProgress` when it is already
        being scraped); its customer's state is left alone.
        """
        started = time.monotonic()
        owner_of = (
            select(Customer.id, Customer.external_id, Access.enabled)
            .join(Access)
            .where(Access.id == access_id)
        )
        async with self.reads() as session:
            found = (await session.execute(owner_of)).first()
        if found is None:
            raise InputError(f"no access with id {access_id}")
        owner_id, external_id, enabled = found
        if not enabled:
            raise InputError(f"access {access_id} is disabled: enable it to scrape it")
        today = await self._ready(Access.id == access_id, day=day)
        otps = {access_id: otp} if otp else {}
        launch = Launch.open(
            self.log_dir,
            owner_id,
            external_id,
            started=started,
            today=today,
            otp=otps,
            launch_id=launch_id,
        )
        try:
            job = await self._claims.claim_one(access_id, holding_job.get())
            if job is None:
                raise RefreshInProgress(f"access {access_id} is already being scraped")
            self._claims.accesses.add(access_id)
            try:
                report = await self._runner.run(job, launch)
            finally:
                self._claims.accesses.discard(access_id)
        finally:
            launch.log.close()
        launch.check_stored(f"the scrape of access {access_id}")
        return report

    # -- steps ------------------------------------------------------------------------------

    async def _ready(self, accesses: ColumnElement[bool], *, day: date | None = None) -> date:
        """See :func:`check_ready`; returns the launch's day (``day``, when it is known)."""
        await check_ready(self.reads, accesses, vault=self.vault, base_url=self._base_url)
        day = day or await self._today()
        if self.log_dir is not None:
            prepare_log_dir(self.log_dir)
        return day

    def _base_url(self, bank: str, scraper_cls: type[BasicScraper]) -> str | None:
        return self.bank_urls.get(bank) or scraper_cls.default_url

    async def _today(self) -> date:
        value = self.today()
        if inspect.isawaitable(value):
            value = await value
        assert isinstance(value, date)
        return value

    async def _finish_stopped(
        self, customer_id: int, stranded: list[ClaimedAccess], launch: Launch
    ) -> None:
        """End a launch: each access in ``stranded`` (claimed, but stopped before its scraper
        began) as stopped, then the customer."""
        for job in stranded:
            stopped = AccessReport(job.access_id, job.bank, ResultCode.TIMEOUT, STOPPED)
            await self._runner.finish(job, stopped, None, launch)
        failed = await self._claims.finish_customer(customer_id)
        if failed is not None:
            launch.lost.append(failed)

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
