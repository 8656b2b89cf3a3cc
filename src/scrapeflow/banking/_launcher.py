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
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.banking._directory import find_customer
from scrapeflow.banking._events import EventKind, EventSink, LaunchEvent
from scrapeflow.banking._launches import Launch, SpreadLaunch
from scrapeflow.banking._launchlog import LaunchLog, prepare_log_dir
from scrapeflow.banking._models import Access, Customer
from scrapeflow.banking._readiness import check_ready
from scrapeflow.banking._registry import get_scraper
from scrapeflow.banking._reports import AccessReport, LaunchLimits, LaunchReport
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
    AccessClaims,
    ClaimedAccess,
    claim_access,
    claim_accesses,
    claim_customer,
    finish_access,
    finish_customer,
    holding_job,
    read_session_state,
    seal_session_state,
    stamp_heartbeats,
    take_over_customer,
)
from scrapeflow.banking._vault import CredentialVault
from scrapeflow.banking._writequeue import GroupedWrite, WriteQueue, writers_for
from scrapeflow.banking._writer import SqlWriter, Writer
from scrapeflow.db import create_engine, session_factory
from scrapeflow.errors import (
    InputError,
    RefreshInProgress,
    ResultsNotStored,
    UnknownScraper,
    VaultError,
)
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.proxies import ProxyProvider

__all__ = ["Launcher"]

_log = get_logger(__name__)
T = TypeVar("T")
Today = Callable[[], date | Awaitable[date]]
_STOPPED = "the launch was stopped"
_TAKE_OVER_BEATS = 5  # a dead holder's heartbeat is stale after 3 (MISSED_BEATS)


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
        self._held_customers: set[int] = set()  # customers it is refreshing
        self._heartbeat: asyncio.Task[None] | None = None
        self._giving_back: set[asyncio.Task[None]] = set()  # claims of stopped launches

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
        self._queue = WriteQueue(writers=self._writers, engine=self._engine)
        await self._queue.__aenter__()
        self._heartbeat = asyncio.create_task(self._beat(), name="launcher-heartbeat")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._giving_back:  # they write through the queue: before it closes
            await asyncio.gather(*self._giving_back, return_exceptions=True)
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
        """A state change of the launcher's own, through the write queue: in a transaction the
        queue may share with other batches (group commit), all of it or nothing."""
        assert self._queue is not None

        async def run(connection: AsyncConnection) -> T:
            # A session on the queue's connection joins its transaction; the queue commits.
            session = AsyncSession(bind=connection, expire_on_commit=False)
            try:
                return await write(session)
            finally:
                await session.close()

        return await self._queue.submit(GroupedWrite(run))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.limits.heartbeat)
            held, customers = list(self._held), list(self._held_customers)
            if not held and not customers:
                continue
            try:
                await self._write(
                    partial(stamp_heartbeats, access_ids=held, customer_ids=customers)
                )
            except Exception as exc:  # the next beat tries again; the watchdog allows several
                _log.warning("heartbeat failed", error=repr(exc))

    # -- refreshing customers ----------------------------------------------------------------

    async def refresh_many(self, customers: Iterable[int | str]) -> list[LaunchReport]:
        """Refresh several customers at once, under the shared limits; reports in order.

        Every customer is looked up and every access checked first (see :meth:`refresh`): an
        unknown customer raises :class:`InputError`, a configuration that cannot do for one of
        them raises before anything starts. A customer already being refreshed gets a report
        with ``refused``.
        """
        async with self.sessions() as session:
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
        async with self.sessions() as session:
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
            claims = await self._claim_or_give_back(
                partial(self._claim, customer_id, holding_job.get()),
                partial(self._give_back, customer_id),
            )
        except BaseException:
            launch.log.close()
            raise
        self._held_customers.add(customer_id)
        jobs = list(claims.claimed)
        self._held.update(job.access_id for job in jobs)
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
                await asyncio.gather(*(self._run_access(job, launch) for job in jobs))
            )
        finally:
            self._held.difference_update(j.access_id for j in jobs)
            stranded = [job for job in jobs if job.access_id not in launch.begun]
            try:
                # Shielded: a stop (Ctrl-C, a cancelled job) still ends each access it stopped
                # before its scraper began and marks the customer; a second stop while that
                # write runs leaves it to the watchdog, but the log is closed anyway.
                await asyncio.shield(self._finish_stopped(customer_id, stranded, launch))
            finally:
                self._held_customers.discard(customer_id)
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

    async def _claim(
        self, customer_id: int, holder: str | None, session: AsyncSession
    ) -> AccessClaims:
        """The customer and every access of it not already in progress, in one transaction: a
        watchdog never sees the customer claimed and its accesses not yet. ``holder``: the job
        whose run claims them (read in the caller's context, not the write queue's)."""
        heartbeat = self.limits.heartbeat
        await claim_customer(session, customer_id, heartbeat=heartbeat, holder=holder)
        return await claim_accesses(session, customer_id, heartbeat=heartbeat, holder=holder)

    async def _give_back(
        self, customer_id: int, session: AsyncSession, claims: AccessClaims
    ) -> None:
        """Undo the claim of a launch stopped before it could use it."""
        for job in claims.claimed:
            await finish_access(session, job.access_id, ResultCode.TIMEOUT, detail=_STOPPED)
        await finish_customer(session, customer_id)

    async def _claim_or_give_back(
        self,
        claim: Callable[[AsyncSession], Awaitable[T]],
        give_back: Callable[[AsyncSession, T], Awaitable[None]],
    ) -> T:
        """Write ``claim`` through the write queue; what it took, or its refusal.

        A stop (a cancelled job) that lands while the claim is queued or being written does not
        wait for it. The claim may still land — the writer may be committing it, and nothing
        tells which — so it is left to run, and what it took is given back once it has: a
        stopped launch leaves nothing claimed.
        """
        claiming = asyncio.ensure_future(self._write(claim))
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            task = asyncio.create_task(
                self._give_back_when_landed(claiming, give_back), name="launcher-give-back"
            )
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)
            raise

    async def _give_back_when_landed(
        self,
        claiming: asyncio.Future[T],
        give_back: Callable[[AsyncSession, T], Awaitable[None]],
    ) -> None:
        try:
            taken = await claiming
        except Exception:  # refused or failed: it took nothing
            return
        try:
            await self._write(lambda session: give_back(session, taken))
        except Exception as exc:  # the watchdog will free it
            _log.error("could not give back a stopped launch's claim", error=repr(exc))

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
        async with self.sessions() as session:
            found = await find_customer(session, customer)
            customer_id, external_id = found.id, found.external_id
            accesses = list(
                await session.scalars(
                    select(Access.id)
                    .where(Access.customer_id == customer_id, Access.enabled.is_(True))
                    .order_by(Access.id)
                )
            )
        await self._ready(Access.customer_id == customer_id)
        await self._hold_customer(customer_id, take_over=take_over)
        spread = SpreadLaunch(secrets.token_hex(4), customer_id, external_id, tuple(accesses))
        self._held_customers.add(customer_id)
        try:
            await self._emit(None, spread.event(EventKind.LAUNCH_STARTED))
            yield spread
        finally:
            try:
                failed = await asyncio.shield(self._finish_customer(customer_id))
            finally:
                self._held_customers.discard(customer_id)
        if failed is not None:
            raise ResultsNotStored(
                f"the refresh of {external_id} could not mark it all updated: run it again"
            ) from failed
        await self._emit(None, spread.event(EventKind.LAUNCH_FINISHED, outcome=spread.outcome))

    async def _hold_customer(self, customer_id: int, *, take_over: bool) -> None:
        heartbeat, holder = self.limits.heartbeat, holding_job.get()
        for beat in range(_TAKE_OVER_BEATS if take_over else 1):
            try:
                await self._claim_or_give_back(
                    lambda session: claim_customer(
                        session, customer_id, heartbeat=heartbeat, holder=holder
                    ),
                    lambda session, _: finish_customer(session, customer_id),
                )
                return
            except RefreshInProgress:
                if not take_over:
                    raise
                taken = await self._write(
                    partial(
                        take_over_customer,
                        customer_id=customer_id,
                        heartbeat=heartbeat,
                        holder=holder,
                    )
                )
                if taken:
                    return
                if beat == _TAKE_OVER_BEATS - 1:
                    raise
                await asyncio.sleep(heartbeat)

    async def scrape_access(
        self, access_id: int, *, otp: str | None = None, launch_id: str | None = None
    ) -> AccessReport:
        """Scrape one access alone (the seed's test launchers; resuming a two-factor login; a
        part of a launch spread over workers, whose ``launch_id`` its events and log carry).

        The access is claimed as in a refresh (:class:`RefreshInProgress` when it is already
        being scraped); its customer's state is left alone.
        """
        started = time.monotonic()
        owner_of = (
            select(Customer.id, Customer.external_id, Access.enabled)
            .join(Access)
            .where(Access.id == access_id)
        )
        async with self.sessions() as session:
            found = (await session.execute(owner_of)).first()
        if found is None:
            raise InputError(f"no access with id {access_id}")
        owner_id, external_id, enabled = found
        if not enabled:
            raise InputError(f"access {access_id} is disabled: enable it to scrape it")
        today = await self._ready(Access.id == access_id)
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
        heartbeat, holder = self.limits.heartbeat, holding_job.get()

        async def give_back(session: AsyncSession, taken: ClaimedAccess | None) -> None:
            if taken is not None:
                await finish_access(session, access_id, ResultCode.TIMEOUT, detail=_STOPPED)

        try:
            job = await self._claim_or_give_back(
                lambda session: claim_access(
                    session, access_id, heartbeat=heartbeat, holder=holder
                ),
                give_back,
            )
            if job is None:
                raise RefreshInProgress(f"access {access_id} is already being scraped")
            self._held.add(access_id)
            try:
                report = await self._run_access(job, launch)
            finally:
                self._held.discard(access_id)
        finally:
            launch.log.close()
        launch.check_stored(f"the scrape of access {access_id}")
        return report

    # -- steps ------------------------------------------------------------------------------

    async def _ready(self, accesses: ColumnElement[bool]) -> date:
        """See :func:`check_ready`; returns the launch's day."""
        await check_ready(self.sessions, accesses, vault=self.vault, base_url=self._base_url)
        day = await self._today()
        if self.log_dir is not None:
            prepare_log_dir(self.log_dir)
        return day

    def _base_url(self, bank: str, scraper_cls: type[BasicScraper]) -> str | None:
        return self.bank_urls.get(bank) or scraper_cls.default_url

    async def _run_access(self, job: ClaimedAccess, launch: Launch) -> AccessReport:
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
            lambda kind, ref, count: self._emit(
                launch.log, launch.event(kind, job, account_ref=ref, count=count)
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
            report.code = ResultCode.SUCCESS
        except asyncio.CancelledError:
            report.code, report.detail = ResultCode.TIMEOUT, _STOPPED
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
            report.balances_seconds = sink.balances_at
            # Shielded: a stopped launch still stores how each of its accesses ended.
            await asyncio.shield(
                self._finish_access(job, report, None if kept is None else state, launch)
            )
        finished = launch.event(
            EventKind.ACCESS_FINISHED, job, count=report.movements, result_code=report.code.value
        )
        await self._emit(None, finished)
        return report

    def _scraper(
        self, job: ClaimedAccess, sink: AccessSink, state: dict[str, Any], launch: Launch
    ) -> BasicScraper:
        # Checked before the claim (_ready); an access added since still ends with a code.
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

    async def _today(self) -> date:
        value = self.today()
        if inspect.isawaitable(value):
            value = await value
        assert isinstance(value, date)
        return value

    async def _finish_access(
        self,
        job: ClaimedAccess,
        report: AccessReport,
        state: dict[str, Any] | None,
        launch: Launch,
    ) -> None:
        detail = redact(report.detail)[:500] or None  # scrubbed before it is cut
        token = UNCHANGED if state is None else seal_session_state(self.vault, state)
        try:
            await self._write(
                lambda session: finish_access(
                    session,
                    job.access_id,
                    report.code,
                    detail=detail,
                    accounts=report.accounts,
                    movements=report.movements,
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

    async def _finish_stopped(
        self, customer_id: int, stranded: list[ClaimedAccess], launch: Launch
    ) -> None:
        """End a launch: each access in ``stranded`` (claimed, but stopped before its scraper
        began) as stopped, then the customer."""
        for job in stranded:
            stopped = AccessReport(job.access_id, job.bank, ResultCode.TIMEOUT, _STOPPED)
            await self._finish_access(job, stopped, None, launch)
        failed = await self._finish_customer(customer_id)
        if failed is not None:
            launch.lost.append(failed)

    async def _finish_customer(self, customer_id: int) -> BaseException | None:
        """Mark the customer all updated; the error when that could not be stored."""
        try:
            await self._write(lambda session: finish_customer(session, customer_id))
            return None
        except Exception as exc:  # the launch runs again (or the watchdog frees it)
            _log.error(
                "could not mark a customer updated", customer_id=customer_id, error=repr(exc)
            )
            return exc

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
