"""The sync cursor: what changed in a customer's movements since the client last asked.

Every write of a customer's movements bumps ``customers.sync_version`` in its own transaction
(see :class:`~scrapeflow.banking.SqlWriter`), which holds the customer's row until it commits:
one customer's versions commit in order. A movement carries the version that stored it first
and the version that last changed it; a removed movement leaves a :class:`MovementRemoval`.

A client at cursor ``c`` holds the customer's movements as they were at version ``c``. Since
``c``, a movement stored first after ``c`` is **added**; one stored by ``c`` and changed since
is **modified**; one stored by ``c`` and removed since is **removed**. One statement reads the
changes, so they come from one snapshot on every database. A page holds whole versions (one
write batch each); an added movement comes with its current state, so a client that applies
the pages in order ends with exactly what is stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Date, Select, and_, cast, literal, null, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking._directory import find_customer
from scrapeflow.banking._models import (
    Access,
    Account,
    Customer,
    FinancialEntity,
    Movement,
    MovementRemoval,
)
from scrapeflow.banking._reads import MovementView
from scrapeflow.errors import InputError

__all__ = ["MovementChange", "MovementChanges", "RemovedMovement", "movement_changes"]

_CURSOR_PREFIX = "v1:"
_CURSOR_PREFIX_V2 = "v2:"
_MAX_VERSION = 2**63 - 1
"""Versions are BIGINT: a larger number in a cursor was never given (and overflows a query)."""


@dataclass(frozen=True, slots=True)
class MovementChange(MovementView):
    """A movement as stored now: ``(access_id, account_ref, key)`` is its identity."""


@dataclass(frozen=True, slots=True)
class RemovedMovement:
    access_id: int
    bank: str
    account_ref: str
    account: str
    key: str


@dataclass(frozen=True, slots=True)
class MovementChanges:
    """One page of changes since a cursor, and the cursor to pass next."""

    added: list[MovementChange]
    modified: list[MovementChange]
    removed: list[RemovedMovement]
    next_cursor: str
    has_more: bool
    """True when more changes wait: ask again with ``next_cursor`` at once."""


def customer_tag(external_id: str, purpose: str) -> str:
    """A short tag of a customer for its cursors (``purpose``: which kind of cursor), so that a
    cursor given for one customer is refused for another. Not a secret: it catches mistakes
    (the key already decides which customers a client may read)."""
    digest = hashlib.sha256(f"scrapeflow {purpose} cursor\0{external_id}".encode()).hexdigest()
    return digest[:12]


def encode_cursor(version: int, external_id: str) -> str:
    """The sync cursor for ``version`` of ``external_id``'s movements."""
    text = f"{_CURSOR_PREFIX_V2}{version}:{customer_tag(external_id, 'sync')}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, external_id: str) -> int:
    """The version a cursor of ``external_id`` stands for; :class:`InputError` for one this API
    did not give, one it gave for another customer, or a version past what a database holds.
    A cursor from before cursors named their customer (``v1:``) is still taken."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        if text.startswith(_CURSOR_PREFIX_V2):
            number, _, tag = text.removeprefix(_CURSOR_PREFIX_V2).partition(":")
        elif text.startswith(_CURSOR_PREFIX):
            number, tag = text.removeprefix(_CURSOR_PREFIX), None
        else:
            raise ValueError(text)
        if not number.isascii() or not number.isdigit() or len(number) > 19:
            raise ValueError(text)
        version = int(number)
        if str(version) != number or version > _MAX_VERSION:
            raise ValueError(text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InputError("cursor is not one this API gave") from None
    if tag is not None and tag != customer_tag(external_id, "sync"):
        raise InputError("cursor was given for another customer: start again without one")
    return version


async def movement_changes(
    sessions: async_sessionmaker[AsyncSession],
    customer: int | str,
    *,
    cursor: str | None = None,
    count: int = 500,
) -> MovementChanges:
    """The changes to ``customer``'s movements since ``cursor`` (None: since nothing, so every
    stored movement is added), at most about ``count`` of them: a page ends on a whole version,
    so it can hold more when one write batch is larger. :class:`InputError` for a cursor this
    API did not give (or one ahead of the customer: a restored database)."""
    async with sessions() as session:
        owner = await find_customer(session, customer)
        since = -1 if cursor is None else decode_cursor(cursor, owner.external_id)
        rows = (await session.execute(_changes_since(owner.id, since))).all()
    current = next(int(r.version) for r in rows if r.what == "v")
    if since > current:
        raise InputError("cursor is ahead of the stored data: start again without one")
    items = sorted(
        (_position(r, since), r.row_id, r) for r in rows if r.what != "v" and _wanted(r, since)
    )
    page: list[Any] = []
    last = since
    for position, _, row in items:
        if len(page) >= count and position > last:
            break
        page.append(row)
        last = position
    has_more = len(page) < len(items)
    added: list[MovementChange] = []
    modified: list[MovementChange] = []
    removed: list[RemovedMovement] = []
    for row in page:
        if row.what == "r":
            removed.append(
                RemovedMovement(row.access_id, row.code, row.bank_ref, _account(row), row.key)
            )
        else:
            (added if row.first_version > since else modified).append(_change(row))
    return MovementChanges(
        added=added,
        modified=modified,
        removed=removed,
        next_cursor=encode_cursor(last if has_more else max(current, 0), owner.external_id),
        has_more=has_more,
    )


def _wanted(row: Any, since: int) -> bool:
    # A removal of a movement stored after the cursor: the client never had it.
    return not (row.what == "r" and row.first_version > since)


def _position(row: Any, since: int) -> int:
    """The version a change belongs to in the pages: an added movement's first version, else
    the version of the change."""
    return int(row.first_version) if row.first_version > since else int(row.version)


def _account(row: Any) -> str:
    return str(row.iban or row.number or row.bank_ref)


def _change(row: Any) -> MovementChange:
    return MovementChange(
        access_id=row.access_id,
        bank=row.code,
        account_ref=row.bank_ref,
        account=_account(row),
        currency=row.currency,
        key=row.key,
        operation_date=row.operation_date,
        value_date=row.value_date,
        amount=row.amount,
        description=row.description,
        pending=bool(row.pending),
        balance_after=row.balance_after,
    )


def _changes_since(customer_id: int, since: int) -> Any:
    """One statement: the movements added or changed after ``since``, the removals after it,
    and the customer's current version (a ``what`` of ``m``, ``r`` and ``v``)."""
    account_columns: Sequence[Any] = (
        Account.access_id,
        Account.bank_ref,
        Account.iban,
        Account.number,
        Account.currency,
        FinancialEntity.code,
    )
    changed: Select[Any] = (
        select(
            literal("m").label("what"),
            Movement.id.label("row_id"),
            *account_columns,
            Movement.movement_key.label("key"),
            Movement.first_version,
            Movement.changed_version.label("version"),
            Movement.operation_date,
            Movement.value_date,
            Movement.amount,
            Movement.description,
            Movement.pending,
            Movement.balance_after,
        )
        .join(Account, Account.id == Movement.account_id)
        .join(Access, Access.id == Account.access_id)
        .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .where(
            and_(
                Access.customer_id == customer_id,
                or_(Movement.changed_version > since, Movement.first_version > since),
            )
        )
    )
    nothing = (
        cast(null(), Date),
        cast(null(), Date),
        null(),
        null(),
        null(),
        null(),
    )
    removals: Select[Any] = (
        select(
            literal("r"),
            MovementRemoval.id,
            *account_columns,
            MovementRemoval.movement_key,
            MovementRemoval.first_version,
            MovementRemoval.version,
            *nothing,
        )
        .join(Account, Account.id == MovementRemoval.account_id)
        .join(Access, Access.id == Account.access_id)
        .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .where(and_(MovementRemoval.customer_id == customer_id, MovementRemoval.version > since))
    )
    version: Any = select(
        literal("v"),
        Customer.id,
        *(null() for _ in account_columns),
        null(),
        Customer.sync_version,
        Customer.sync_version,
        *nothing,
    ).where(Customer.id == customer_id)
    return union_all(changed, removals, version)
