"""Where scraped accounts and movements go: the :class:`Writer` interface and its SQL default.

A scraper never touches the database: it hands batches to a writer, through the write queue.
:class:`SqlWriter` writes scrapeflow's own schema. An application with its own tables
implements the three methods of :class:`Writer` instead (see ``docs/banking.md``): every write
must be idempotent, because a refresh re-reads an overlap window and retries failed batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol, TypeVar, runtime_checkable

from sqlalchemy import Connection, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow.banking._models import (
    Access,
    Account,
    AccountRecord,
    Customer,
    Movement,
    MovementRecord,
    MovementRemoval,
    upsert_accounts_sync,
    upsert_movements_sync,
)
from scrapeflow.banking._writequeue import GroupedWrite
from scrapeflow.errors import InvalidAccount

__all__ = ["SqlWriter", "StoredAccounts", "StoredMovements", "SyncWindow", "Writer"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SyncWindow:
    """What is already stored for one account, to decide where the next scrape starts."""

    last_operation_date: date | None = None
    """The operation date of the newest stored movement (None: nothing stored yet)."""
    oldest_pending: date | None = None
    """The operation date of the oldest movement still stored as pending."""
    read_since: date | None = None
    """The earliest day a scrape read the account's whole list from (None: not known, as
    from a writer that does not keep it: no reaching back then)."""


@dataclass(frozen=True, slots=True)
class StoredAccounts:
    """What a batch of accounts stored: row ids, and (when asked) each one's sync window."""

    ids: Mapping[str, int]
    """Row id by ``bank_ref``."""
    windows: Mapping[str, SyncWindow]
    """Sync window by ``bank_ref``, read in the transaction that stored the accounts."""


@dataclass(frozen=True, slots=True)
class StoredMovements:
    """What a batch of movements left in the database."""

    held: int
    """Rows the database holds, after the batch, for the keys it carried (what was read and
    stored: fewer than the batch means some of it did not land as read)."""
    removed: int = 0
    """Pending movements deleted because the bank no longer lists them."""


@runtime_checkable
class Writer(Protocol):
    """Stores what scrapers read. Each call is one batch; each must be idempotent.

    A write may return how many rows it stored (an ``int``): the access's stored count, shown
    against what was read (``bank status``, the API), and a shortfall ends the access
    ``site_changed``. None (the default) counts the batch as stored whole."""

    async def write_accounts(self, access_id: int, accounts: Sequence[AccountRecord]) -> int | None:
        """Insert or update these accounts of ``access_id`` (keyed on ``bank_ref``)."""

    async def write_movements(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord]
    ) -> int | None:
        """Insert or update movements of one account (keyed on ``MovementRecord.key``)."""

    async def sync_window(self, access_id: int, account_ref: str) -> SyncWindow:
        """What is stored for that account, for the incremental window."""


class SqlWriter:
    """The :class:`Writer` of scrapeflow's schema (``scrapeflow.banking`` models).

    One transaction per batch: a batch lands whole or not at all. Writes go through Core
    connections, not ORM sessions: the batches are plain upserts, and the ORM's unit of work
    cost more CPU than the statements themselves. Each batch is also a :class:`GroupedWrite`
    (:meth:`accounts_batch`, :meth:`movements_batch`), so a write queue on the same engine can
    commit several in one transaction.
    """

    def __init__(self, target: AsyncEngine | async_sessionmaker[AsyncSession]) -> None:
        engine = target if isinstance(target, AsyncEngine) else target.kw.get("bind")
        if not isinstance(engine, AsyncEngine):
            raise TypeError("SqlWriter needs an AsyncEngine, or a session factory bound to one")
        self.engine = engine
        self._account_ids: dict[tuple[int, str], int] = {}  # (access, bank_ref) -> row id
        self._customer_ids: dict[int, int] = {}  # access -> customer row id

    async def write_accounts(self, access_id: int, accounts: Sequence[AccountRecord]) -> int:
        return len(set((await self._alone(self.accounts_batch(access_id, accounts))).ids.values()))

    async def write_movements(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord]
    ) -> int:
        return (await self._alone(self.movements_batch(access_id, account_ref, movements))).held

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
        batch = self.movements_batch(access_id, account_ref, movements, complete_since=since)
        return (await self._alone(batch)).removed

    def accounts_batch(
        self, access_id: int, accounts: Sequence[AccountRecord], *, windows: bool = False
    ) -> GroupedWrite[StoredAccounts]:
        """The batch of :meth:`write_accounts`, to run in a transaction the caller holds.

        ``windows``: also read each account's :class:`SyncWindow`, in the same transaction and
        one query for the batch, instead of one round trip per account later.
        """

        def run(connection: Connection) -> StoredAccounts:
            ids = upsert_accounts_sync(connection, access_id, accounts)
            return StoredAccounts(ids, self._windows(connection, ids) if windows else {})

        def landed(stored: StoredAccounts) -> None:  # ids of rows now committed
            self._account_ids.update({(access_id, ref): id_ for ref, id_ in stored.ids.items()})

        return _grouped(run, landed)

    def movements_batch(
        self,
        access_id: int,
        account_ref: str,
        movements: Sequence[MovementRecord],
        *,
        complete_since: date | None = None,
        pending_stored: bool = True,
    ) -> GroupedWrite[StoredMovements]:
        """The batch of :meth:`write_movements` (or, with ``complete_since``, of
        :meth:`write_movements_since`), to run in a transaction the caller holds; its result
        tells the rows held for its keys and the pending movements deleted.
        ``pending_stored=False`` says the account has no pending movement stored (its sync
        window, read since under the access's claim, had none), so there is none to look for."""
        found: dict[str, int] = {}

        def run(connection: Connection) -> StoredMovements:
            account_id = found["id"] = self._account_id(connection, access_id, account_ref)
            version = self._next_version(connection, access_id)
            upsert_movements_sync(connection, account_id, movements, version=version)
            keys = list({m.key for m in movements})
            held = connection.scalar(_HELD, {"account": account_id, "keys": keys}) if keys else 0
            removed = 0
            if complete_since is not None:
                connection.execute(_READ_SINCE, {"account": account_id, "since": complete_since})
                if pending_stored:
                    removed = self._drop_unlisted(
                        connection, access_id, account_id, movements, complete_since, version
                    )
            return StoredMovements(held=int(held or 0), removed=removed)

        def landed(_: StoredMovements) -> None:  # an id read in a rolled-back group is not kept
            self._account_ids[(access_id, account_ref)] = found["id"]

        return _grouped(run, landed)

    async def _alone(self, batch: GroupedWrite[T]) -> T:
        async with self.engine.begin() as connection:
            result = await batch.run(connection)
        if batch.landed is not None:
            batch.landed(result)
        return result

    def _drop_unlisted(
        self,
        connection: Connection,
        access_id: int,
        account_id: int,
        movements: Sequence[MovementRecord],
        since: date,
        version: int,
    ) -> int:
        gone = connection.execute(
            select(Movement.id, Movement.movement_key, Movement.first_version).where(
                Movement.account_id == account_id,
                Movement.pending.is_(True),
                Movement.operation_date >= since,
                Movement.movement_key.not_in([m.key for m in movements]),
            )
        ).all()
        if not gone:
            return 0
        # What the sync cursor reports as removed, in the transaction that removes it.
        connection.execute(
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
        connection.execute(delete(Movement).where(Movement.id.in_([r.id for r in gone])))
        return len(gone)

    def _next_version(self, connection: Connection, access_id: int) -> int:
        """Bump the customer's sync version in this transaction and return it. The update
        locks the customer's row until commit, so one customer's versions commit in order."""
        customer_id = self._customer_ids.get(access_id)
        if customer_id is None:
            found = connection.scalar(_CUSTOMER_OF, {"access": access_id})
            if found is None:
                raise InvalidAccount(f"no access {access_id} is stored")
            customer_id = self._customer_ids[access_id] = found
        if connection.dialect.update_returning:  # one round trip instead of two
            version = connection.scalar(_BUMP_RETURNING, {"customer": customer_id})
        else:
            connection.execute(_BUMP, {"customer": customer_id})
            version = connection.scalar(_VERSION, {"customer": customer_id})
        return int(version or 0)

    def _account_id(self, connection: Connection, access_id: int, account_ref: str) -> int:
        known = self._account_ids.get((access_id, account_ref))
        if known is not None:
            return known
        found = connection.scalar(_ACCOUNT_ID, {"access": access_id, "ref": account_ref})
        if found is None:
            raise InvalidAccount(
                f"movements for account {account_ref!r} of access {access_id}, which is not "
                "stored: write the account first"
            )
        return int(found)

    def _windows(self, connection: Connection, ids: Mapping[str, int]) -> dict[str, SyncWindow]:
        """The sync window of each account in ``ids`` (bank_ref -> row id), in one query."""
        by_id = {id_: ref for ref, id_ in ids.items()}
        windows = {ref: SyncWindow() for ref in ids}
        if not by_id:
            return windows
        rows = connection.execute(_WINDOWS, {"accounts": list(by_id)})
        for account_id, read_since, last, oldest_pending in rows:
            windows[by_id[account_id]] = SyncWindow(last, oldest_pending, read_since)
        return windows

    async def sync_window(self, access_id: int, account_ref: str) -> SyncWindow:
        async with self.engine.connect() as session:
            row = (
                await session.execute(
                    select(Account.read_since, *_WINDOW)
                    .select_from(Account)
                    .outerjoin(Movement, Movement.account_id == Account.id)
                    .where(Account.access_id == access_id, Account.bank_ref == account_ref)
                    .group_by(Account.id, Account.read_since)
                )
            ).first()
        if row is None:
            return SyncWindow()
        return SyncWindow(last_operation_date=row[1], oldest_pending=row[2], read_since=row[0])


def _grouped(run: Callable[[Connection], T], landed: Callable[[T], None]) -> GroupedWrite[T]:
    """A batch written by ``run``: run whole (:func:`scrapeflow.db.write`), or on the event
    loop's connection in a group with writes that need one (``AsyncConnection.run_sync``: the
    same statements, one code path)."""

    async def on_loop(connection: AsyncConnection) -> T:
        return await connection.run_sync(run)

    return GroupedWrite(on_loop, landed, run)


_WINDOW: tuple[Any, ...] = (
    func.max(Movement.operation_date),
    func.min(Movement.operation_date).filter(Movement.pending.is_(True)),
)
"""A sync window's two aggregates over an account's movements."""

# The statements of every batch, built once: building one (coercions, clones, its cache key)
# cost SQLAlchemy more CPU than SQLite took to run it.
_BUMP = (
    update(Customer)
    .where(Customer.id == bindparam("customer"))
    .values(sync_version=Customer.sync_version + 1)
)
_BUMP_RETURNING = _BUMP.returning(Customer.sync_version)
_VERSION = select(Customer.sync_version).where(Customer.id == bindparam("customer"))
_HELD = (
    select(func.count())
    .select_from(Movement)
    .where(
        Movement.account_id == bindparam("account"),
        Movement.movement_key.in_(bindparam("keys", expanding=True)),
    )
)
_CUSTOMER_OF = select(Access.customer_id).where(Access.id == bindparam("access"))
_ACCOUNT_ID = select(Account.id).where(
    Account.access_id == bindparam("access"), Account.bank_ref == bindparam("ref")
)
_WINDOWS = (
    select(Account.id, Account.read_since, *_WINDOW)
    .select_from(Account)
    .outerjoin(Movement, Movement.account_id == Account.id)
    .where(Account.id.in_(bindparam("accounts", expanding=True)))
    .group_by(Account.id, Account.read_since)
)
_READ_SINCE = (
    update(Account)
    .where(
        Account.id == bindparam("account"),
        or_(Account.read_since.is_(None), Account.read_since > bindparam("since")),
    )
    .values(read_since=bindparam("since"))
)
