"""Reading back what was scraped: a customer's accesses, accounts and movements.

Each read is one session of column queries (no ORM objects are built: a status read costs a
fraction of a millisecond of the database driver, not several), and finds its customer in the
same read: an unknown customer is an :class:`~scrapeflow.errors.InputError`, so the service
needs no lookup of its own before it. A page of movements is cut by the database (keyset on
the order of the pages), never by loading every movement of the customer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Subquery,
    and_,
    bindparam,
    case,
    func,
    literal,
    null,
    or_,
    select,
)
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
from scrapeflow.banking._results import NEEDS_A_PERSON, Outcome, ResultCode, ScrapeState
from scrapeflow.db import QuickQuery, QuickReads
from scrapeflow.errors import InputError

__all__ = [
    "AccessView",
    "AccountView",
    "CustomerPage",
    "CustomerState",
    "CustomerView",
    "MovementPosition",
    "MovementView",
    "Reads",
    "accesses_of",
    "accounts_of",
    "customer_page",
    "customer_row_id",
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
    """Accounts the last scrape read."""
    movements: int
    """Movements the last scrape read."""
    finished_at: datetime | None
    enabled: bool = True
    """A disabled access is left out of refreshes and of the customer's outcome."""
    accounts_stored: int = 0
    """Accounts the database held, after the last scrape, for what it read."""
    movements_stored: int = 0


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
    Access.enabled,
    Access.accounts_stored,
    Access.movements_stored,
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


Reads = async_sessionmaker[AsyncSession] | QuickReads
"""Where the reads below read: sessions of the database, or its :class:`QuickReads` (the
service's, for the reads on a request's path)."""


def _customer_is(customer: int | str) -> ColumnElement[bool]:
    if isinstance(customer, str):
        return Customer.external_id == validate_customer_id(customer)
    return Customer.id == customer


class _PerCustomer:
    """A read of one customer's rows, built once for either way of naming the customer (its
    external id, or its row id): ``build`` is given the condition that picks the customer."""

    def __init__(self, build: Callable[[ColumnElement[bool]], Select[*tuple[Any, ...]]]) -> None:
        self.by_external = QuickQuery(build(Customer.external_id == bindparam("customer")))
        self.by_id = QuickQuery(build(Customer.id == bindparam("customer")))

    async def rows(self, source: Reads, customer: int | str, **params: Any) -> list[Any]:
        given: int | str
        if isinstance(customer, str):
            query, given = self.by_external, validate_customer_id(customer)
        else:
            query, given = self.by_id, customer
        return await _rows(source, query, {"customer": given, **params})


async def _rows(source: Reads, query: QuickQuery, params: dict[str, Any]) -> list[Any]:
    if isinstance(source, QuickReads):
        return await source.rows(query, params)
    return await _select(source, query.statement, params)


async def _select(
    source: Reads, query: Select[*tuple[Any, ...]], params: dict[str, Any] | None = None
) -> list[Any]:
    """The rows of a statement built for this read alone (through the engine)."""
    if isinstance(source, QuickReads):
        async with source.engine.connect() as connection:
            return list((await connection.execute(query, params)).all())
    async with source() as session:
        connection = await session.connection()
        return list((await connection.execute(query, params)).all())


def _missing(customer: int | str) -> InputError:
    return InputError(f"no customer {customer!r}")


@dataclass(frozen=True, slots=True)
class CustomerState:
    state: ScrapeState
    finished_at: datetime | None
    """When its last refresh ended (None before the first)."""


_STATUS = _PerCustomer(
    lambda customer: (
        select(Customer.scrape_state, Customer.scrape_finished_at, *_ACCESS)
        .select_from(Customer)
        .outerjoin(Access, Access.customer_id == Customer.id)
        .outerjoin(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .where(customer)
        .order_by(Access.id)
    )
)


async def customer_status(
    sessions: Reads, customer: int | str
) -> tuple[CustomerState, list[AccessView]]:
    """The customer's state and its accesses', read together (one snapshot: a launch that
    claims the customer, or a watchdog that frees it, is seen whole or not at all)."""
    rows = await _STATUS.rows(sessions, customer)
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
    """From its enabled accesses' last results (None before any ended)."""
    last_refresh_at: datetime | None = None
    """When its last refresh ended."""


def _outcome_of_results() -> tuple[Subquery, ColumnElement[Any]]:
    """Per customer, its enabled accesses' last results counted (a subquery to join on
    ``customer_id``), and the outcome they make in SQL — :func:`outcome_of`'s rules, so a
    list can be filtered and counted by outcome in the database."""
    ended = Access.result_code.is_not(None)
    counts = (
        select(
            Access.customer_id.label("customer_id"),
            func.count().filter(ended).label("ended"),
            func.count().filter(Access.result_code == ResultCode.SUCCESS).label("read"),
            func.count().filter(Access.result_code.in_(sorted(NEEDS_A_PERSON))).label("waiting"),
        )
        .where(Access.enabled.is_(True))
        .group_by(Access.customer_id)
        .subquery()
    )
    outcome = case(
        (func.coalesce(counts.c.ended, 0) == 0, null()),
        (counts.c.waiting > 0, literal(Outcome.NEEDS_ACTION.value)),
        (counts.c.read == counts.c.ended, literal(Outcome.SUCCEEDED.value)),
        (counts.c.read == 0, literal(Outcome.FAILED.value)),
        else_=literal(Outcome.PARTIAL.value),
    )
    return counts, outcome


_CUSTOMER = (Customer.external_id, Customer.name, Customer.scrape_state)


def _customer_view(row: Any) -> CustomerView:
    external_id, name, state, outcome, finished = row
    return CustomerView(
        external_id, name, state, None if outcome is None else Outcome(outcome), finished
    )


async def customer_views(
    sessions: async_sessionmaker[AsyncSession], customer: str | None = None
) -> list[CustomerView]:
    """Every customer (or the one ``customer``; :class:`InputError` when it does not exist),
    by id, with the outcome of its enabled accesses' last results: one query."""
    counts, outcome = _outcome_of_results()
    query = (
        select(*_CUSTOMER, outcome, Customer.scrape_finished_at)
        .outerjoin(counts, counts.c.customer_id == Customer.id)
        .order_by(Customer.external_id)
    )
    if customer is not None:
        query = query.where(_customer_is(customer))
    rows = await _select(sessions, query)
    if customer is not None and not rows:
        raise _missing(customer)
    return [_customer_view(row) for row in rows]


@dataclass(frozen=True, slots=True)
class CustomerPage:
    customers: list[CustomerView]
    """Up to the page's limit, by id."""
    more: bool
    """Whether customers follow the page's last."""
    total: int
    """How many customers match the search and outcome filter, on every page."""
    outcomes: dict[str, int]
    """How many customers matching the search end in each outcome (``none``: not refreshed
    yet), whatever the outcome filter: the counts a list's filter shows."""


async def customer_page(
    sessions: async_sessionmaker[AsyncSession],
    *,
    limit: int,
    after: str | None = None,
    search: str = "",
    outcomes: Sequence[Outcome | None] = (),
    only: Sequence[str] = (),
) -> CustomerPage:
    """A page of customers by id, those after id ``after``: ``search`` is a case-insensitive
    part of the id or the name, ``outcomes`` keeps those ending so (None: not refreshed yet),
    ``only`` keeps those ids (a key's customers). Counted and cut by the database."""
    counts, outcome = _outcome_of_results()
    matching: list[ColumnElement[bool]] = []
    if only:
        matching.append(Customer.external_id.in_(list(only)))
    if search:
        part = search.lower()
        matching.append(
            or_(
                func.lower(Customer.external_id).contains(part, autoescape=True),
                func.lower(Customer.name).contains(part, autoescape=True),
            )
        )
    wanted: list[ColumnElement[bool]] = []
    if outcomes:
        chosen = [o.value for o in outcomes if o is not None]
        either = [outcome.in_(chosen)] if chosen else []
        if None in outcomes:
            either.append(outcome.is_(None))
        wanted.append(or_(*either))
    page = (
        select(*_CUSTOMER, outcome, Customer.scrape_finished_at)
        .outerjoin(counts, counts.c.customer_id == Customer.id)
        .where(*matching, *wanted)
        .order_by(Customer.external_id)
        .limit(limit + 1)
    )
    if after is not None:
        page = page.where(Customer.external_id > after)
    tally = (
        select(outcome.label("outcome"), func.count().label("customers"))
        .select_from(Customer)
        .outerjoin(counts, counts.c.customer_id == Customer.id)
        .where(*matching)
        .group_by(outcome)
    )
    async with sessions() as session:
        connection = await session.connection()
        rows = (await connection.execute(page)).all()
        tallied = {
            value or "none": number for value, number in (await connection.execute(tally)).all()
        }
    chosen_names = {"none" if o is None else o.value for o in outcomes}
    total = sum(n for name, n in tallied.items() if not outcomes or name in chosen_names)
    return CustomerPage(
        [_customer_view(row) for row in rows[:limit]],
        more=len(rows) > limit,
        total=total,
        outcomes=tallied,
    )


async def accesses_of(sessions: Reads, customer: int | str) -> list[AccessView]:
    return (await customer_status(sessions, customer))[1]


_ACCOUNTS = _PerCustomer(
    lambda customer: (
        select(Customer.id, *_ACCOUNT)
        .select_from(Customer)
        .outerjoin(Access, Access.customer_id == Customer.id)
        .outerjoin(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .outerjoin(Account, Account.access_id == Access.id)
        .where(customer)
        .order_by(FinancialEntity.code, Account.bank_ref)
    )
)


async def accounts_of(sessions: Reads, customer: int | str) -> list[AccountView]:
    """The customer's accounts, by bank and bank ref."""
    rows = await _ACCOUNTS.rows(sessions, customer)
    if not rows:
        raise _missing(customer)
    return [AccountView(*row[1:]) for row in rows if row[1] is not None]


def _movements(
    owner: Any, accounts: Sequence[str], since: Any, accesses: Sequence[int] = ()
) -> Select[*tuple[Any, ...]]:
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
    if accesses:  # a bank ref names an account at one bank only: an access narrows it
        query = query.where(Account.access_id.in_(list(accesses)))
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


_OWNER = _PerCustomer(lambda customer: select(Customer.id).where(customer))


async def customer_row_id(source: Reads, customer: int | str) -> int:
    """The customer's row id (``customer`` its external id, or that id itself):
    :class:`InputError` when there is no such customer."""
    found = await _OWNER.rows(source, customer)
    if not found:
        raise _missing(customer)
    return int(found[0][0])


async def movements_of(
    sessions: Reads,
    customer: int | str,
    *,
    accounts: Sequence[str] = (),
    since: date | None = None,
    until: date | None = None,
    accesses: Sequence[int] = (),
) -> list[MovementView]:
    """All the customer's movements in the order of the pages; ``accounts`` filters by bank
    ref or IBAN, ``accesses`` by the access they were read through, ``since`` and ``until``
    by operation date (both included)."""
    query = _movements(await customer_row_id(sessions, customer), accounts, since, accesses)
    if until is not None:
        query = query.where(Movement.operation_date <= until)
    query = query.order_by(*_PAGE_ORDER)
    return [_movement(row) for row in await _select(sessions, query)]


def _page(
    owner: Any,
    *,
    limit: Any,
    after: tuple[Any, Any, Any] | None,
    accounts: Sequence[str],
    since: Any,
    until: Any,
    accesses: Sequence[int],
) -> Select[*tuple[Any, ...]]:
    """A page's statement: values, or bind parameters for a statement built once."""
    query = _movements(owner, accounts, since, accesses)
    if until is not None:
        query = query.where(Movement.operation_date <= until)
    if after is not None:
        day, ref, key = after
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
    return query.order_by(*_PAGE_ORDER).limit(limit)


_PAGES: dict[tuple[bool, bool, bool], QuickQuery] = {}
"""The page statements without account or access filters, by which of since, until and after
they have: built once each."""


def _page_query(since: bool, until: bool, after: bool) -> QuickQuery:
    found = _PAGES.get((since, until, after))
    if found is None:
        found = _PAGES[since, until, after] = QuickQuery(
            _page(
                bindparam("owner"),
                limit=bindparam("limit"),
                after=(bindparam("day"), bindparam("ref"), bindparam("key")) if after else None,
                accounts=(),
                since=bindparam("since") if since else None,
                until=bindparam("until") if until else None,
                accesses=(),
            )
        )
    return found


async def movement_page(
    sessions: Reads,
    customer: int | str,
    *,
    limit: int,
    after: MovementPosition | None = None,
    accounts: Sequence[str] = (),
    since: date | None = None,
    until: date | None = None,
    accesses: Sequence[int] = (),
) -> list[MovementView]:
    """Up to ``limit`` of the customer's movements in the order of the pages (newest day
    first, then account bank ref and key), those after position ``after``."""
    owner = await customer_row_id(sessions, customer)
    position = None if after is None else (date.fromordinal(-after[0]), after[1], after[2])
    if accounts or accesses:  # lists: a statement of their own
        query = _page(
            owner,
            limit=limit,
            after=position,
            accounts=accounts,
            since=since,
            until=until,
            accesses=accesses,
        )
        return [_movement(row) for row in await _select(sessions, query)]
    params: dict[str, Any] = {"owner": owner, "limit": limit, "since": since, "until": until}
    if position is not None:
        params |= {"day": position[0], "ref": position[1], "key": position[2]}
    query_once = _page_query(since is not None, until is not None, position is not None)
    return [_movement(row) for row in await _rows(sessions, query_once, params)]


_PAGE_ORDER = (Movement.operation_date.desc(), Account.bank_ref, Movement.movement_key)


def movement_position(movement: MovementView) -> MovementPosition:
    """``movement``'s place in the order of the pages."""
    return (-movement.operation_date.toordinal(), movement.account_ref, movement.key)
