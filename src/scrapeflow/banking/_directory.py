"""Customers and their accesses: adding them, and reading back what was scraped.

These are the operations behind the CLI and the service. Passwords go in only through
:func:`add_access`, straight into the vault; nothing here returns or prints one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking._models import (
    Access,
    Account,
    AccountType,
    Customer,
    FinancialEntity,
    Movement,
)
from scrapeflow.banking._registry import get_scraper
from scrapeflow.banking._results import ResultCode, ScrapeState
from scrapeflow.banking._vault import CredentialVault
from scrapeflow.errors import InputError

__all__ = [
    "AccessView",
    "AccountView",
    "MovementView",
    "accesses_of",
    "accounts_of",
    "add_access",
    "add_customer",
    "find_customer",
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


async def add_customer(
    sessions: async_sessionmaker[AsyncSession], external_id: str, name: str = ""
) -> int:
    """A new customer; its id. :class:`InputError` when ``external_id`` is taken or empty."""
    external_id = external_id.strip()
    if not external_id or len(external_id) > 64:
        raise InputError("a customer id must be 1-64 characters")
    async with sessions() as session, session.begin():
        if await session.scalar(select(Customer.id).where(Customer.external_id == external_id)):
            raise InputError(f"customer {external_id!r} already exists")
        customer = Customer(external_id=external_id, name=name.strip()[:200])
        session.add(customer)
        await session.flush()
        return customer.id


async def find_customer(session: AsyncSession, customer: int | str) -> Customer:
    """The customer with this external id (a str) or id (an int); :class:`InputError` if none."""
    where = (
        Customer.external_id == customer if isinstance(customer, str) else Customer.id == customer
    )
    found = await session.scalar(select(Customer).where(where))
    if found is None:
        raise InputError(f"no customer {customer!r}")
    return found


async def add_access(
    sessions: async_sessionmaker[AsyncSession],
    vault: CredentialVault,
    customer: int | str,
    bank: str,
    login: str,
    password: str,
) -> int:
    """Add the customer's login at ``bank`` (a registered scraper), or change its password.

    The password is encrypted before it reaches the database. Re-adding an existing login
    replaces the stored password (how a customer fixes "wrong credentials").
    """
    scraper = get_scraper(bank)
    login = login.strip()
    if not login or len(login) > 200:
        raise InputError("a bank login must be 1-200 characters")
    if not password:
        raise InputError("the password must not be empty")
    secret = vault.encrypt(password)
    async with sessions() as session, session.begin():
        owner = await find_customer(session, customer)
        entity = await session.scalar(select(FinancialEntity).where(FinancialEntity.code == bank))
        if entity is None:
            entity = FinancialEntity(code=bank, name=scraper.title, country=scraper.country)
            session.add(entity)
            await session.flush()
        access = await session.scalar(
            select(Access).where(
                Access.customer_id == owner.id, Access.entity_id == entity.id, Access.login == login
            )
        )
        if access is None:
            access = Access(customer_id=owner.id, entity_id=entity.id, login=login, secret=secret)
            session.add(access)
        else:
            access.secret = secret
            access.session_state = None
        await session.flush()
        return access.id


async def accesses_of(
    sessions: async_sessionmaker[AsyncSession], customer: int | str
) -> list[AccessView]:
    async with sessions() as session:
        owner = await find_customer(session, customer)
        rows = await session.execute(
            select(Access, FinancialEntity.code)
            .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
            .where(Access.customer_id == owner.id)
            .order_by(Access.id)
        )
        return [
            AccessView(
                a.id,
                code,
                a.login,
                a.scrape_state,
                a.result_code,
                a.result_detail,
                a.accounts_count,
                a.movements_count,
                a.scrape_finished_at,
            )
            for a, code in rows.all()
        ]


async def accounts_of(
    sessions: async_sessionmaker[AsyncSession], customer: int | str
) -> list[AccountView]:
    async with sessions() as session:
        owner = await find_customer(session, customer)
        rows = await session.execute(
            select(Account, FinancialEntity.code)
            .join(Access, Access.id == Account.access_id)
            .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
            .where(Access.customer_id == owner.id)
            .order_by(FinancialEntity.code, Account.bank_ref)
        )
        return [
            AccountView(
                a.access_id,
                code,
                a.bank_ref,
                a.iban,
                a.number,
                a.alias,
                a.type,
                a.currency,
                a.balance,
                a.updated_at,
            )
            for a, code in rows.all()
        ]


async def movements_of(
    sessions: async_sessionmaker[AsyncSession],
    customer: int | str,
    *,
    accounts: Sequence[str] = (),
    since: date | None = None,
) -> list[MovementView]:
    """The customer's movements, newest first; ``accounts`` filters by bank ref or IBAN."""
    async with sessions() as session:
        owner = await find_customer(session, customer)
        query = (
            select(Movement, Account, FinancialEntity.code)
            .join(Account, Account.id == Movement.account_id)
            .join(Access, Access.id == Account.access_id)
            .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
            .where(Access.customer_id == owner.id)
            .order_by(Movement.operation_date.desc(), Movement.id.desc())
        )
        if accounts:
            compacted = ["".join(a.split()).upper() for a in accounts]  # "ES49 0182 …" too
            query = query.where(Account.bank_ref.in_(list(accounts)) | Account.iban.in_(compacted))
        if since is not None:
            query = query.where(Movement.operation_date >= since)
        rows = await session.execute(query)
        return [
            MovementView(
                code,
                a.bank_ref,
                a.iban or a.number or a.bank_ref,
                a.currency,
                m.movement_key,
                m.operation_date,
                m.value_date,
                m.amount,
                m.description,
                m.pending,
                m.balance_after,
            )
            for m, a, code in rows.all()
        ]
