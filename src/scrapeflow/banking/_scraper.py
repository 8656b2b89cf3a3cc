"""The scraper API: :class:`BasicScraper`, in the spirit of the seed's, but async.

A bank's scraper subclasses it and implements four steps; the base class runs them — log in,
list contracts, then for every contract at once its accounts, and for every account at once its
movements since :meth:`BasicScraper.date_from` — and hands each batch to the writer through the
write queue as soon as it is read (balances land long before the last movement)::

    class MyBank(BasicScraper):
        bank = "mybank"
        title = "My Bank"

        async def login(self) -> None: ...                      # AccessFailed if refused
        async def contracts(self) -> Sequence[ContractInfo]: ...
        async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]: ...
        async def movements(self, account, since: date) -> Sequence[MovementRecord]: ...

How a scrape ends is a :class:`~scrapeflow.banking.ResultCode`: a scraper raises
:class:`~scrapeflow.errors.AccessFailed` (``self.fail(code, detail)``) for what the bank said;
:func:`result_for` maps everything else (a ban, a dead site, a page that no longer parses).
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, ClassVar, NoReturn, TypeVar
from urllib.parse import urljoin

import yarl

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.banking._events import EventKind
from scrapeflow.banking._models import AccountRecord, MovementRecord
from scrapeflow.banking._results import ResultCode
from scrapeflow.banking._vault import CredentialVault
from scrapeflow.banking._writequeue import WriteQueue
from scrapeflow.banking._writer import SqlWriter, SyncWindow, Writer
from scrapeflow.errors import (
    AccessFailed,
    Banned,
    ConnectionFailed,
    DuplicateMovement,
    FetchError,
    FetchTimeout,
    InvalidAccount,
    ResultsNotStored,
    SessionExpired,
    UndecodableBody,
)
from scrapeflow.http import HttpClient, Response, ScrapeSession

__all__ = [
    "AccessSink",
    "BasicScraper",
    "ContractInfo",
    "Credential",
    "IncrementalPolicy",
    "ScrapeContext",
    "result_for",
]

T = TypeVar("T")
_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class IncrementalPolicy:
    """Where an account's scrape starts.

    A new account: ``initial_days`` before today. Otherwise the newest stored movement's date
    minus ``overlap_days`` (movements the bank booked late under an older date are re-read), and
    never later than the oldest movement still pending (so its posting is seen); and
    ``initial_days`` before today again when that is earlier than any scrape of the account
    read (more history asked for: ``--initial-days 90`` after a first refresh of 14 days).
    """

    initial_days: int = 14
    overlap_days: int = 3

    def __post_init__(self) -> None:
        if self.initial_days < 0 or self.overlap_days < 0:
            raise ValueError("initial_days and overlap_days must not be negative")

    def date_from(self, today: date, window: SyncWindow) -> date:
        if window.last_operation_date is None:
            return today - timedelta(days=self.initial_days)
        start = window.last_operation_date - timedelta(days=self.overlap_days)
        if window.oldest_pending is not None:
            start = min(start, window.oldest_pending)
        wanted = today - timedelta(days=self.initial_days)
        if window.read_since is not None and wanted < window.read_since:
            start = min(start, wanted)
        return min(start, today)


class Credential:
    """An access's password, kept encrypted until the scraper asks for it; never printed."""

    __slots__ = ("_token", "_vault")

    def __init__(self, vault: CredentialVault, token: bytes) -> None:
        self._vault = vault
        self._token = token

    def reveal(self) -> str:
        """The password, decrypted now. Use it at once; do not keep it on an object."""
        return self._vault.decrypt(self._token)

    def __repr__(self) -> str:
        return "Credential(<hidden>)"


class AccessSink:
    """A scraper's way to the database: batches go through the write queue to the writer.

    Counts what landed and reports each batch (``on_batch``) once it is stored. A movements
    batch with two movements of one key is refused whole (:class:`DuplicateMovement`, the
    access ends ``site_changed``) before anything of it is written: storing it would keep one
    of the two and drop the other without a word.

    With scrapeflow's :class:`SqlWriter` on the queue's own engine, batches are
    :class:`~scrapeflow.banking.GroupedWrite` (the queue may commit several in one
    transaction), and an accounts batch reads the accounts' sync windows as it stores them:
    the access is claimed, so nothing else writes its movements before this scrape reads
    them, and a window is dropped once movements of its account are written.
    """

    def __init__(
        self,
        writer: Writer,
        queue: WriteQueue,
        access_id: int,
        on_batch: Callable[[EventKind, str | None, int, int], Awaitable[None]] | None = None,
    ) -> None:
        self.writer = writer
        self.queue = queue
        self.access_id = access_id
        self.on_batch = on_batch
        self.accounts = 0
        """Accounts read (the sum of the batches handed over)."""
        self.movements = 0
        """Movements read."""
        self.movements_stored = 0
        """Movements the database holds for what was read, batch by batch."""
        self._account_rows: set[object] = set()  # row ids (or bank refs) the batches stored
        self._accounts_short = 0  # rows a writer said it did not store
        # What each bank_ref read looked like, and how many reads gave one of them another
        # IBAN, number or currency (one account listed twice, under two contracts, is fine).
        self._read_refs: dict[str, tuple[object, ...]] = {}
        self._conflicts = 0
        self.started = time.monotonic()
        self.balances_at: float | None = None
        """Seconds from the start to the latest accounts batch landing."""
        self._sql = (
            writer if isinstance(writer, SqlWriter) and queue.engine is writer.engine else None
        )
        self._windows: dict[str, SyncWindow] = {}  # read with the accounts, used once
        self._no_pending: set[str] = set()  # accounts whose window had no pending movement

    async def write_accounts(self, accounts: Sequence[AccountRecord]) -> None:
        if not accounts:
            return
        for account in accounts:
            shape = (account.iban, account.number, account.currency)
            seen = self._read_refs.setdefault(account.bank_ref, shape)
            if seen != shape:
                self._conflicts += 1
        if self._sql is not None:
            batch = self._sql.accounts_batch(self.access_id, accounts, windows=True)
            stored = await self.queue.submit(batch)
            self._windows.update(stored.windows)
            rows: set[object] = set(stored.ids.values())
            short = 0
        else:
            said = await self.queue.submit(
                lambda: self.writer.write_accounts(self.access_id, accounts)
            )
            rows = {account.bank_ref for account in accounts}
            short = 0
            if isinstance(said, int) and not isinstance(said, bool):  # a writer that counts
                short = max(0, len(rows) - said)
        # Rows no batch of this scrape stored before: an account read again under a bank_ref
        # already stored (by another contract's batch) adds none.
        landed = max(0, len(rows - self._account_rows) - short)
        self._account_rows |= rows
        self._accounts_short += short
        self.accounts += len(accounts)
        self.balances_at = time.monotonic() - self.started
        if self.on_batch is not None:
            await self.on_batch(EventKind.ACCOUNTS, None, len(accounts), landed)

    async def write_movements(
        self,
        account_ref: str,
        movements: Sequence[MovementRecord],
        *,
        complete_since: date | None = None,
    ) -> None:
        """Store one account's movements. ``complete_since``: they are everything the bank
        lists from that day on, so stored pending ones missing from them were dropped."""
        _refuse_duplicates(account_ref, movements)
        self._windows.pop(account_ref, None)  # what is stored changes
        pending_stored = account_ref not in self._no_pending
        self._no_pending.discard(account_ref)
        whole = getattr(self.writer, "write_movements_since", None)
        held: object = None
        if self._sql is not None and (complete_since is not None or movements):
            stored = await self.queue.submit(
                self._sql.movements_batch(
                    self.access_id,
                    account_ref,
                    movements,
                    complete_since=complete_since,
                    pending_stored=pending_stored,
                )
            )
            held = stored.held
        elif complete_since is not None and whole is not None:
            # Its result is what it removed: what it holds is not said.
            await self.queue.submit(
                lambda: whole(self.access_id, account_ref, movements, complete_since)
            )
        elif movements:
            held = await self.queue.submit(
                lambda: self.writer.write_movements(self.access_id, account_ref, movements)
            )
        landed = held if isinstance(held, int) and not isinstance(held, bool) else len(movements)
        self.movements_stored += landed
        self.movements += len(movements)
        if self.on_batch is not None:
            await self.on_batch(EventKind.MOVEMENTS, account_ref, len(movements), landed)

    @property
    def accounts_stored(self) -> int:
        """Accounts the database holds for what was read: one row per stored account, so two
        read with one ``bank_ref`` are one."""
        return max(0, len(self._account_rows) - self._accounts_short)

    def shortfall(self) -> str | None:
        """What was read and did not land as read, in words; None when all of it did."""
        short = []
        distinct = len(self._read_refs) + self._conflicts
        if self.accounts_stored < distinct:
            short.append(
                f"read {distinct} accounts, the database holds {self.accounts_stored} of "
                "them (accounts with one bank_ref overwrite each other)"
            )
        if self.movements_stored < self.movements:
            short.append(
                f"read {self.movements} movements, the database holds {self.movements_stored} "
                "of them"
            )
        return "; ".join(short) or None

    async def sync_window(self, account_ref: str) -> SyncWindow:
        known = self._windows.pop(account_ref, None)
        if known is None:
            known = await self.writer.sync_window(self.access_id, account_ref)
        if known.oldest_pending is None:
            self._no_pending.add(account_ref)
        else:
            self._no_pending.discard(account_ref)
        return known


def _refuse_duplicates(account_ref: str, movements: Sequence[MovementRecord]) -> None:
    first: dict[str, MovementRecord] = {}
    for movement in movements:
        earlier = first.setdefault(movement.key, movement)
        if earlier is not movement:
            raise DuplicateMovement(
                f"account {account_ref}: two movements with key {movement.key[:40]}: "
                f"{_shown(earlier)} and {_shown(movement)}; give each its own key "
                "(the bank's reference, or MovementKeys for banks without one)",
                key=movement.key,
            )


def _shown(movement: MovementRecord) -> str:
    return f"{movement.operation_date} {movement.amount} {movement.description[:40]!r}"


@dataclass(slots=True)
class ScrapeContext:
    """Everything a scraper gets from the launcher for one access."""

    access_id: int
    login: str
    credential: Credential
    base_url: str
    http: HttpClient
    sink: AccessSink
    today: date
    policy: IncrementalPolicy = field(default_factory=IncrementalPolicy)
    state: dict[str, Any] = field(default_factory=dict)
    """Kept between runs, encrypted (cookies of a trusted device, a session waiting for a
    one-time code). The scraper changes it in place; the launcher stores it after the run."""
    otp: str | None = None
    """A one-time code the customer supplied to finish a two-factor login."""


@dataclass(frozen=True, slots=True)
class ContractInfo:
    """A contract as the bank lists it; ``link`` is wherever the scraper finds its accounts."""

    bank_ref: str
    name: str = ""
    link: str | None = None


class BasicScraper(abc.ABC):
    """Base of every bank scraper; see the module's documentation."""

    bank: ClassVar[str]
    """The registry code: the ``scrapeflow.banks`` entry point and ``FinancialEntity.code``."""
    title: ClassVar[str]
    country: ClassVar[str | None] = None
    default_url: ClassVar[str | None] = None
    """The bank's site, used when no URL is configured for it (``--bank-url``,
    ``SCRAPEFLOW_BANK_URLS``, ``Launcher(bank_urls=…)``, a sandbox manifest), which win over it.
    None: the URL must be configured; a launch with an access at this bank and no URL for it
    is refused before anything is claimed."""
    login_attempts: ClassVar[int] = 3
    """Logins tried when the bank answers "unavailable" before giving up on the access."""
    relogins: ClassVar[int] = 5
    """Times a scrape may log in again after the bank ended its session."""
    encoding: ClassVar[str] = "utf-8"
    """The charset of the bank's pages when the server declares none (:meth:`text`). A charset
    the server declares wins; pass ``response.text(encoding)`` to override a wrong one."""
    rate_limit: ClassVar[tuple[float, int] | None] = None
    """The bank's own limit per client IP when known: (requests a second, burst). The bank's
    host is then paced at it, each exit IP apart, instead of finding it by its refusals (each
    429 a wait); HTTP settings that name the host, or a slower delay, win. None: unknown."""

    secret_fields: ClassVar[tuple[str, ...]] = ()
    """Names of the bank's fields (form, JSON, query, ``<input>``) whose values are secrets
    the recorder's default rules do not know (a customer number, a device id): taken out of
    recordings (``scrapeflow bank record``) like passwords and tokens."""

    def __init__(self, context: ScrapeContext) -> None:
        self.context = context
        self.base_url = context.base_url.rstrip("/")
        self.http = context.http
        url = yarl.URL(self.base_url)
        site = f"{url.host}:{url.port}"
        if self.rate_limit is not None:
            per_second, burst = self.rate_limit
            self.http.hosts.pace(site, per_second, burst=burst)
        # Its proxy: the one with the fewest sessions at this bank (which limits each IP).
        self.session: ScrapeSession = context.http.session(site=site)
        self.log = _log.bind(bank=self.bank, access_id=context.access_id)
        self._login_lock = asyncio.Lock()
        self._login_generation = 0
        self._relogins = 0

    # -- the steps a bank implements -------------------------------------------------------

    @abc.abstractmethod
    async def login(self) -> None:
        """Open a session; raise :class:`AccessFailed` with the bank's reason when refused."""

    @abc.abstractmethod
    async def contracts(self) -> Sequence[ContractInfo]:
        """The contracts the access sees (a bank without contracts returns one)."""

    @abc.abstractmethod
    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        """The accounts of ``contract``, with their balances."""

    @abc.abstractmethod
    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        """The movements of ``account`` operated on or after ``since`` (pending ones too)."""

    async def logout(self) -> None:  # noqa: B027  (optional step)
        """End the session at the bank (optional; failures here are ignored)."""

    # -- the run -----------------------------------------------------------------------------

    async def main(self) -> None:
        """Log in, then every contract at once, every account at once; raises on failure."""
        try:
            await self.login_with_retries()
            contracts = await self.in_session(self.contracts)
            async with asyncio.TaskGroup() as group:
                for contract in contracts:
                    group.create_task(self.process_contract(contract))
            self.log.info("scraped", accounts=self.sink.accounts, movements=self.sink.movements)
            try:
                await self.logout()
            except Exception as exc:  # a failed logout changes nothing that was scraped
                self.log.info("logout failed", error=type(exc).__name__)
        finally:
            await self.session.close()

    async def process_contract(self, contract: ContractInfo) -> None:
        accounts = await self.in_session(lambda: self.accounts(contract))
        await self.upload_accounts(accounts)
        async with asyncio.TaskGroup() as group:
            for account in accounts:
                group.create_task(self.process_account(account))

    async def process_account(self, account: AccountRecord) -> None:
        since = await self.date_from(account)
        movements = await self.in_session(lambda: self.movements(account, since))
        await self.upload_movements(account, movements, complete_since=since)

    # -- helpers: sessions -------------------------------------------------------------------

    async def login_with_retries(self) -> None:
        """:meth:`login`, started over (``login_attempts`` in all) while the bank is down or
        a connection fails. A login is a flow (form, post, redirect) that is safe to restart
        from its first page, where one of its POSTs alone is not safe to resend."""
        for attempt in range(1, self.login_attempts + 1):
            try:
                await self.login()
            except (AccessFailed, ConnectionFailed, FetchTimeout) as exc:
                if not _bank_down(exc) or attempt == self.login_attempts:
                    raise
                self.log.info("login failed, starting over", error=type(exc).__name__)
                await asyncio.sleep(0.5 * attempt)
            else:
                self._login_generation += 1
                return

    async def again_while_down(self, step: Callable[[], Awaitable[T]], *, attempts: int = 6) -> T:
        """Run ``step``, and run it again in the same session while the bank is down for a
        moment (a 5xx, a dropped connection, a timeout), ``attempts`` times in all; the last
        failure is raised. For a step a restarted login would lose: the one-time code the
        person typed is sent to the session that asked for it, and a new login would make the
        bank send another (a 503 on that one request cost the person their code). A step the
        bank may have carried out before the failure is sent again: a code then reads as used
        or wrong, which the scraper reports as it would any refused code. Six attempts, 0.5 to
        2.5 s apart: at 15% of requests in maintenance, four left about one code in 2,000 unsent
        (a code lost for its person); six, about one in 100,000."""
        for attempt in range(1, attempts + 1):
            try:
                return await step()
            except (AccessFailed, ConnectionFailed, FetchTimeout) as exc:
                if not _bank_down(exc) or attempt == attempts:
                    raise
                self.log.info("bank down for a moment, sending again", error=type(exc).__name__)
                await asyncio.sleep(0.5 * attempt)
        raise AssertionError("unreachable")

    async def in_session(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step``; when it raises :class:`SessionExpired`, log in again and rerun it.

        Concurrent steps that all saw the session end log in once between them.
        """
        while True:
            generation = self._login_generation
            try:
                return await step()
            except SessionExpired as exc:
                async with self._login_lock:
                    if generation == self._login_generation:
                        self._relogins += 1
                        if self._relogins > self.relogins:
                            raise AccessFailed(
                                ResultCode.BANK_UNAVAILABLE,
                                f"the bank ended the session {self._relogins} times: {exc}",
                            ) from exc
                        self.log.info("session expired, logging in again", reason=str(exc))
                        await self.login_with_retries()

    # -- helpers: requests ---------------------------------------------------------------------

    def url(self, path: str) -> str:
        """``path`` resolved as a browser resolves a link on the bank's base URL, taken as a
        folder: with base ``https://bank.example/online``, ``cuentas`` and ``./cuentas`` are
        ``https://bank.example/online/cuentas``, ``../static/a.js`` is
        ``https://bank.example/static/a.js``, ``/login`` is ``https://bank.example/login``,
        and an absolute URL (``https://…``, ``//host/…``) stays where it points."""
        return urljoin(f"{self.base_url}/", path)

    async def request(
        self, method: str, path: str, *, expect: Sequence[int] = (200,), **kwargs: Any
    ) -> Response:
        """Send through the access's session; statuses outside ``expect`` become results.

        5xx after the HTTP layer's retries: bank unavailable; 429: blocked; anything else
        unexpected (a 404 for a page that should exist): site changed.
        """
        response = await self.http.request(method, self.url(path), session=self.session, **kwargs)
        if response.status in expect:
            return response
        where = f"{method} {yarl.URL(self.url(path)).path} answered {response.status}"
        if response.status >= 500:
            raise AccessFailed(ResultCode.BANK_UNAVAILABLE, where)
        if response.status == 429:
            raise AccessFailed(ResultCode.BLOCKED, where)
        raise AccessFailed(ResultCode.SITE_CHANGED, where)

    async def get(self, path: str, **kwargs: Any) -> Response:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> Response:
        return await self.request("POST", path, **kwargs)

    def text(self, response: Response) -> str:
        """``response``'s body as text: its declared charset, else the scraper's
        :attr:`encoding`. Bytes that do not decode raise
        :class:`~scrapeflow.errors.UndecodableBody`: the access ends ``site_changed``."""
        return response.text(default_encoding=self.encoding)

    def cookies(self, *names: str) -> dict[str, str]:
        """The session's cookies with these names (for :attr:`ScrapeContext.state`)."""
        return {c.key: c.value for c in self.session.http.cookie_jar if c.key in names}

    def set_cookies(self, cookies: dict[str, str]) -> None:
        """Put saved cookies back into the session (a trusted device, a pending login)."""
        if cookies:
            self.session.http.cookie_jar.update_cookies(cookies, yarl.URL(self.base_url))

    # -- helpers: the seed's basic_* ---------------------------------------------------------

    @property
    def sink(self) -> AccessSink:
        return self.context.sink

    def password(self) -> str:
        """The access's password, decrypted now; pass it straight to the login form."""
        return self.context.credential.reveal()

    async def date_from(self, account: AccountRecord) -> date:
        """The first day to read for ``account`` (the incremental window)."""
        window = await self.sink.sync_window(account.bank_ref)
        return self.context.policy.date_from(self.context.today, window)

    async def upload_accounts(self, accounts: Sequence[AccountRecord]) -> None:
        await self.sink.write_accounts(accounts)

    async def upload_movements(
        self,
        account: AccountRecord,
        movements: Sequence[MovementRecord],
        *,
        complete_since: date | None = None,
    ) -> None:
        """Store ``movements`` of ``account``; pass ``complete_since`` when they are all the
        bank lists from that day on (then pending ones it no longer lists are removed). Two of
        them with one key refuse the whole batch (:class:`~scrapeflow.errors.DuplicateMovement`,
        ``site_changed``): key them with :class:`~scrapeflow.banking.MovementKeys`."""
        await self.sink.write_movements(account.bank_ref, movements, complete_since=complete_since)

    def fail(self, code: ResultCode, detail: str = "") -> NoReturn:
        """End the scrape with ``code``; ``detail`` is what the bank said (no secrets)."""
        raise AccessFailed(code, detail)

    def site_changed(self, detail: str) -> NoReturn:
        """End the scrape: a page no longer looks as the scraper expects."""
        raise AccessFailed(ResultCode.SITE_CHANGED, detail)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


_PRIORITY = {  # when concurrent steps fail differently, the most telling cause wins
    ResultCode.WRONG_CREDENTIALS: 0,
    ResultCode.USER_LOCKED: 0,
    ResultCode.TWO_FACTOR_REQUIRED: 0,
    ResultCode.NOT_APPROVED: 0,
    ResultCode.CONSENT_EXPIRED: 0,
    ResultCode.BLOCKED: 1,
    ResultCode.BANK_UNAVAILABLE: 2,
    ResultCode.SITE_CHANGED: 3,
    ResultCode.TIMEOUT: 4,
    ResultCode.NOT_STORED: 4,
    ResultCode.UNKNOWN: 5,
}


def result_for(exc: BaseException) -> tuple[ResultCode, str]:
    """The result code and detail of a scrape that raised ``exc`` (groups unwrapped)."""
    results = [_result_of_leaf(leaf) for leaf in _leaves(exc)]
    return min(results, key=lambda r: _PRIORITY.get(r[0], 9))


def _result_of_leaf(exc: BaseException) -> tuple[ResultCode, str]:
    if isinstance(exc, AccessFailed):
        try:
            return ResultCode(exc.code), exc.detail
        except ValueError:
            return ResultCode.UNKNOWN, f"unknown result code {exc.code!r}: {exc.detail}"
    if isinstance(exc, Banned):
        return ResultCode.BLOCKED, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError) and not isinstance(exc, FetchError):
        return ResultCode.TIMEOUT, "the scrape ran past its time limit"
    if isinstance(exc, FetchError):
        return ResultCode.BANK_UNAVAILABLE, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, InvalidAccount | UndecodableBody):  # what was read cannot be used
        return ResultCode.SITE_CHANGED, str(exc)
    if isinstance(exc, SessionExpired):
        return ResultCode.BANK_UNAVAILABLE, f"session expired: {exc}"
    if write_failed(exc):
        return ResultCode.NOT_STORED, f"{type(exc).__name__}: {redact(str(exc))[:300]}"
    return ResultCode.UNKNOWN, f"{type(exc).__name__}: {str(exc)[:300]}"


def write_failed(exc: BaseException) -> bool:
    """Whether a scrape stopped because the database failed (its connection went away, a
    statement failed, no connection to be had in time), not because of the bank (whose
    connection errors are :class:`~scrapeflow.errors.FetchError`)."""
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(exc, BaseExceptionGroup):
        return any(write_failed(inner) for inner in exc.exceptions)
    return isinstance(exc, DBAPIError | PoolTimeout | ResultsNotStored) or (
        isinstance(exc, ConnectionError) and not isinstance(exc, FetchError)
    )


def _bank_down(exc: Exception) -> bool:
    """Whether ``exc`` says the bank (or the way to it) failed for a moment, not the access."""
    return not isinstance(exc, AccessFailed) or exc.code == ResultCode.BANK_UNAVAILABLE
