"""Short write transactions that hold SQLite's write lock for the time SQLite needs, not for
trips through a busy event loop.

SQLite lets one transaction write at a time. Through the async engine a transaction's every
statement is four hand-offs to aiosqlite's thread and back, each waiting its turn in an event
loop that serves a hundred refreshes and their clients: under ``bench/service.py`` the write
lock was held 87% of the run, a job's insert waited 100 ms for it at the median and seconds at
the 95th percentile, while SQLite's own work was a fraction of a millisecond a transaction. A
transaction in a worker thread fares little better: each statement gives up the GIL and waits
up to the interpreter's switch interval (5 ms) to take it back from the busy loop.

:func:`write` runs a transaction written as a plain function of a (synchronous) SQLAlchemy
``Connection``:

* **SQLite**: in the calling thread, on a connection of the standard driver opened once per
  engine: ``BEGIN IMMEDIATE``, the function, ``COMMIT``, without a pause. Its busy timeout is
  zero: while another transaction holds the lock, ``BEGIN IMMEDIATE`` is tried again after a
  short asynchronous wait (0.5 ms, doubling to 10 ms), for as long as SQLite's busy timeout,
  then fails as SQLite would ("database is locked"). The event loop is held for the
  transaction's own time (under a millisecond for the writes that use this).
* **Any other database**: through the async engine, in one transaction (``run_sync``).

The function runs once the lock is held, and blocks the loop meanwhile: it must only build and
execute statements from its arguments (no waiting, no network), and return what it read.
Callers that retry a failed write (the write queue) run it again.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy import create_engine as sa_create_engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import _engine
from scrapeflow.db._engine import _create_owner_only, _sqlite_pragmas, sqlite_file

__all__ = ["write"]

T = TypeVar("T")

_FIRST_PAUSE = 0.0005
_LONGEST_PAUSE = 0.01

_ENGINES: weakref.WeakKeyDictionary[AsyncEngine, Engine | None] = weakref.WeakKeyDictionary()


async def write(engine: AsyncEngine, transaction: Callable[[Connection], T]) -> T:
    """Run ``transaction(connection)`` in one transaction on ``engine``'s database, committed
    when it returns, rolled back when it raises; what it returned."""
    direct = _direct_engine(engine)
    if direct is None:
        async with engine.begin() as connection:
            return await connection.run_sync(transaction)
    deadline = time.monotonic() + _engine.SQLITE_BUSY_TIMEOUT_MS / 1000  # SQLite's own wait
    pause = _FIRST_PAUSE
    while True:
        with direct.connect() as connection:
            if _begin_immediate(connection.connection.dbapi_connection):
                try:
                    # SQLAlchemy's own BEGIN is nothing on this driver: the transaction is ours
                    with connection.begin():
                        return transaction(connection)
                finally:
                    _end(connection.connection.dbapi_connection)
        if time.monotonic() >= deadline:
            raise OperationalError(
                "BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked")
            )
        await asyncio.sleep(pause)  # the connection back in the pool meanwhile
        pause = min(pause * 2, _LONGEST_PAUSE)


def _begin_immediate(dbapi_connection: Any) -> bool:
    """Take SQLite's write lock; False when another connection holds it. On the driver's own
    connection: a refusal is common under load, and SQLAlchemy's wrapping of it cost more CPU
    than the transaction."""
    try:
        dbapi_connection.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode == sqlite3.SQLITE_BUSY:
            return False
        raise
    return True


def _end(dbapi_connection: Any) -> None:
    """Roll back what is still open (nothing after a commit or SQLAlchemy's rollback)."""
    if dbapi_connection.in_transaction:
        dbapi_connection.rollback()


def _direct_engine(engine: AsyncEngine) -> Engine | None:
    """The synchronous engine :func:`write` uses beside ``engine`` (None: not a SQLite file)."""
    try:
        return _ENGINES[engine]
    except KeyError:
        pass
    direct: Engine | None = None
    url = engine.url
    if sqlite_file(url.render_as_string(hide_password=False)) is not None:
        direct = sa_create_engine(
            url.set(drivername="sqlite+pysqlite"),
            pool_size=1,
            max_overflow=0,
            # every use is whole in the loop's thread, but a process may run several loops
            connect_args={"check_same_thread": False},
            hide_parameters=engine.sync_engine.hide_parameters,
        )
        event.listen(direct, "do_connect", _create_owner_only)
        event.listen(direct, "connect", _direct_pragmas)
        weakref.finalize(engine, direct.dispose)
    _ENGINES[engine] = direct
    return direct


def _direct_pragmas(dbapi_connection: Any, record: Any) -> None:
    _sqlite_pragmas(dbapi_connection, record)
    # The driver's own BEGIN off (write() sends BEGIN IMMEDIATE: the lock at once, where a
    # deferred BEGIN that read first could find its snapshot stale at its first write), and no
    # busy handler: a wait would stop the event loop; write() waits without blocking instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=0")
    finally:
        cursor.close()
