"""``scrapeflow.db.write``: a short write transaction run whole. On SQLite it waits for a write
lock another connection holds without stopping the event loop, and stores once that lock is
given back; a transaction that raises stores nothing; on PostgreSQL it runs through the
engine."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import Column, Connection, Integer, MetaData, String, Table, insert, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import create_engine, write
from scrapeflow.db._engine import SQLITE_BUSY_TIMEOUT_MS

notes = Table(
    "notes", MetaData(), Column("id", Integer, primary_key=True), Column("text", String(20))
)


async def _engine_with_table(url: str) -> AsyncEngine:
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.run_sync(notes.metadata.drop_all)
        await connection.run_sync(notes.metadata.create_all)
    return engine


async def test_a_write_waits_for_a_lock_held_elsewhere_while_the_loop_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.db"
    engine = await _engine_with_table(f"sqlite+aiosqlite:///{path}")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's writer, mid-transaction
        holder.execute("INSERT INTO notes (text) VALUES ('first')")
        written = asyncio.create_task(
            write(engine, lambda c: c.execute(insert(notes).values(text="second")).rowcount)
        )
        ticks = 0
        for _ in range(30):  # the loop serves others while the write waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 30 and not written.done()
        holder.execute("COMMIT")
        assert await asyncio.wait_for(written, 10) == 1
        async with engine.connect() as connection:
            texts = (await connection.execute(select(notes.c.text).order_by(notes.c.id))).all()
        assert [t for (t,) in texts] == ["first", "second"]
    finally:
        holder.close()
        await engine.dispose()


async def test_a_transaction_that_raises_stores_nothing(empty_db_url: str) -> None:
    engine = await _engine_with_table(empty_db_url)

    def half_then_fail(connection: Connection) -> None:
        connection.execute(insert(notes).values(text="half"))
        raise ValueError("the second half failed")

    def whole(connection: Connection) -> list[str]:
        connection.execute(insert(notes).values(text="whole"))
        return list(connection.execute(select(notes.c.text)).scalars())

    try:
        with pytest.raises(ValueError, match="second half"):
            await write(engine, half_then_fail)
        assert await write(engine, whole) == ["whole"]
    finally:
        await engine.dispose()


async def test_a_lock_held_past_sqlites_busy_timeout_fails_as_sqlite_would(
    tmp_path: Path,
) -> None:
    """On the default busy timeout (30 s), as SQLite's own wait would: "database is locked",
    nothing stored, the event loop serving meanwhile."""
    path = tmp_path / "w.db"
    engine = await _engine_with_table(f"sqlite+aiosqlite:///{path}")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # a process stopped inside its transaction
        started = time.monotonic()
        written = asyncio.create_task(
            write(engine, lambda c: c.execute(insert(notes).values(text="late")))
        )
        ticks = 0
        while not written.done():
            await asyncio.sleep(0.1)
            ticks += 1
        waited = time.monotonic() - started
        with pytest.raises(OperationalError, match="database is locked"):
            await written
        assert SQLITE_BUSY_TIMEOUT_MS == 30_000 and waited >= 30
        assert ticks >= 250  # the loop went on all along
        holder.execute("ROLLBACK")
        async with engine.connect() as connection:
            assert (await connection.execute(select(notes.c.text))).all() == []
    finally:
        holder.close()
        await engine.dispose()
