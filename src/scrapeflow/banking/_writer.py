"""Where scraped accounts and movements go: the :class:`Writer` interface and its SQL default.

A scraper never touches the database: it hands batches to a writer, through the write queue.
:class:`SqlWriter` writes scrapeflow's own schema. An application with its own tables
implements the three methods of :class:`Writer` instead (see ``docs/banking.md``): every write
must be idempotent, because a refresh re-reads an overlap window and retries failed batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Protocol, runtime_checkable

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow.banking._models import (
    Access,
    Account,
    AccountRecord,
    Customer,
    Movement,
    MovementRecord,
    MovementRemoval,
    upsert_accounts,
    upsert_movements,
)
from scrapeflow.errors import InvalidAccount

__all__ = ["SqlWriter", "SyncWindow", "Writer"]


@dataclass(frozen=True, slots=True)
class SyncWindow:
    """What is already stored for one account, to decide where the next scrape starts."""

    last_operation_date: date | None = None
    """The operation date of the newest stored movement (None: nothing stored yet)."""
    oldest_pending: date | None = None
    """The operation date of the oldest movement still stored as pending."""


@runtime_checkable
class Writer(Protocol):
    """Stores what scrapers read. Each call is one batch; each must be idempotent."""

    async def write_accounts(self, access_id: int, accounts: Sequence[AccountRecord]) -> None:
        """Insert or update these accounts of ``access_id`` (keyed on ``bank_ref``)."""

    async def write_movements(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord]
    ) -> None:
        """Insert or update movements of one account (keyed on ``MovementRecord.key``)."""

    async def sync_window(self, access_id: int, account_ref: str) -> SyncWindow:
        """What is stored for that account, for the incremental window."""


class SqlWriter:
    """The :class:`Writer` of scrapeflow's schema (``scrapeflow.banking`` models).

    One transaction per batch: a batch lands whole or not at all. Writes go through Core
    connections, not ORM sessions: the batches are plain upserts, and the ORM's unit of work
    cost more CPU than the statements themselves.
    """

    def __init__(self, target: AsyncEngine | async_sessionmaker[AsyncSession]) -> None:
        engine = target if isinstance(target, AsyncEngine) else target.kw.get("bind")
        if not isinstance(engine, AsyncEngine):
            raise TypeError("SqlWriter needs an AsyncEngine, or a session factory bound to one")
        self.engine = engine
        self._account_ids: dict[tuple[int, str], int] = {}  # (access, bank_ref) -> row id
        self._customer_ids: dict[int, int] = {}  # access -> customer row id

    async def write_accounts(self, access_id: int, accounts: Sequence[AccountRecord]) -> None:
        async with self.engine.begin() as session:
            ids = await upsert_accounts(session, access_id, accounts)
        self._account_ids.update({(access_id, ref): id_ for ref, id_ in ids.items()})

    async def write_movements(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord]
    ) -> None:
        async with self.engine.begin() as session:
            account_id = await self._account_id(session, access_id, account_ref)
            version = await self._next_version(session, access_id)
            await upsert_movements(session, account_id, movements, version=version)

    async def write_movements_since(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord], since: date
    ) -> int:
        """Store ``movements``, which are everything the bank lists for the account from
        ``since`` on, in one transaction: upserted, and the stored pending movements of that
        window the bank no longer lists (a cancelled card authorisation) deleted. Booked
        movements are never deleted. Returns how many were deleted.

        An optional capability: the launcher uses it when a writer has it, else
        ``write_movements``.
        """
        async with self.engine.begin() as session:
            account_id = await self._account_id(session, access_id, account_ref)
            version = await self._next_version(session, access_id)
            await upsert_movements(session, account_id, movements, version=version)
            gone = (
                await session.execute(
                    select(Movement.id, Movement.movement_key, Movement.first_version).where(
                        Movement.account_id == account_id,
                        Movement.pending.is_(True),
                        Movement.operation_date >= since,
                        Movement.movement_key.not_in([m.key for m in movements]),
                    )
                )
            ).all()
            if not gone:
                return 0
            # What the sync cursor reports as removed, in the transaction that removes it.
            await session.execute(
                insert(MovementRemoval),
                [
                    {
                        "customer_id": self._customer_ids[access_id],
                        "account_id": account_id,
                        "movement_key": row.movement_key,
                        "first_version": row.first_version,
                        "version": version,
                    }
                    for row in gone
                ],
            )
            await session.execute(delete(Movement).where(Movement.id.in_([r.id for r in gone])))
            return len(gone)

    async def _next_version(self, session: AsyncConnection, access_id: int) -> int:
        """Bump the customer's sync version in this transaction and return it. The update
        locks the customer's row until commit, so one customer's versions commit in order."""
        customer_id = self._customer_ids.get(access_id)
        if customer_id is None:
            found = await session.scalar(select(Access.customer_id).where(Access.id == access_id))
            if found is None:
                raise InvalidAccount(f"no access {access_id} is stored")
            customer_id = self._customer_ids[access_id] = found
        await session.execute(
            update(Customer)
            .where(Customer.id == customer_id)
            .values(sync_version=Customer.sync_version + 1)
        )
        version = await session.scalar(
            select(Customer.sync_version).where(Customer.id == customer_id)
        )
        return int(version or 0)

    async def _account_id(self, session: AsyncConnection, access_id: int, account_ref: str) -> int:
        known = self._account_ids.get((access_id, account_ref))
        if known is not None:
            return known
        found = await session.scalar(
            select(Account.id).where(
                Account.access_id == access_id, Account.bank_ref == account_ref
            )
        )
        if found is None:
            raise InvalidAccount(
                f"movements for account {account_ref!r} of access {access_id}, which is not "
                "stored: write the account first"
            )
        self._account_ids[(access_id, account_ref)] = found
        return found

    async def sync_window(self, access_id: int, account_ref: str) -> SyncWindow:
        async with self.engine.connect() as session:
            account_id = await session.scalar(
                select(Account.id).where(
                    Account.access_id == access_id, Account.bank_ref == account_ref
                )
            )
            if account_id is None:
                return SyncWindow()
            row = (
                await session.execute(
                    select(
                        func.max(Movement.operation_date),
                        func.min(Movement.operation_date).filter(Movement.pending.is_(True)),
                    ).where(Movement.account_id == account_id)
                )
            ).one()
        return SyncWindow(last_operation_date=row[0], oldest_pending=row[1])
