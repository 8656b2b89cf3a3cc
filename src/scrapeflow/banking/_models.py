"""The banking schema (SQLAlchemy 2 typed declarative) and the idempotent account/movement writes.

Tables::

    customers ─< accesses >─ financial_entities
                    │
                    ├─< contracts ─< accounts (contract optional)
                    └─< accounts ─< movements

Natural keys, used by the upserts: an account is ``(access_id, bank_ref)``; a movement is
``(account_id, movement_key)``; a contract is ``(access_id, bank_ref)``.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, cast

from schwifty import IBAN
from schwifty.exceptions import SchwiftyException
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Connection,
    Date,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Select,
    String,
    Table,
    Unicode,
    UnicodeText,
    UniqueConstraint,
    bindparam,
    select,
    true,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from scrapeflow.banking._results import ResultCode, ScrapeState
from scrapeflow.db._types import Money, UTCDateTime
from scrapeflow.db._upsert import upsert, upsert_sync
from scrapeflow.errors import InvalidAccount

__all__ = [
    "Access",
    "Account",
    "AccountRecord",
    "AccountType",
    "Base",
    "Contract",
    "Customer",
    "FinancialEntity",
    "InvalidAccount",
    "Movement",
    "MovementKeys",
    "MovementRecord",
    "MovementRemoval",
    "movement_key",
    "upsert_accounts",
    "upsert_accounts_sync",
    "upsert_movements",
    "upsert_movements_sync",
    "validate_currency",
    "validate_iban",
]

_CURRENCY = re.compile(r"[A-Z]{3}")


class AccountType(enum.StrEnum):
    CHECKING = "checking"
    SAVINGS = "savings"
    CARD = "card"
    LOAN = "loan"
    OTHER = "other"


def _now() -> datetime:
    return datetime.now(UTC)


def _enum(cls: type[enum.Enum], name: str) -> Enum:
    # Stored as the lowercase value in a VARCHAR: portable (no native ENUM type to migrate).
    return Enum(
        cls,
        name=name,
        native_enum=False,
        create_constraint=False,
        length=32,
        values_callable=lambda members: [m.value for m in members],
    )


_NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base of the banking schema; ``Base.metadata`` is what migrations create."""

    metadata = MetaData(naming_convention=_NAMING)


class Customer(Base):
    """A customer of the aggregation service, with the state of their latest refresh."""

    __tablename__ = "customers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    external_id: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(Unicode(200), default="")
    scrape_state: Mapped[ScrapeState] = mapped_column(
        _enum(ScrapeState, "scrape_state"), default=ScrapeState.IDLE
    )
    scrape_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    scrape_finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    """Stamped by the launcher refreshing the customer: the watchdog's proof it is alive."""
    heartbeat_seconds: Mapped[float | None] = mapped_column(Float)
    """That launcher's heartbeat interval: the watchdog resets nothing fresher than three."""
    held_by: Mapped[str | None] = mapped_column(String(64))
    """The job whose run holds the customer in progress: its next run (the queue found the
    last one dead) takes the hold over at once."""
    sync_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Bumped by every write of the customer's movements, in that write's transaction (which
    holds this row's lock until it commits): the versions of one customer commit in order, so a
    sync cursor at version N has seen every change up to N."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=_now)


class FinancialEntity(Base):
    """A bank; ``code`` is the scraper's registry name (``formbank``)."""

    __tablename__ = "financial_entities"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(Unicode(200))
    country: Mapped[str | None] = mapped_column(String(2))


class Access(Base):
    """A customer's login at a bank, its encrypted secret and the state of its latest scrape."""

    __tablename__ = "accesses"
    __table_args__ = (UniqueConstraint("customer_id", "entity_id", "login"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id", ondelete="CASCADE"))
    entity_id: Mapped[int] = mapped_column(ForeignKey("financial_entities.id"))
    login: Mapped[str] = mapped_column(String(200))
    secret: Mapped[bytes] = mapped_column(LargeBinary)  # a CredentialVault token, never plaintext
    traits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    scrape_state: Mapped[ScrapeState] = mapped_column(
        _enum(ScrapeState, "scrape_state"), default=ScrapeState.IDLE
    )
    result_code: Mapped[ResultCode | None] = mapped_column(_enum(ResultCode, "result_code"))
    scrape_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    scrape_finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    """Refreshed by the launcher holding the access (queued or running): the watchdog's proof
    that an access in progress is alive."""
    heartbeat_seconds: Mapped[float | None] = mapped_column(Float)
    """The heartbeat interval of the launcher holding the access: the watchdog resets nothing
    that has missed fewer than three beats."""
    held_by: Mapped[str | None] = mapped_column(String(64))
    """The job whose run holds the access in progress: its next run takes the hold over."""
    result_detail: Mapped[str | None] = mapped_column(Unicode(500))
    """What the scraper saw when it failed (a bank message, a page); never a credential."""
    accounts_count: Mapped[int] = mapped_column(Integer, default=0)
    """Accounts the last scrape read."""
    movements_count: Mapped[int] = mapped_column(Integer, default=0)
    accounts_stored: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Accounts the database held, after the last scrape, for what it read."""
    movements_stored: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    session_state: Mapped[bytes | None] = mapped_column(LargeBinary)
    """A CredentialVault token of what a scraper keeps between runs: a trusted-device cookie,
    the session waiting for a one-time code."""
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    """A disabled access is kept with its data but left out of refreshes and of the outcome."""

    def __repr__(self) -> str:  # the secret is a token, but it has no place in a log either
        return f"Access(id={self.id!r}, customer_id={self.customer_id!r}, login={self.login!r})"


class Contract(Base):
    """A contract (product agreement) an access can see; accounts may belong to one."""

    __tablename__ = "contracts"
    __table_args__ = (UniqueConstraint("access_id", "bank_ref"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    access_id: Mapped[int] = mapped_column(ForeignKey("accesses.id", ondelete="CASCADE"))
    bank_ref: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(Unicode(200), default="")


class Account(Base):
    """An account: IBAN when the bank has one, else only the bank's own ``number``."""

    __tablename__ = "accounts"
    __table_args__ = (
        UniqueConstraint("access_id", "bank_ref"),
        CheckConstraint("iban IS NOT NULL OR number IS NOT NULL", name="iban_or_number"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    access_id: Mapped[int] = mapped_column(ForeignKey("accesses.id", ondelete="CASCADE"))
    contract_id: Mapped[int | None] = mapped_column(ForeignKey("contracts.id", ondelete="SET NULL"))
    bank_ref: Mapped[str] = mapped_column(String(100))
    iban: Mapped[str | None] = mapped_column(String(34))
    number: Mapped[str | None] = mapped_column(String(64))
    alias: Mapped[str] = mapped_column(Unicode(200), default="")
    type: Mapped[AccountType] = mapped_column(_enum(AccountType, "account_type"))
    currency: Mapped[str] = mapped_column(String(3))
    balance: Mapped[Decimal] = mapped_column(Money())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=_now)
    read_since: Mapped[date | None] = mapped_column(Date)
    """The earliest day a scrape read the account's whole list from: a refresh asked for more
    history (a larger ``initial_days``) reaches back past it."""

    @validates("iban")
    def _check_iban(self, _key: str, value: str | None) -> str | None:
        return None if value is None else validate_iban(value)

    @validates("currency")
    def _check_currency(self, _key: str, value: str) -> str:
        return validate_currency(value)


class Movement(Base):
    """A movement; ``movement_key`` is its identity across scrapes (see :func:`movement_key`)."""

    __tablename__ = "movements"
    __table_args__ = (
        UniqueConstraint("account_id", "movement_key"),
        Index("ix_movements_account_changed", "account_id", "changed_version"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # no separate index: the (account_id, movement_key) unique constraint serves lookups
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    movement_key: Mapped[str] = mapped_column(String(128))
    operation_date: Mapped[date] = mapped_column(Date)
    value_date: Mapped[date] = mapped_column(Date)
    amount: Mapped[Decimal] = mapped_column(Money())
    description: Mapped[str] = mapped_column(UnicodeText, default="")
    balance_after: Mapped[Decimal | None] = mapped_column(Money())
    pending: Mapped[bool] = mapped_column(Boolean, default=False)
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime(), default=_now)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=_now)
    first_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """The customer's ``sync_version`` of the write that stored it first."""
    changed_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """The customer's ``sync_version`` of the last write that changed it."""


class MovementRemoval(Base):
    """A stored movement the bank stopped listing (a withdrawn pending authorisation): what
    the sync cursor reports as ``removed``."""

    __tablename__ = "movement_removals"
    __table_args__ = (Index("ix_movement_removals_customer_version", "customer_id", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id", ondelete="CASCADE"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    movement_key: Mapped[str] = mapped_column(String(128))
    first_version: Mapped[int] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(BigInteger)
    removed_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=_now)


# -- validation ----------------------------------------------------------------------------------


def validate_iban(value: str) -> str:
    """``value`` as a compact IBAN (``ES9121000418450200051332``), or :class:`InvalidAccount`."""
    try:
        return IBAN(value).compact
    except SchwiftyException as exc:
        raise InvalidAccount(f"invalid IBAN {value!r}: {exc}") from exc


def validate_currency(value: str) -> str:
    """``value`` if it is an ISO 4217 alphabetic code (three capitals), else an error."""
    if not _CURRENCY.fullmatch(value):
        raise InvalidAccount(f"invalid currency {value!r}: expected an ISO 4217 code like 'EUR'")
    return value


# -- what scrapers hand over -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccountRecord:
    """One account as a scraper read it. ``bank_ref`` is the bank's stable id for the account."""

    bank_ref: str
    type: AccountType
    currency: str
    balance: Decimal
    iban: str | None = None
    number: str | None = None
    alias: str = ""
    contract_ref: str | None = None
    """The bank's id of the contract the account belongs to, if the bank has contracts."""
    contract_name: str = ""

    def __post_init__(self) -> None:
        if self.iban is None and not self.number:
            raise InvalidAccount(f"account {self.bank_ref!r} has neither an IBAN nor a number")
        if self.iban is not None:
            object.__setattr__(self, "iban", validate_iban(self.iban))
        validate_currency(self.currency)


@dataclass(frozen=True, slots=True)
class MovementRecord:
    """One movement as a scraper read it; ``key`` from :func:`movement_key` (the bank's
    reference) or :class:`MovementKeys` (banks without one)."""

    key: str
    operation_date: date
    value_date: date
    amount: Decimal
    description: str
    pending: bool = False
    balance_after: Decimal | None = None

    def __post_init__(self) -> None:
        if not self.key or len(self.key) > 128:
            raise InvalidAccount(f"movement key must be 1-128 characters, got {self.key!r}")


def movement_key(
    *,
    reference: str | None = None,
    operation_date: date | None = None,
    amount: Decimal | None = None,
    description: str = "",
    occurrence: int = 0,
) -> str:
    """A movement's stable identity within its account.

    The bank's own reference when it gives one (``ref:<reference>``): it survives the move from
    pending to posted, even when the description changes. Otherwise a hash fallback
    ``h:<sha256>`` of operation date, amount, whitespace-normalised description and
    ``occurrence`` (0 for the first of identical movements on a day, 1 for the second…).
    The fallback cannot follow a description change, so a bank that renames posted movements
    must provide a reference. To count occurrences over a read, use :class:`MovementKeys`.
    """
    if reference:
        return f"ref:{reference}"[:128]
    if operation_date is None or amount is None:
        raise InvalidAccount("a movement without a reference needs its date and amount for a key")
    payload = f"{_hashed_form(operation_date, amount, description)}|{occurrence}"
    return "h:" + hashlib.sha256(payload.encode()).hexdigest()


def _hashed_form(operation_date: date, amount: Decimal, description: str) -> str:
    """What :func:`movement_key` hashes besides the occurrence: movements with the same form are
    the same to it ("Cajero" and "CAJERO " on one day, for one amount)."""
    text = " ".join(description.split()).upper()
    return f"{operation_date.isoformat()}|{amount:.2f}|{text}"


class MovementKeys:
    """The keys of one read of an account's movements, for banks that give no reference.

    :func:`movement_key` alone gives identical movements (two cash withdrawals of 20.00 on one
    day, "Cajero" and "CAJERO ") the same key, and storing them keeps only one. One
    ``MovementKeys`` per account and read counts the movements with the same hashed form, in
    read order, and gives the first ``occurrence=0``, the second ``occurrence=1``…; a re-read of
    the same days gives the same keys again, so nothing is doubled either.

    >>> from datetime import date
    >>> from decimal import Decimal
    >>> keys = MovementKeys()
    >>> day, amount = date(2026, 3, 2), Decimal("-20.00")
    >>> first = keys.key(operation_date=day, amount=amount, description="Cajero")
    >>> second = keys.key(operation_date=day, amount=amount, description="CAJERO ")
    >>> first != second
    True
    >>> second == movement_key(operation_date=day, amount=amount, description="Cajero",
    ...                        occurrence=1)
    True

    The count must cover whole days: read from the first day on (the incremental window always
    starts at a day), never from the middle of a day's list. A movement with the bank's
    ``reference`` gets ``ref:<reference>`` and is not counted.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def key(
        self,
        *,
        operation_date: date,
        amount: Decimal,
        description: str = "",
        reference: str | None = None,
    ) -> str:
        """The next movement's key: :func:`movement_key` with its occurrence counted here."""
        if reference:
            return movement_key(reference=reference)
        form = _hashed_form(operation_date, amount, description)
        occurrence = self._seen.get(form, 0)
        self._seen[form] = occurrence + 1
        return movement_key(
            operation_date=operation_date,
            amount=amount,
            description=description,
            occurrence=occurrence,
        )


# -- idempotent writes ------------------------------------------------------------


async def upsert_accounts(
    session: AsyncSession | AsyncConnection, access_id: int, accounts: Iterable[AccountRecord]
) -> dict[str, int]:
    """Insert or update ``accounts`` of one access, and their contracts; ``{bank_ref: id}``.

    Keyed on ``(access_id, bank_ref)`` (contracts too): running it twice leaves the same rows.
    Runs in the session's transaction; the caller commits.
    """
    records = {a.bank_ref: a for a in accounts}
    contracts = _contract_rows(access_id, records)
    contract_ids: dict[str, int] = {}
    if contracts:
        await upsert(session, _CONTRACTS, list(contracts.values()), keys=("access_id", "bank_ref"))
        found_contracts = await session.execute(_contract_ids(access_id, contracts))
        contract_ids = dict(found_contracts.all())
    rows = _account_rows(access_id, records, contract_ids)
    await upsert(session, _ACCOUNTS, rows, keys=("access_id", "bank_ref"), touch="updated_at")
    found = await session.execute(_account_ids(access_id, records))
    return dict(found.all())


def upsert_accounts_sync(
    connection: Connection, access_id: int, accounts: Iterable[AccountRecord]
) -> dict[str, int]:
    """:func:`upsert_accounts` on a synchronous connection (a transaction run whole)."""
    records = {a.bank_ref: a for a in accounts}
    contracts = _contract_rows(access_id, records)
    contract_ids: dict[str, int] = {}
    if contracts:
        upsert_sync(
            connection, _CONTRACTS, list(contracts.values()), keys=("access_id", "bank_ref")
        )
        found_contracts = connection.execute(
            _CONTRACT_IDS, {"access": access_id, "refs": list(contracts)}
        )
        contract_ids = dict(found_contracts.all())
    rows = _account_rows(access_id, records, contract_ids)
    upsert_sync(connection, _ACCOUNTS, rows, keys=("access_id", "bank_ref"), touch="updated_at")
    found = connection.execute(_ACCOUNT_IDS, {"access": access_id, "refs": list(records)})
    return dict(found.all())


def _contract_rows(
    access_id: int, records: Mapping[str, AccountRecord]
) -> dict[str, dict[str, Any]]:
    return {
        a.contract_ref: {
            "access_id": access_id,
            "bank_ref": a.contract_ref,
            "name": a.contract_name,
        }
        for a in records.values()
        if a.contract_ref
    }


def _contract_ids(access_id: int, contracts: Mapping[str, Any]) -> Select[str, int]:
    return select(Contract.bank_ref, Contract.id).where(
        Contract.access_id == access_id, Contract.bank_ref.in_(list(contracts))
    )


def _account_ids(access_id: int, records: Mapping[str, Any]) -> Select[str, int]:
    return select(Account.bank_ref, Account.id).where(
        Account.access_id == access_id, Account.bank_ref.in_(list(records))
    )


# The sync path's selects, built once (building one cost more CPU than running it).
_CONTRACT_IDS = select(Contract.bank_ref, Contract.id).where(
    Contract.access_id == bindparam("access"),
    Contract.bank_ref.in_(bindparam("refs", expanding=True)),
)
_ACCOUNT_IDS = select(Account.bank_ref, Account.id).where(
    Account.access_id == bindparam("access"),
    Account.bank_ref.in_(bindparam("refs", expanding=True)),
)


def _account_rows(
    access_id: int, records: Mapping[str, AccountRecord], contract_ids: Mapping[str, int]
) -> list[dict[str, Any]]:
    return [
        {
            "access_id": access_id,
            "bank_ref": a.bank_ref,
            "contract_id": contract_ids.get(a.contract_ref) if a.contract_ref else None,
            "iban": a.iban,
            "number": a.number,
            "alias": a.alias,
            "type": a.type,
            "currency": a.currency,
            "balance": a.balance,
        }
        for a in records.values()
    ]


async def upsert_movements(
    session: AsyncSession | AsyncConnection,
    account_id: int,
    movements: Sequence[MovementRecord],
    *,
    version: int = 0,
) -> None:
    """Insert or update ``movements`` of one account, keyed on ``(account_id, movement_key)``.

    A pending movement that posts (same key, new description, ``pending=False``) is updated in
    place; ``first_seen`` keeps the first sighting and ``updated_at`` moves only on a real change.
    ``version`` is the customer's sync version of this write: stored as ``first_version`` on
    insert and as ``changed_version`` on insert and on a real change. The last record wins
    when a batch repeats a key (scrapers' batches never do: the
    :class:`~scrapeflow.banking.AccessSink` refuses them). Runs in the caller's transaction.
    """
    await upsert(
        session, _MOVEMENTS, _movement_rows(account_id, movements, version), **_MOVEMENT_KEYS
    )


def upsert_movements_sync(
    connection: Connection,
    account_id: int,
    movements: Sequence[MovementRecord],
    *,
    version: int = 0,
) -> None:
    """:func:`upsert_movements` on a synchronous connection (a transaction in a worker
    thread)."""
    rows = _movement_rows(account_id, movements, version)
    upsert_sync(connection, _MOVEMENTS, rows, **_MOVEMENT_KEYS)


def _movement_rows(
    account_id: int, movements: Sequence[MovementRecord], version: int
) -> list[dict[str, Any]]:
    by_key = {
        m.key: {
            "account_id": account_id,
            "movement_key": m.key,
            "operation_date": m.operation_date,
            "value_date": m.value_date,
            "amount": m.amount,
            "description": m.description,
            "balance_after": m.balance_after,
            "pending": m.pending,
            "first_version": version,
            "changed_version": version,
        }
        for m in movements
    }
    return list(by_key.values())


_CONTRACTS = cast(Table, Contract.__table__)
_ACCOUNTS = cast(Table, Account.__table__)
_MOVEMENTS = cast(Table, Movement.__table__)
_MOVEMENT_KEYS: dict[str, Any] = {
    "keys": ("account_id", "movement_key"),
    "touch": "updated_at",
    "stamps": ("changed_version",),
    "insert_only": ("first_version",),
}
