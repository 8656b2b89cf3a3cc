"""The service's quick reads give what the engine gives: the same customers' status, accounts
and movement pages, to the cent and the microsecond, on SQLite and PostgreSQL; a SQLite file
that is locked is waited for, not an error."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import (
    Access,
    Account,
    AccountType,
    Customer,
    FinancialEntity,
    Movement,
    ResultCode,
    accounts_of,
    customer_row_id,
    customer_status,
    movement_page,
    movement_position,
)
from scrapeflow.db import QuickReads, create_engine, session_factory, sqlite_file
from scrapeflow.errors import InputError


async def _a_customer_with_money(session: AsyncSession) -> None:
    ana = Customer(external_id="ana", name="Ana")
    bank = FinancialEntity(code="formbank", name="Form Bank", country="ES")
    session.add_all([ana, bank, Customer(external_id="bob", name="Bob")])
    await session.flush()
    access = Access(
        customer_id=ana.id,
        entity_id=bank.id,
        login="12345678Z",
        secret=b"tok",
        result_code=ResultCode.SUCCESS,
        scrape_finished_at=datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC),
    )
    session.add(access)
    await session.flush()
    current = Account(
        access_id=access.id,
        bank_ref="A-1",
        iban="ES9121000418450200051332",
        type=AccountType.CHECKING,
        currency="EUR",
        balance=Decimal("1234567890123.45"),
    )
    card = Account(
        access_id=access.id,
        bank_ref="C-9",
        number="4111********1111",
        type=AccountType.CARD,
        currency="USD",
        balance=Decimal("-0.01"),
    )
    session.add_all([current, card])
    await session.flush()
    day = date(2026, 2, 27)
    for n in range(40):
        session.add(
            Movement(
                account_id=(current if n % 3 else card).id,
                movement_key=f"k{n:03}",
                operation_date=day - timedelta(days=n // 4),
                value_date=day - timedelta(days=n // 4 - 1),
                amount=Decimal(f"{'-' if n % 2 else ''}{n}.{n:02}"),
                description=f"movement {n} · ñ",
                pending=n % 7 == 0,
                balance_after=None if n % 5 == 0 else Decimal(f"{1000 + n}.10"),
            )
        )
    await session.commit()


async def test_quick_reads_give_what_the_engine_gives(db_url: str) -> None:
    engine = create_engine(db_url)
    sessions = session_factory(engine)
    try:
        async with sessions() as session:
            await _a_customer_with_money(session)
        async with QuickReads(engine) as quick:
            for customer in ("ana", "bob"):
                assert await customer_status(quick, customer) == await customer_status(
                    sessions, customer
                )
                assert await accounts_of(quick, customer) == await accounts_of(sessions, customer)
            accounts = await accounts_of(quick, "ana")
            assert [a.balance for a in accounts] == [Decimal("1234567890123.45"), Decimal("-0.01")]
            assert accounts[0].updated_at.tzinfo is not None
            _, accesses = await customer_status(quick, await customer_row_id(quick, "ana"))
            assert accesses[0].result is ResultCode.SUCCESS
            assert accesses[0].finished_at == datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)

            # Every page, cut at each position, with and without date bounds.
            for since, until in [
                (None, None),
                (date(2026, 2, 20), None),
                (None, date(2026, 2, 25)),
            ]:
                after = None
                seen = []
                while True:
                    page = await movement_page(
                        quick, "ana", limit=7, after=after, since=since, until=until
                    )
                    assert page == await movement_page(
                        sessions, "ana", limit=7, after=after, since=since, until=until
                    )
                    seen += page
                    if len(page) < 7:
                        break
                    after = movement_position(page[-1])
                whole = await movement_page(sessions, "ana", limit=100, since=since, until=until)
                assert seen == whole and whole
            pending = [m for m in seen if m.pending]
            assert pending and all(isinstance(m.amount, Decimal) for m in seen)
            # A filter by account goes through the engine, with the same answer.
            assert await movement_page(quick, "ana", limit=50, accounts=["C-9"]) == (
                await movement_page(sessions, "ana", limit=50, accounts=["C-9"])
            )
            with pytest.raises(InputError, match="no customer 'carol'"):
                await customer_status(quick, "carol")
            with pytest.raises(InputError, match="no customer 'carol'"):
                await movement_page(quick, "carol", limit=5)
    finally:
        await engine.dispose()


async def test_a_locked_sqlite_file_is_waited_for_not_an_error(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    try:
        async with session_factory(engine)() as session:
            await _a_customer_with_money(session)
        path = sqlite_file(sqlite_url)
        assert path is not None
        # A connection in exclusive locking mode that has written keeps every reader out,
        # WAL or not, until it lets go (it can take that lock with no other connection open).
        await engine.dispose()
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE customers SET name = 'Ana B.' WHERE external_id = 'ana'")
        async with QuickReads(engine) as quick:

            async def let_go() -> None:
                await asyncio.sleep(0.5)
                holder.execute("COMMIT")
                holder.close()  # in WAL, the exclusive lock goes with the connection

            release = asyncio.create_task(let_go())
            _, accesses = await customer_status(quick, "ana")
            await release
            assert [a.login for a in accesses] == ["12345678Z"]
    finally:
        await engine.dispose()
