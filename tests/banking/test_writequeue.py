"""The write queue: bounded concurrency, transient failures retried, others raised at once."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from scrapeflow.banking import WriteQueue, writers_for


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
