"""Reading back what was scraped: a customer's accesses, accounts and movements.

Each read is one session of column queries (no ORM objects are built: a status read costs a
fraction of a millisecond of the database driver, not several), and finds its customer in the
same read: an unknown customer is an :class:`~scrapeflow.errors.InputError`, so the service
needs no lookup of its own before it. A page of movements is cut by the database (keyset on
the order of the pages), never by loading every movement of the customer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking._directory import validate_customer_id
from scrapeflow.banking._models import (
    Access,
    Account,
    AccountType,
    Customer,
    FinancialEntity,
    Movement,
)
from scrapeflow.banking._results import Outcome, ResultCode, ScrapeState, outcome_of
from scrapeflow.errors import InputError

__all__ = [
    "AccessView",
    "AccountView",
    "CustomerState",
    "CustomerView",
    "MovementPosition",
    "MovementView",
    "accesses_of",
    "accounts_of",
    "customer_status",
    "customer_views",
    "movement_page",
    "movement_position",
    "movements_of",
]


@dataclass(frozen=True, slots=True)
class AccessView:
    access_id: int
    bank: str
    login: str
    state: ScrapeState
    result: ResultCode | None
    detail: str | None
    accounts: int
    movements: int
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class AccountView:
    access_id: int
    bank: str
    bank_ref: str
    iban: str | None
    number: str | None
    alias: str
    type: AccountType
    currency: str
    balance: Decimal
    updated_at: datetime

    @property
    def label(self) -> str:
        return self.iban or self.number or self.bank_ref


@dataclass(frozen=True, slots=True)
class MovementView:
    bank: str
    account_ref: str
    account: str
    currency: str
    key: str
    operation_date: date
    value_date: date
    amount: Decimal
    description: str
    pending: bool
    balance_after: Decimal | None
    access_id: int = 0
    """The access it was read through: with ``account_ref`` and ``key``, its identity."""


MovementPosition = tuple[int, str, str]
"""Where a movement sits in the order of the pages: minus its operation date's ordinal (newest
day first), then its account's bank ref, then its key."""

_ACCESS = (
    Access.id,
    FinancialEntity.code,
    Access.login,
    Access.scrape_state,
    Access.result_code,
    Access.result_detail,
    Access.accounts_count,
    Access.movements_count,
    Access.scrape_finished_at,
)
_ACCOUNT = (
    Account.access_id,
    FinancialEntity.code,
    Account.bank_ref,
    Account.iban,
    Account.number,
    Account.alias,
    Account.type,
    Account.currency,
    Account.balance,
    Account.updated_at,
)
_MOVEMENT = (
    Account.access_id,
    FinancialEntity.code,
    Account.bank_ref,
    Account.iban,
    Account.number,
    Account.currency,
    Movement.movement_key,
    Movement.operation_date,
    Movement.value_date,
    Movement.amount,
    Movement.description,
    Movement.pending,
    Movement.balance_after,
)


def _customer_is(customer: int | str) -> ColumnElement[bool]:
    if isinstance(customer, str):
        return Customer.external_id == validate_customer_id(customer)
    return Customer.id == customer


async def _rows(
    sessions: async_sessionmaker[AsyncSession], query: Select[*tuple[Any, ...]]
) -> list[Any]:
    async with sessions() as session:
        connection = await session.connection()
        return list((await connection.execute(query)).all())


def _missing(customer: int | str) -> InputError:
    return InputError(f"no customer {customer!r}")


@dataclass(frozen=True, slots=True)
class CustomerState:
    state: ScrapeState
    finished_at: datetime | None
    """When its last refresh ended (None before the first)."""


async def customer_status(
    sessions: async_sessionmaker[AsyncSession], customer: int | str
) -> tuple[CustomerState, list[AccessView]]:
    """The customer's state and its accesses', read together (one snapshot: a launch that
    claims the customer, or a watchdog that frees it, is seen whole or not at all)."""
    rows = await _rows(
        sessions,
        select(Customer.scrape_state, Customer.scrape_finished_at, *_ACCESS)
        .select_from(Customer)
        .outerjoin(Access, Access.customer_id == Customer.id)
        .outerjoin(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .where(_customer_is(customer))
        .order_by(Access.id),
    )
    if not rows:
        raise _missing(customer)
    found = CustomerState(rows[0][0], rows[0][1])
    return found, [AccessView(*row[2:]) for row in rows if row[2] is not None]


@dataclass(frozen=True, slots=True)
class CustomerView:
    external_id: str
    name: str
    state: ScrapeState
    outcome: Outcome | None
    """From its accesses' last results (None before any ended)."""


async def customer_views(
    sessions: async_sessionmaker[AsyncSession], customer: str | None = None
) -> list[CustomerView]:
    """Every customer (or the one ``customer``; :class:`InputError` when it does not exist),
    by id, with the outcome of its accesses' last results: two queries in all."""
    query = select(Customer.id, Customer.external_id, Customer.name, Customer.scrape_state)
    results = select(Access.customer_id, Access.result_code).where(Access.result_code.is_not(None))
    if customer is not None:
        query = query.where(_customer_is(customer))
        results = results.join(Customer, Customer.id == Access.customer_id).where(
            _customer_is(customer)
        )
    async with sessions() as session:
        connection = await session.connection()
        rows = (await connection.execute(query.order_by(Customer.external_id))).all()
        codes: dict[int, list[ResultCode]] = {}
        for owner, code in await connection.execute(results):
            if code is not None:
                codes.setdefault(owner, []).append(code)
    if customer is not None and not rows:
        raise _missing(customer)
    return [
        CustomerView(external_id, name, state, outcome_of(codes[id_]) if id_ in codes else None)
        for id_, external_id, name, state in rows
    ]


async def accesses_of(
    sessions: async_sessionmaker[AsyncSession], customer: int | str
) -> list[AccessView]:
    return (await customer_status(sessions, customer))[1]


async def accounts_of(
    sessions: async_sessionmaker[AsyncSession], customer: int | str
) -> list[AccountView]:
    """The customer's accounts, by bank and bank ref."""
    rows = await _rows(
        sessions,
        select(Customer.id, *_ACCOUNT)
        .select_from(Customer)
        .outerjoin(Access, Access.customer_id == Customer.id)
        .outerjoin(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .outerjoin(Account, Account.access_id == Access.id)
        .where(_customer_is(customer))
        .order_by(FinancialEntity.code, Account.bank_ref),
    )
    if not rows:
        raise _missing(customer)
    return [AccountView(*row[1:]) for row in rows if row[1] is not None]


def _movements(owner: int, accounts: Sequence[str], since: date | None) -> Select[*tuple[Any, ...]]:
    query: Select[*tuple[Any, ...]] = (
        select(*_MOVEMENT)
        .join(Account, Account.id == Movement.account_id)
        .join(Access, Access.id == Account.access_id)
        .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .where(Access.customer_id == owner)
    )
    if accounts:
        compacted = ["".join(a.split()).upper() for a in accounts]  # "ES49 0182 …" too
        query = query.where(Account.bank_ref.in_(list(accounts)) | Account.iban.in_(compacted))
    if since is not None:
        query = query.where(Movement.operation_date >= since)
    return query


def _movement(row: Any) -> MovementView:
    access_id, code, bank_ref, iban, number, currency, key, operated, valued, *rest = row
    amount, description, pending, balance_after = rest
    return MovementView(
        code,
        bank_ref,
        iban or number or bank_ref,
        currency,
        key,
        operated,
        valued,
        amount,
        description,
        pending,
        balance_after,
        access_id=access_id,
    )


async def _owner(session: AsyncSession, customer: int | str) -> int:
    owner = await session.scalar(select(Customer.id).where(_customer_is(customer)))
    if owner is None:
        raise _missing(customer)
    return owner


async def movements_of(
    sessions: async_sessionmaker[AsyncSession],
    customer: int | str,
    *,
    accounts: Sequence[str] = (),
    since: date | None = None,
) -> list[MovementView]:
    """All the customer's movements, newest first; ``accounts`` filters by bank ref or IBAN."""
    async with sessions() as session:
        query = _movements(await _owner(session, customer), accounts, since)
        query = query.order_by(Movement.operation_date.desc(), Movement.id.desc())
        return [_movement(row) for row in (await session.execute(query)).all()]


async def movement_page(
    sessions: async_sessionmaker[AsyncSession],
    customer: int | str,
    *,
    limit: int,
    after: MovementPosition | None = None,
    accounts: Sequence[str] = (),
    since: date | None = None,
    until: date | None = None,
) -> list[MovementView]:
    """Up to ``limit`` of the customer's movements in the order of the pages (newest day
    first, then account bank ref and key), those after position ``after``."""
    async with sessions() as session:
        query = _movements(await _owner(session, customer), accounts, since)
        if until is not None:
            query = query.where(Movement.operation_date <= until)
        if after is not None:
            day, ref, key = date.fromordinal(-after[0]), after[1], after[2]
            query = query.where(
                or_(
                    Movement.operation_date < day,
                    and_(
                        Movement.operation_date == day,
                        or_(
                            Account.bank_ref > ref,
                            and_(Account.bank_ref == ref, Movement.movement_key > key),
                        ),
                    ),
                )
            )
        query = query.order_by(
            Movement.operation_date.desc(), Account.bank_ref, Movement.movement_key
        ).limit(limit)
        return [_movement(row) for row in (await session.execute(query)).all()]


def movement_position(movement: MovementView) -> MovementPosition:
    """``movement``'s place in the order of the pages."""
    return (-movement.operation_date.toordinal(), movement.account_ref, movement.key)
