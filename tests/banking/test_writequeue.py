"""The write queue: bounded concurrency, transient failures retried, others raised at once;
group commit: batches queued together land in one transaction, each exactly once."""

from __future__ import annotations

import asyncio
from datetime import date
from decimal import Decimal

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from scrapeflow.banking import (
    Account,
    AccountRecord,
    AccountType,
    Customer,
    GroupedWrite,
    Movement,
    MovementRecord,
    SqlWriter,
    StoredMovements,
    WriteQueue,
    movement_key,
    writers_for,
)
from scrapeflow.db import create_engine
from scrapeflow.errors import InvalidAccount


async def test_writers_bound_how_many_writes_run_at_once() -> None:
    running = peak = 0

    async def write(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return n

    async with WriteQueue(writers=2, maxsize=3) as queue:
        results = await asyncio.gather(*(queue.submit(lambda n=n: write(n)) for n in range(20)))
    assert results == list(range(20))
    assert peak == 2
    assert queue.batches == 20


async def test_a_locked_database_is_retried_and_the_write_lands() -> None:
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise OperationalError("INSERT ...", {}, Exception("database is locked"))
        return "landed"

    async with WriteQueue(writers=1, backoff=0.001) as queue:
        assert await queue.submit(flaky) == "landed"
    assert attempts == 3 and queue.retried == 2


async def test_a_real_error_is_raised_at_once_and_the_queue_goes_on() -> None:
    attempts = 0

    async def broken() -> None:
        nonlocal attempts
        attempts += 1
        raise IntegrityError("INSERT ...", {}, Exception("NOT NULL constraint failed"))

    async def fine() -> int:
        return 7

    async with WriteQueue(writers=1) as queue:
        with pytest.raises(IntegrityError):
            await queue.submit(broken)
        assert await queue.submit(fine) == 7
    assert attempts == 1


async def test_submit_outside_the_context_is_refused() -> None:
    async def fine() -> None:
        return None

    with pytest.raises(RuntimeError, match="not running"):
        await WriteQueue().submit(fine)


def test_one_writer_on_sqlite_several_on_a_server() -> None:
    assert writers_for("sqlite+aiosqlite:///x.db") == 1
    assert writers_for("postgresql+asyncpg://u@h/db") == 4


# -- group commit, against a real database ---------------------------------------------------


def _movement(account: str, n: int) -> MovementRecord:
    return MovementRecord(
        key=movement_key(reference=f"{account}-{n}"),
        operation_date=date(2026, 2, n),
        value_date=date(2026, 2, n),
        amount=Decimal(f"-{n}.50"),
        description=f"Compra {n}",
    )


async def _stored(engine: AsyncEngine) -> tuple[list[tuple[str, str]], int]:
    """Every stored movement as (account, key), and the customer's sync version."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(Account.bank_ref, Movement.movement_key).join(Account).order_by(Movement.id)
        )
        version = await connection.scalar(select(Customer.sync_version))
    return [(ref, key) for ref, key in rows], int(version or 0)


async def test_a_group_with_a_failing_batch_stores_every_other_batch_exactly_once(
    db_url: str, access_id: int
) -> None:
    engine = create_engine(db_url)
    writer = SqlWriter(engine)
    accounts = [
        AccountRecord(ref, AccountType.CHECKING, "EUR", Decimal("10.00"), number=f"000{ref}")
        for ref in "AB"
    ]
    try:
        async with WriteQueue(writers=1, engine=engine) as queue:
            await queue.submit(writer.accounts_batch(access_id, accounts))
            batches = [
                writer.movements_batch(access_id, "A", [_movement("A", 1), _movement("A", 2)]),
                writer.movements_batch(access_id, "NOT-STORED", [_movement("X", 1)]),
                writer.movements_batch(access_id, "B", [_movement("B", 3)]),
            ]
            outcomes = await asyncio.gather(
                *(queue.submit(batch) for batch in batches), return_exceptions=True
            )
        assert isinstance(outcomes[1], InvalidAccount)
        # Each good batch tells what the database holds of it, nothing removed.
        assert outcomes[0] == StoredMovements(held=2, removed=0)
        assert outcomes[2] == StoredMovements(held=1, removed=0)
        movements, version = await _stored(engine)
        # Each good batch once (the group was rolled back, then each batch ran alone), the
        # failing one not at all, and one sync version per batch that landed.
        assert sorted(movements) == sorted(
            [
                ("A", _movement("A", 1).key),
                ("A", _movement("A", 2).key),
                ("B", _movement("B", 3).key),
            ]
        )
        assert version == 2
    finally:
        await engine.dispose()


async def test_batches_queued_together_are_committed_together(db_url: str, access_id: int) -> None:
    engine = create_engine(db_url)
    writer = SqlWriter(engine)
    accounts = [
        AccountRecord(ref, AccountType.CHECKING, "EUR", Decimal("10.00"), number=f"000{ref}")
        for ref in "AB"
    ]
    try:
        async with WriteQueue(writers=1, engine=engine) as queue:
            await queue.submit(writer.accounts_batch(access_id, accounts))
            before = queue.transactions
            await asyncio.gather(
                queue.submit(writer.movements_batch(access_id, "A", [_movement("A", 1)])),
                queue.submit(writer.movements_batch(access_id, "B", [_movement("B", 2)])),
                queue.submit(writer.movements_batch(access_id, "A", [_movement("A", 3)])),
            )
            assert queue.transactions == before + 1
        movements, version = await _stored(engine)
        assert len(movements) == 3 and version == 3
    finally:
        await engine.dispose()


async def test_a_grouped_write_needs_the_queue_to_have_an_engine() -> None:
    async def run(connection: AsyncConnection) -> None:
        return None

    async with WriteQueue() as queue:
        with pytest.raises(RuntimeError, match="engine"):
            await queue.submit(GroupedWrite(run))
