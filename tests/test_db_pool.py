"""A PostgreSQL engine's pool hands out no connection the server closed, without a round trip
for the ones it did not: a backend the server terminated (as a restart or an administrator
does) is replaced before anyone uses it, and the next transaction succeeds on a new one. A
connection that the server let in and then told it was stopping fails as the database going
away (a job it cut runs again), never as an error of its statement."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import connection_lost, create_engine, single_statements


async def _backend(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int(await connection.scalar(text("SELECT pg_backend_pid()")))


async def test_a_connection_the_server_closed_is_not_handed_out(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        first = await _backend(engine)
        assert await _backend(engine) == first  # pooled: the same backend again
        admin = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
        finally:
            await admin.close()
        await asyncio.sleep(0.2)  # the close reaches the pooled connection
        # Idle for far less than the pool's ping interval: the driver's word decides.
        replaced = await _backend(engine)
        assert replaced != first
        assert await _backend(engine) == replaced
    finally:
        await engine.dispose()


async def _last_statement(pg_url: str, pid: int) -> str:
    admin = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        return str(await admin.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid))
    finally:
        await admin.close()


async def test_single_statements_skip_begin_and_commit(pg_url: str) -> None:
    """A statement of :func:`single_statements` is sent alone (no BEGIN before it, no
    ROLLBACK after); its connection, back in the pool, serves transactions as before."""
    engine = create_engine(pg_url, pool_size=1, max_overflow=0)
    try:
        reads = single_statements(engine)
        async with reads.connect() as connection:
            pid = int(await connection.scalar(text("SELECT pg_backend_pid()")))
            # each statement a transaction of its own: each gets a transaction id of its own
            first = await connection.scalar(text("SELECT txid_current()"))
            assert await connection.scalar(text("SELECT txid_current()")) != first
        assert await _last_statement(pg_url, pid) == "SELECT txid_current()"  # no ROLLBACK
        async with engine.begin() as connection:  # the same connection, in a transaction
            assert int(await connection.scalar(text("SELECT pg_backend_pid()"))) == pid
            first = await connection.scalar(text("SELECT txid_current()"))
            assert await connection.scalar(text("SELECT txid_current()")) == first
        assert await _last_statement(pg_url, pid) == "COMMIT;"
    finally:
        await engine.dispose()


_READY = b"Z\x00\x00\x00\x05I"  # ReadyForQuery, idle: the server has let the client in
_FIELDS = (
    b"SFATAL\x00VFATAL\x00C57P01\x00Mterminating connection due to administrator command\x00\x00"
)
_LAST_WORDS = b"E" + struct.pack("!i", 4 + len(_FIELDS)) + _FIELDS


@contextlib.asynccontextmanager
async def _stopping_after_login(url: str) -> AsyncIterator[str]:
    """``url`` through a proxy on loopback whose first connection meets a server stopping
    just after letting it in: the server's last words follow its ReadyForQuery, then nothing
    more passes (the close comes late, as on a loaded machine). Later connections pass."""
    target = make_url(url)
    connections = 0
    writers: list[asyncio.StreamWriter] = []
    tasks: set[asyncio.Task[None]] = set()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: bool) -> None:
        seen = b""  # what passed since the last chunk boundary that could cut _READY
        try:
            while data := await reader.read(65536):
                if cut and _READY in seen + data:
                    end = (seen + data).index(_READY) + len(_READY) - len(seen)
                    writer.write(data[:end] + _LAST_WORDS)
                    await writer.drain()
                    await asyncio.sleep(5)
                    return
                writer.write(data)
                await writer.drain()
                seen = (seen + data)[-len(_READY) :]
        finally:
            writer.close()

    async def serve(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        cut = connections == 1
        writers.append(client_w)
        server_r, server_w = await asyncio.open_connection(target.host, target.port or 5432)
        writers.append(server_w)
        pumps = asyncio.gather(pump(client_r, server_w, False), pump(server_r, client_w, cut))
        with contextlib.suppress(OSError, asyncio.CancelledError):
            await pumps

    def serving(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(serve(client_r, client_w))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    proxy = await asyncio.start_server(serving, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    try:
        yield target.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    finally:
        proxy.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        await proxy.wait_closed()


async def test_a_connection_told_the_server_stops_as_it_opens_is_lost(pg_url: str) -> None:
    async with _stopping_after_login(pg_url) as url:
        engine = create_engine(url)
        try:
            with pytest.raises(DBAPIError) as failed:
                await _backend(engine)
            assert "cannot switch to state" in str(failed.value)  # the driver out of step
            assert connection_lost(failed.value), failed.value  # a job it cut runs again
            assert await _backend(engine) > 0  # a new connection serves
        finally:
            await engine.dispose()
