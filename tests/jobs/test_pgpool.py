"""procrastinate's connection pool: one round trip a statement, and still no connection the
server closed handed out.

What the server saw is read from ``pg_stat_activity`` (a backend's last statement), so each
test watches the pool from the database's side, as a round trip counter would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from scrapeflow.jobs._dispatch import psycopg_conninfo
from scrapeflow.jobs._pgpool import PromptReconnectPool
from tests._databases import _pg_database


@pytest.fixture
async def conninfo() -> AsyncIterator[str]:
    async with _pg_database(template=None) as url:
        yield psycopg_conninfo(url)


async def _last_statement(conninfo: str, pid: int) -> tuple[str, str]:
    """The backend's last statement and its state, as the server tells them."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as admin:
        row = await (
            await admin.execute("SELECT query, state FROM pg_stat_activity WHERE pid = %s", [pid])
        ).fetchone()
    assert row is not None, f"no backend {pid}"
    return str(row[0]), str(row[1])


async def _backend(pool: PromptReconnectPool) -> int:
    async with pool.connection() as connection:
        row = await (await connection.execute("SELECT pg_backend_pid() AS marker")).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_statement_is_one_round_trip(conninfo: str) -> None:
    """No BEGIN and COMMIT around a statement, no check before it: the backend's last
    statement is the caller's, and it is not left in a transaction."""
    async with PromptReconnectPool(conninfo, min_size=1, max_size=1, open=False) as pool:
        first = await _backend(pool)
        assert await _last_statement(conninfo, first) == (
            "SELECT pg_backend_pid() AS marker",
            "idle",
        )
        async with pool.connection():  # handed out again at once: nothing sent
            pass
        assert await _backend(pool) == first
        assert (await _last_statement(conninfo, first))[0] == "SELECT pg_backend_pid() AS marker"


async def test_a_connection_the_server_closed_is_not_handed_out(conninfo: str) -> None:
    async with PromptReconnectPool(conninfo, min_size=1, max_size=1, open=False) as pool:
        first = await _backend(pool)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", [first])
        await asyncio.sleep(0.2)  # the server's last words reach the idle connection
        replaced = await _backend(pool)  # answered: the dead one was dropped, not handed out
        assert replaced != first
        assert await _backend(pool) == replaced
