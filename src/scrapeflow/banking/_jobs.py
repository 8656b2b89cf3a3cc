"""Bank work as jobs of :mod:`scrapeflow.jobs`: the job kinds ``bank.refresh``, ``bank.access``
and ``bank.otp``.

The service and ``scrapeflow bank refresh`` both queue ``bank.refresh`` jobs in the same jobs
table, under the same dedupe key (:func:`refresh_key`): a refresh asked for a customer already
being refreshed — by the service or by another command — joins that job instead of fighting
over the customer's rows. A job whose process died is found by its stopped heartbeat and run
again; the re-run first takes over what the dead run left claimed — at once, as the rows name
the job that holds them (``held_by``), else once they go stale, a few of the launcher's
heartbeats — and refreshes again, which upserts make idempotent.

* :func:`bank_job_kinds` — the handlers, by name, to merge into a queue's kinds;
  :class:`BankJobs` is the same with the launcher its jobs share and the check a command runs
  before it queues anything (:meth:`BankJobs.check_refresh`);
* :func:`refresh_reports` — a finished ``bank.refresh`` job as :class:`LaunchReport` objects.

Spread over workers (``per_access``, what the distributed backend runs), a ``bank.refresh``
job claims the customer alone and queues one ``bank.access`` job per access (a follow-up, key
``access-<id>``: run again, the refresh finds the same parts), which claims its access — so a
bank never sees two sessions of one login — and scrapes it on whichever worker takes it; the
refresh waits for its parts (running those still queued itself), then marks the customer all
updated. Run again after its worker died, a part first frees what the dead run left claimed.

Params: ``bank.refresh`` takes ``{"customer": id}`` (one customer, external id; dedupe key
:func:`refresh_key`) or ``{"customers": [id, …]}`` (several at once, as
:meth:`Launcher.refresh_many`: one that is already being refreshed is reported ``refused``);
``bank.access`` takes ``{"customer": id, "access_id": n, "launch_id": id, "day": iso date,
"refresh": job id}`` (``day``: the launch's, from which every part counts its movements' window);
``bank.otp`` takes ``{"customer": id, "access_id": n, "code_sealed": token}``, the one-time code
sealed with the vault (the jobs table never holds it in clear; dedupe key :func:`otp_key`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, timedelta
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow._util.redact import redact
from scrapeflow.banking._directory import find_customer
from scrapeflow.banking._events import EventKind, LaunchEvent
from scrapeflow.banking._launcher import Launcher
from scrapeflow.banking._models import Access, Customer
from scrapeflow.banking._reports import AccessReport, LaunchReport
from scrapeflow.banking._results import ResultCode, ScrapeState, outcome_of
from scrapeflow.banking._setup import launcher_from_settings
from scrapeflow.banking._state import holding_job, release_holds, reset_stuck
from scrapeflow.errors import InputError, RefreshInProgress
from scrapeflow.jobs import Job, JobContext, JobHandler, JobState

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = [
    "BANK_ACCESS",
    "BANK_EVENT_NAMES",
    "BANK_OTP",
    "BANK_REFRESH",
    "BankJobEvent",
    "BankJobEventSink",
    "BankJobs",
    "bank_job_kinds",
    "customers_in",
    "otp_key",
    "refresh_key",
    "refresh_reports",
]

BANK_REFRESH: Final = "bank.refresh"
"""Refresh one customer (or several): every access at once."""
BANK_ACCESS: Final = "bank.access"
"""Scrape one access, as a part of a ``bank.refresh`` spread over workers."""
BANK_OTP: Final = "bank.otp"
"""Resume one two-factor access with the code the customer typed."""

BANK_EVENT_NAMES: Final[Mapping[EventKind, str]] = {
    EventKind.LAUNCH_STARTED: "bank.refresh_started",
    EventKind.ACCOUNTS: "bank.accounts",
    EventKind.MOVEMENTS: "bank.movements",
    EventKind.ACCESS_FINISHED: "bank.access_finished",
    EventKind.LAUNCH_FINISHED: "bank.all_updated",
}
"""The name each launch event has in the service's event log (:attr:`BankJobEvent.name`)."""

_WAIT_BEATS = 5  # the watchdog calls a row stale after 3 missed beats (MISSED_BEATS)
_MAX_DETAIL = 500  # the result detail column's size
_EXCEPTION_PREFIX = re.compile(r"^[A-Z]\w*: ")


def refresh_key(customer: str) -> str:
    """The dedupe key of a customer's refresh: one refresh of a customer is active at a time,
    whoever asked for it (the service, a command)."""
    return f"{BANK_REFRESH}:{customer}"


def otp_key(access_id: int) -> str:
    """The dedupe key of resuming an access with a one-time code."""
    return f"{BANK_OTP}:{access_id}"


@dataclass(frozen=True, slots=True)
class BankJobEvent:
    """One fact of a bank job's launch, as it happens: for live delivery (an event log, a
    terminal)."""

    job: Job
    """The job that ran it (as it was claimed): the refresh, or one of its parts."""
    customer: str
    """The customer's external id."""
    event: LaunchEvent
    job_id: str = ""
    """The id of the job whose launch it is: the refresh's, also for its parts' events."""

    def __post_init__(self) -> None:
        if not self.job_id:
            object.__setattr__(self, "job_id", self.job.id)

    @property
    def name(self) -> str:
        """``bank.accounts``, ``bank.movements``… (:data:`BANK_EVENT_NAMES`)."""
        return BANK_EVENT_NAMES[self.event.kind]

    def data(self) -> dict[str, object]:
        """The event's fields, JSON-ready, but its kind and internal customer id."""
        return {k: v for k, v in self.event.as_dict().items() if k not in ("kind", "customer_id")}


BankJobEventSink = Callable[[BankJobEvent], Awaitable[None] | None]
"""Receives every event of the bank jobs' launches; a coroutine function is awaited (a slow sink
slows the launch). A sink that raises is logged and the launch goes on."""

_Deliver = Callable[[LaunchEvent], Awaitable[None]]
_job_sink: ContextVar[_Deliver | None] = ContextVar("scrapeflow_bank_job_sink", default=None)
"""The running job's delivery: the launcher is shared, so each job's handler sets its own, and
the launch's tasks (started from the handler's) inherit it."""


def bank_job_kinds(
    settings: Settings, *, on_event: BankJobEventSink | None = None, per_access: bool = False
) -> dict[str, JobHandler]:
    """The handlers of ``bank.refresh`` and ``bank.otp`` on ``settings`` (database, banks'
    URLs, limits, vault, log directory), to merge into a queue's kinds. Jobs that run at once
    share one launcher (its limits per bank and overall, HTTP client and write queue), opened
    while any of them runs; what the launches do is told to ``on_event``.

    ``per_access``: a refresh is spread over the queue's workers, one ``bank.access`` job per
    access (what several machines want; in one process it only adds job rows).

    >>> kinds = {**bank_job_kinds(settings, on_event=deliver), **other_kinds}  # doctest: +SKIP
    """
    return BankJobs(settings, on_event=on_event, per_access=per_access).kinds


class BankJobs:
    """The bank job kinds of one process, over the launcher their jobs share.

    Jobs open the launcher when the first starts and close it when the last ends; ``async
    with`` keeps it open meanwhile (a command that checks, then queues, then waits). A bad
    configuration (a sandbox manifest, the vault key) fails the job that opens it, or raises
    from ``async with``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        on_event: BankJobEventSink | None = None,
        per_access: bool = False,
    ) -> None:
        self.settings = settings
        self.on_event = on_event
        self.per_access = per_access
        self._launcher: Launcher | None = None
        self._users = 0
        self._lock = asyncio.Lock()

    @property
    def kinds(self) -> dict[str, JobHandler]:
        """``{"bank.refresh": …, "bank.access": …, "bank.otp": …}``."""
        return {BANK_REFRESH: self._refresh, BANK_ACCESS: self._access, BANK_OTP: self._otp}

    async def __aenter__(self) -> BankJobs:
        await self._acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self._release())

    async def check_refresh(self, customers: Sequence[str]) -> list[str]:
        """Check, before anything is queued or claimed, what refreshing ``customers`` needs:
        each exists (:class:`~scrapeflow.errors.InputError`), and each access's bank has a
        scraper and a URL, the vault opens each credential, the day can be had and the log
        directory written (``ConfigError``, ``VaultError``, ``UnknownScraper``, naming the
        access): the checks a refresh makes before its claim, for every customer at once.
        Nothing is stored. Their external ids, in order."""
        async with self._using() as launcher:
            async with launcher.reads() as session:
                rows = [await find_customer(session, customer) for customer in customers]
            # The launcher's own check before a claim, which refresh_many runs for all first.
            await launcher._ready(Access.customer_id.in_([row.id for row in rows]))
        return [row.external_id for row in rows]

    # -- the handlers ----------------------------------------------------------------------

    async def _refresh(self, context: JobContext) -> Mapping[str, Any]:
        """Refresh the customer(s) of the job. Run again after a crash, it first frees what the
        dead launch left claimed, then refreshes again (upserts make that idempotent). One
        customer that something else holds fails the job with that reason."""
        customers, many = customers_in(context.params)
        context.progress(accesses_done=0, accounts=0, movements=0)
        if self.per_access:
            return await self._spread(context, customers, many)
        async with self._using() as launcher:
            async with launcher.reads() as session:
                rows = [await find_customer(session, customer) for customer in customers]
            names = {row.id: row.external_id for row in rows}
            token = _job_sink.set(partial(self._deliver, context, names, customers[0]))
            holding = holding_job.set(context.job.id)
            try:
                if context.job.attempts > 1:  # the last attempt's process died holding them
                    await release_holds(launcher.sessions, context.job.id)
                    heartbeat = self.settings.heartbeat
                    await asyncio.gather(
                        *(_free_dead_launch(launcher.sessions, row.id, heartbeat) for row in rows)
                    )
                if many:
                    reports = await launcher.refresh_many([row.id for row in rows])
                else:
                    reports = [await launcher.refresh(rows[0].id)]
            finally:
                holding_job.reset(holding)
                _job_sink.reset(token)
        return _many_result(reports) if many else _launch_result(reports[0])

    async def _spread(
        self, context: JobContext, customers: list[str], many: bool
    ) -> Mapping[str, Any]:
        """The refresh as one ``bank.access`` job per access, on any worker."""
        async with self._using() as launcher:
            reports = await asyncio.gather(
                *(self._spread_one(context, launcher, customer) for customer in customers)
            )
        return _many_result(reports) if many else _launch_result(reports[0])

    async def _spread_one(
        self, context: JobContext, launcher: Launcher, customer: str
    ) -> LaunchReport:
        started = time.monotonic()
        token = _job_sink.set(partial(self._deliver, context, {}, customer))
        holding = holding_job.set(context.job.id)
        try:
            # Run again, the last attempt's process died holding the customer: take it over.
            take_over = context.job.attempts > 1
            async with launcher.spread_launch(customer, take_over=take_over) as launch:
                # Queued together: one transaction and one dispatch for all of them.
                parts = await asyncio.gather(
                    *(
                        context.submit(
                            BANK_ACCESS,
                            {
                                "customer": launch.external_id,
                                "access_id": access_id,
                                "launch_id": launch.id,
                                "day": launch.day.isoformat(),
                                "refresh": context.job.id,
                            },
                            key=f"access-{access_id}",
                        )
                        for access_id in launch.accesses
                    )
                )
                ended = await context.join(parts)
                report = LaunchReport(launch.id, launch.customer_id, launch.external_id)
                report.accesses = [a for a in map(_part_report, ended) if a is not None]
                launch.outcome = report.outcome
                counts = context.counts
                context.progress(
                    accesses_done=counts.get("accesses_done", 0) + len(report.accesses),
                    accounts=counts.get("accounts", 0) + sum(a.accounts for a in report.accesses),
                    movements=counts.get("movements", 0)
                    + sum(a.movements for a in report.accesses),
                )
        finally:
            holding_job.reset(holding)
            _job_sink.reset(token)
        report.seconds = time.monotonic() - started
        return report

    async def _access(self, context: JobContext) -> Mapping[str, Any]:
        """Scrape one access of a spread refresh. Run again after a crash, it first frees what
        the dead run left claimed (once its heartbeat is stale), then scrapes again."""
        params = context.params
        customer = str(params.get("customer") or "")
        access_id, launch_id = params.get("access_id"), params.get("launch_id")
        if not customer or not isinstance(access_id, int) or not isinstance(launch_id, str):
            raise InputError("a bank.access job names its 'customer', 'access_id' and 'launch_id'")
        refresh = str(params.get("refresh") or context.job.id)
        day = _launch_day(params.get("day"))
        async with self._using() as launcher:
            if context.job.attempts > 1:  # the last run died: what it held is taken over
                await release_holds(launcher.sessions, context.job.id)
                await _free_dead_access(launcher.sessions, access_id, self.settings.heartbeat)
            deliver = partial(self._deliver, context, {}, customer, job_id=refresh)
            token = _job_sink.set(deliver)
            holding = holding_job.set(context.job.id)
            try:
                report = await launcher.scrape_access(access_id, launch_id=launch_id, day=day)
            finally:
                holding_job.reset(holding)
                _job_sink.reset(token)
        return {"customer": customer, **_access_result(report)}

    async def _otp(self, context: JobContext) -> Mapping[str, Any]:
        """Resume a two-factor access with the code the customer typed, sealed in the params."""
        customer = str(context.params["customer"])
        access_id = int(context.params["access_id"])
        async with self._using() as launcher:
            code = launcher.vault.decrypt(str(context.params["code_sealed"]).encode())
            if context.job.attempts > 1:
                await release_holds(launcher.sessions, context.job.id)
            token = _job_sink.set(partial(self._deliver, context, {}, customer))
            holding = holding_job.set(context.job.id)
            try:
                report = await launcher.scrape_access(access_id, otp=code)
            finally:
                holding_job.reset(holding)
                _job_sink.reset(token)
        # The outcome of the one access the code resumed, as a refresh's is of its accesses.
        outcome = outcome_of([report.code]).value
        return {"customer": customer, **_access_result(report), "outcome": outcome}

    # -- the shared launcher and its events --------------------------------------------------

    async def _acquire(self) -> Launcher:
        async with self._lock:
            if self._launcher is None:
                launcher = launcher_from_settings(self.settings, on_event=self._route)
                await launcher.__aenter__()
                self._launcher = launcher
            self._users += 1
            return self._launcher

    async def _release(self) -> None:
        async with self._lock:
            self._users -= 1
            if self._users > 0 or self._launcher is None:
                return
            launcher, self._launcher = self._launcher, None
            await launcher.__aexit__(None, None, None)

    @contextlib.asynccontextmanager
    async def _using(self) -> AsyncIterator[Launcher]:
        launcher = await self._acquire()
        try:
            yield launcher
        finally:
            # Shielded: a cancelled job still lets go of the launcher, so the last one closes it.
            await asyncio.shield(self._release())

    async def _route(self, event: LaunchEvent) -> None:
        deliver = _job_sink.get()
        if deliver is not None:
            await deliver(event)

    async def _deliver(
        self,
        context: JobContext,
        names: Mapping[int, str],
        customer: str,
        event: LaunchEvent,
        *,
        job_id: str | None = None,
    ) -> None:
        counts = context.counts
        if event.kind is EventKind.ACCOUNTS:
            context.progress(accounts=counts.get("accounts", 0) + event.count)
        elif event.kind is EventKind.MOVEMENTS:
            context.progress(movements=counts.get("movements", 0) + event.count)
        elif event.kind is EventKind.ACCESS_FINISHED:
            context.progress(accesses_done=counts.get("accesses_done", 0) + 1)
        if self.on_event is None:
            return
        told = self.on_event(
            BankJobEvent(
                context.job, names.get(event.customer_id, customer), event, job_id or context.job.id
            )
        )
        if inspect.isawaitable(told):
            await told


def customers_in(params: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The customers a ``bank.refresh`` job names, and whether it names several."""
    if "customers" in params:
        many = params["customers"]
        if not isinstance(many, list) or not many or not all(isinstance(c, str) for c in many):
            raise InputError("a bank.refresh job's 'customers' is a non-empty list of ids")
        return list(many), True
    if "customer" in params:
        return [str(params["customer"])], False
    raise InputError("a bank.refresh job names its 'customer' (or 'customers')")


async def _free_dead_launch(
    sessions: async_sessionmaker[AsyncSession], customer_id: int, heartbeat: float
) -> None:
    """Reset what a dead launch left claimed for the customer, once its heartbeats are stale
    (at most a few heartbeat intervals from now). A live launch (a refresh by an older command,
    say) keeps beating and is left alone: the refresh then fails with that reason."""
    for _ in range(_WAIT_BEATS):
        async with sessions() as session:
            state = await session.scalar(
                select(Customer.scrape_state).where(Customer.id == customer_id)
            )
        if state is not ScrapeState.IN_PROGRESS:
            return
        found = await reset_stuck(
            sessions, limit=timedelta(milliseconds=1), heartbeat=heartbeat, customer=customer_id
        )
        if found.customers:
            return
        await asyncio.sleep(heartbeat)


async def _free_dead_access(
    sessions: async_sessionmaker[AsyncSession], access_id: int, heartbeat: float
) -> None:
    """Reset the access a dead part left claimed, once its heartbeat is stale (at most a few
    heartbeat intervals from now); a live scrape of it keeps beating and is left alone."""
    for _ in range(_WAIT_BEATS):
        async with sessions() as session:
            row = (
                await session.execute(
                    select(Access.scrape_state, Access.customer_id).where(Access.id == access_id)
                )
            ).first()
        if row is None or row.scrape_state is not ScrapeState.IN_PROGRESS:
            return
        found = await reset_stuck(
            sessions,
            limit=timedelta(milliseconds=1),
            heartbeat=heartbeat,
            customer=row.customer_id,
        )
        if access_id in found.accesses:
            return
        await asyncio.sleep(heartbeat)


# -- results ----------------------------------------------------------------------------------


def _many_result(reports: Sequence[LaunchReport]) -> dict[str, Any]:
    """The result of a refresh of several customers: each one's, and the outcome of them all
    (None when every one was refused: the refreshes that hold them tell theirs)."""
    ran = [report for report in reports if report.refused is None]
    return {
        "ok": all(report.ok for report in reports),
        "outcome": outcome_of(a.code for r in ran for a in r.accesses) if ran else None,
        "customers": [_launch_result(report) for report in reports],
    }


def _launch_result(report: LaunchReport) -> dict[str, Any]:
    """A launch report as a job's result (JSON-ready; details scrubbed of credentials)."""
    return {
        "customer": report.external_id,
        "customer_id": report.customer_id,
        "launch_id": report.launch_id,
        "ok": report.ok,
        "outcome": report.outcome,
        "refused": report.refused,
        "seconds": round(report.seconds, 3),
        "balances_seconds": report.balances_seconds,
        "log_file": None if report.log_file is None else str(report.log_file),
        "accesses": [_access_result(a) for a in report.accesses],
    }


def _launch_day(value: Any) -> date | None:
    """A part's ``day`` (its launch's, ISO); None from a part queued without one."""
    if value is None:
        return None
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise InputError(f"a bank.access job's 'day' is an ISO date, got {value!r}") from None


def _access_result(report: AccessReport) -> dict[str, Any]:
    """An access's report as (part of) a job's result (JSON-ready; the detail scrubbed)."""
    return {
        "access_id": report.access_id,
        "bank": report.bank,
        "result": report.code.value,
        "ok": report.code.ok,
        "detail": redact(report.detail)[:_MAX_DETAIL],
        "accounts": report.accounts,
        "movements": report.movements,
        "seconds": round(report.seconds, 3),
        "balances_seconds": report.balances_seconds,
    }


def _access_report(part: Mapping[str, Any]) -> AccessReport:
    return AccessReport(
        int(part["access_id"]),
        str(part["bank"]),
        ResultCode(part["result"]),
        detail=str(part.get("detail") or ""),
        accounts=int(part.get("accounts") or 0),
        movements=int(part.get("movements") or 0),
        seconds=float(part.get("seconds") or 0.0),
        balances_seconds=part.get("balances_seconds"),
    )


def _part_report(part: Job) -> AccessReport | None:
    """How a ``bank.access`` part of a spread refresh ended, as its access's report; None for
    an access that something else was scraping (a one-time code being tried: skipped, as a
    refresh in one process skips it)."""
    if part.state is JobState.SUCCEEDED and part.result:
        return _access_report(part.result)
    error = part.error or ""
    if error.startswith(f"{RefreshInProgress.__name__}:"):
        return None
    access_id = int(part.params.get("access_id") or 0)
    if part.state is JobState.CANCELLED:
        return AccessReport(access_id, "-", ResultCode.TIMEOUT, "the refresh was cancelled")
    # A part that failed outside its scrape (the scrape stores its own end): a database that
    # went away, a pool with no connection to spare, is a known cause, not "unknown".
    kind = error.partition(":")[0]
    code = ResultCode.NOT_STORED if kind in _STORAGE_ERRORS else ResultCode.UNKNOWN
    return AccessReport(access_id, "-", code, _EXCEPTION_PREFIX.sub("", error))


_STORAGE_ERRORS = frozenset(
    {
        "ResultsNotStored",
        # SQLAlchemy's wrappers of a driver's error, and its pool's wait running out
        "OperationalError",
        "InterfaceError",
        "InternalError",
        "DBAPIError",
        "DisconnectionError",
        "TimeoutError",
        # asyncpg's and psycopg's own
        "ConnectionDoesNotExistError",
        "CannotConnectNowError",
        "ConnectionFailureError",
        "PoolTimeout",
        "ConnectionTimeout",
        "ConnectionRefusedError",
        "ConnectionResetError",
    }
)


def refresh_reports(job: Job) -> list[LaunchReport]:
    """What a finished ``bank.refresh`` job did, one report per customer: its result, or — a
    job that failed or was cancelled — a report ``refused`` with the reason.

    Raises :class:`ValueError` for another kind of job, or one that has not ended.
    """
    if job.kind != BANK_REFRESH:
        raise ValueError(f"job {job.id} is a {job.kind!r} job, not {BANK_REFRESH!r}")
    if not job.state.final:
        raise ValueError(f"job {job.id} has not ended ({job.state.value})")
    if job.state is JobState.SUCCEEDED and job.result:
        parts = job.result.get("customers") or [job.result]
        return [_report_of(part) for part in parts]
    if job.state is JobState.CANCELLED:
        reason = "the refresh was cancelled"
    else:
        reason = _EXCEPTION_PREFIX.sub("", job.error or "the refresh failed")
    try:
        customers, _ = customers_in(job.params)
    except InputError:
        customers = ["-"]
    return [LaunchReport("-", 0, customer, refused=reason) for customer in customers]


def _report_of(part: Mapping[str, Any]) -> LaunchReport:
    log_file = part.get("log_file")
    return LaunchReport(
        launch_id=str(part.get("launch_id") or "-"),
        customer_id=int(part.get("customer_id") or 0),
        external_id=str(part.get("customer", "-")),
        accesses=[_access_report(a) for a in part.get("accesses") or ()],
        seconds=float(part.get("seconds") or 0.0),
        log_file=Path(log_file) if log_file else None,
        refused=part.get("refused"),
    )
