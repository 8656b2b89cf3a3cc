"""Customers and their accesses: adding them and finding them (what was scraped is read back
in :mod:`scrapeflow.banking._reads`).

These are the operations behind the CLI and the service. Passwords go in only through
:func:`add_access`, straight into the vault; nothing here returns or prints one.

What goes in is checked, never cut: a customer id, name or bank login longer than its column, or
holding a control character (a newline, a tab, an escape sequence) or text that is not valid
Unicode (a non-UTF-8 argument), is refused with an :class:`~scrapeflow.errors.InputError` naming
the field and its maximum. Ids and logins also refuse invisible format characters (zero-width
spaces, bidirectional overrides), with which two ids that look the same would differ. A password
is at most :data:`MAX_PASSWORD` characters.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING

from sqlalchemy import String, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking._models import (
    Access,
    Customer,
    FinancialEntity,
)
from scrapeflow.banking._registry import get_scraper
from scrapeflow.errors import InputError

if TYPE_CHECKING:
    # Only annotations here: the scraper API pulls the HTTP client (aiohttp) and the vault
    # cryptography, which checking an id or listing customers does not need.
    from scrapeflow.banking._scraper import BasicScraper
    from scrapeflow.banking._vault import CredentialVault

__all__ = [
    "MAX_PASSWORD",
    "add_access",
    "add_customer",
    "change_password",
    "enable_access",
    "find_customer",
    "rename_customer",
    "validate_customer_id",
    "validate_customer_name",
    "validate_login",
    "validate_password",
]


MAX_PASSWORD = 1024
"""Characters a bank password may have: far beyond any bank's, short of an accident."""
_CONTROL = frozenset({"Cc", "Cs", "Zl", "Zp"})  # controls, lone surrogates, line breaks
_IDENTIFIER = _CONTROL | {"Cf"}  # and invisible format characters


def _checked(field: str, value: str, column: object, *, identifier: bool = False) -> str:
    """``value`` stripped, or :class:`InputError` naming ``field`` when it is empty (for an
    identifier), longer than ``column`` holds, or holds a character it must not."""
    value = value.strip()
    refused = _IDENTIFIER if identifier else _CONTROL
    for char in value:
        category = unicodedata.category(char)
        if category == "Cs":
            raise InputError(f"the {field} is not valid UTF-8 text")
        if category in refused:
            raise InputError(f"the {field} holds a control or invisible character ({char!r})")
    maximum = _length(column)
    if identifier and not value:
        raise InputError(f"the {field} is empty")
    if maximum is not None and len(value) > maximum:
        raise InputError(f"the {field} is {len(value)} characters long; the maximum is {maximum}")
    return value


def _length(column: object) -> int | None:
    kind = getattr(column, "type", None)
    return kind.length if isinstance(kind, String) else None


def validate_customer_id(external_id: str) -> str:
    """``external_id`` as stored and looked up: stripped and NFC-normalised (so that ``é``
    typed as one character or as ``e`` and an accent is one id); :class:`InputError` naming
    what is wrong when it cannot be one: empty, over 64 characters, a control or invisible
    (format) character, a ``/``, ``.`` or ``..``, not valid UTF-8."""
    checked = _checked(
        "customer id",
        unicodedata.normalize("NFC", external_id),
        Customer.__table__.c.external_id,
        identifier=True,
    )
    if "/" in checked:
        # The id is a path segment of the API (/v1/customers/{id}/…), where a "/" cannot be.
        raise InputError("the customer id holds a '/' (it names the customer in URLs)")
    if checked in (".", ".."):
        # As a path segment, a client resolves them away: /v1/customers/./status is
        # /v1/customers/status.
        raise InputError(f"the customer id cannot be {checked!r} (it names the customer in URLs)")
    return checked


def validate_customer_name(name: str) -> str:
    """``name`` as stored (stripped; may be empty); :class:`InputError` when it cannot be."""
    return _checked("customer name", name, Customer.__table__.c.name)


def validate_login(login: str) -> str:
    """A bank login as stored (stripped); :class:`InputError` when it cannot be one."""
    return _checked("bank login", login, Access.__table__.c.login, identifier=True)


def validate_password(password: str) -> str:
    """``password`` unchanged (spaces are part of a password); :class:`InputError` when it is
    empty, longer than :data:`MAX_PASSWORD` or not valid UTF-8 text."""
    if not password:
        raise InputError("the password must not be empty")
    if any(unicodedata.category(char) == "Cs" for char in password):
        raise InputError("the password is not valid UTF-8 text")
    if len(password) > MAX_PASSWORD:
        raise InputError(
            f"the password is {len(password)} characters long; the maximum is {MAX_PASSWORD}"
        )
    return password


async def add_customer(
    sessions: async_sessionmaker[AsyncSession], external_id: str, name: str = ""
) -> int:
    """A new customer; its id. :class:`InputError` when ``external_id`` is taken, or when it or
    ``name`` cannot be stored as given (see the module's documentation)."""
    external_id = validate_customer_id(external_id)
    name = validate_customer_name(name)
    async with sessions() as session, session.begin():
        if await session.scalar(select(Customer.id).where(Customer.external_id == external_id)):
            raise InputError(f"customer {external_id!r} already exists")
        customer = Customer(external_id=external_id, name=name)
        session.add(customer)
        await session.flush()
        return customer.id


async def find_customer(session: AsyncSession, customer: int | str) -> Customer:
    """The customer with this external id (a str) or id (an int); :class:`InputError` if none."""
    if isinstance(customer, str):
        customer = validate_customer_id(customer)
    where = (
        Customer.external_id == customer if isinstance(customer, str) else Customer.id == customer
    )
    found = await session.scalar(select(Customer).where(where))
    if found is None:
        raise InputError(f"no customer {customer!r}")
    return found


async def rename_customer(
    sessions: async_sessionmaker[AsyncSession], customer: str, name: str
) -> None:
    """Give ``customer`` the display name ``name``; :class:`InputError` if it does not exist."""
    name = validate_customer_name(name)
    async with sessions() as session, session.begin():
        (await find_customer(session, customer)).name = name


async def change_password(
    sessions: async_sessionmaker[AsyncSession],
    vault: CredentialVault,
    customer: str,
    access_id: int,
    password: str,
) -> None:
    """Seal ``password`` as the access's new one and drop what the scraper kept of the old
    login (a session waiting for a code); :class:`InputError` when ``customer`` has no such
    access."""
    secret = vault.encrypt(validate_password(password))
    async with sessions() as session, session.begin():
        access = await _access_of(session, customer, access_id)
        access.secret = secret
        access.session_state = None


async def enable_access(
    sessions: async_sessionmaker[AsyncSession], customer: str, access_id: int, enabled: bool
) -> None:
    """Enable or disable the access: a disabled one keeps its data and is left out of
    refreshes and of the customer's outcome; :class:`InputError` when ``customer`` has no
    such access."""
    async with sessions() as session, session.begin():
        access = await _access_of(session, customer, access_id)
        access.enabled = enabled


async def _access_of(session: AsyncSession, customer: str, access_id: int) -> Access:
    owner = await find_customer(session, customer)
    access = await session.get(Access, access_id)
    if access is None or access.customer_id != owner.id:
        raise InputError(f"customer {customer!r} has no access {access_id}")
    return access


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
    replaces the stored password (how a customer fixes "wrong credentials"). Two adds at once
    (the bank's first accesses, or the same login twice) both succeed: the one that loses the
    race to insert a row finds it on its second try.
    """
    scraper = get_scraper(bank)
    login = validate_login(login)
    secret = vault.encrypt(validate_password(password))
    for attempt in range(3):
        try:
            return await _store_access(sessions, customer, bank, scraper, login, secret)
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _store_access(
    sessions: async_sessionmaker[AsyncSession],
    customer: int | str,
    bank: str,
    scraper: type[BasicScraper],
    login: str,
    secret: bytes,
) -> int:
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
