"""Scraped accounts and movements into tables you already have: a custom ``Writer``.

Your schema (here two tables of an existing ledger) stays as it is; the writer maps scrapeflow's
records onto it. Every method must be idempotent — a refresh re-reads an overlap window and the
write queue retries a batch after a deadlock — so writes are keyed upserts, never blind inserts.
scrapeflow's own tables still hold customers, accesses and their states (``db_url``); yours can
live in the same database or another one.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    func,
    select,
)
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from scrapeflow.banking import AccountRecord, MovementRecord, SyncWindow
from scrapeflow.db import upsert

ledger = MetaData()
ledger_accounts = Table(
    "ledger_accounts",
    ledger,
    Column("source", String(40), primary_key=True),  # "<access id>:<bank's account id>"
    Column("iban_or_number", String(40), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("balance_cents", BigInteger, nullable=False),  # the ledger counts in cents
)
ledger_entries = Table(
    "ledger_entries",
    ledger,
    Column("account_source", String(40), nullable=False),
    Column("entry_key", String(128), nullable=False),
    Column("booked_on", Date, nullable=False),
    Column("amount_cents", BigInteger, nullable=False),
    Column("text", String(500), nullable=False),
    Column("is_pending", Boolean, nullable=False),
    UniqueConstraint("account_source", "entry_key"),
)


class LedgerWriter:
    """Implements ``scrapeflow.banking.Writer`` on the ledger's two tables."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.sessions = async_sessionmaker(engine)

    async def write_accounts(self, access_id: int, accounts: Sequence[AccountRecord]) -> None:
        rows = [
            {
                "source": f"{access_id}:{a.bank_ref}",
                "iban_or_number": a.iban or a.number,
                "currency": a.currency,
                "balance_cents": int(a.balance * 100),
            }
            for a in accounts
        ]
        async with self.sessions() as session, session.begin():  # one batch, one transaction
            await upsert(session, ledger_accounts, rows, keys=("source",))

    async def write_movements(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord]
    ) -> None:
        rows = [
            {
                "account_source": f"{access_id}:{account_ref}",
                "entry_key": m.key,  # stable across scrapes, even when a pending one posts
                "booked_on": m.operation_date,
                "amount_cents": int(m.amount * 100),
                "text": m.description[:500],
                "is_pending": m.pending,
            }
            for m in movements
        ]
        async with self.sessions() as session, session.begin():
            await upsert(session, ledger_entries, rows, keys=("account_source", "entry_key"))

    async def sync_window(self, access_id: int, account_ref: str) -> SyncWindow:
        source = f"{access_id}:{account_ref}"
        async with self.sessions() as session:
            newest, oldest_pending = (
                await session.execute(
                    select(
                        func.max(ledger_entries.c.booked_on),
                        func.min(ledger_entries.c.booked_on).filter(ledger_entries.c.is_pending),
                    ).where(ledger_entries.c.account_source == source)
                )
            ).one()
        return SyncWindow(last_operation_date=newest, oldest_pending=oldest_pending)


# Wiring it in:
#
#     engine = create_engine("postgresql+asyncpg://ledger@db/ledger")
#     async with Launcher(db_url, vault=vault, writer=LedgerWriter(engine)) as launcher:
#         await launcher.refresh("customer-42")
