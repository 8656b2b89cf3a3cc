"""Async engine and session factory from a database URL.

A SQLite file the engine creates is made owner-only (0600) before SQLite opens it: it holds
customers' logins, balances and movements. SQLite gives its ``-wal`` and ``-shm`` files the
permissions of the database file, so they are owner-only too. An existing file keeps its mode.

A database server's pooled connection is checked when it is handed out without a round trip
where the driver can tell that the server closed it (:func:`_ping_when_idle`); one whose driver
lost step with the server counts as lost, like a closed one (:func:`_out_of_step_is_lost`).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError, InvalidatePoolError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

from scrapeflow.errors import ConfigError

__all__ = [
    "DEFAULT_URL",
    "SQLITE_BUSY_TIMEOUT_MS",
    "create_engine",
    "session_factory",
    "single_statements",
    "sqlite_file",
]

DEFAULT_URL = "sqlite+aiosqlite:///scrapeflow.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
_POOL_SIZE = 20
"""Connections a SQLite engine keeps open."""
_POOL_OVERFLOW = 30
"""Connections it opens beyond those in a burst, closed once returned."""
_SERVER_POOL = (5, 15)
"""The same for a database server (PostgreSQL, SQL Server), whose every connection is a server
process shared with the other workers: a server allows about 100 by default, and a worker
process has two engines (jobs and events; the launcher's writes)."""
_ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg", "mssql": "aioodbc"}


def create_engine(url: str = DEFAULT_URL, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` (``sqlite+aiosqlite:///path`` or ``postgresql+asyncpg://…``).

    On SQLite every connection gets ``journal_mode=WAL`` (readers do not block the writer),
    ``foreign_keys=ON`` and a busy timeout, so a second writer waits instead of failing.
    ``kwargs`` go to :func:`sqlalchemy.ext.asyncio.create_async_engine`.

    >>> engine = create_engine("sqlite+aiosqlite:///data/bank.db")  # doctest: +SKIP
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"not a database URL: {_safe(url)}") from exc
    backend = parsed.get_backend_name()
    if backend in _ASYNC_DRIVERS and "+" not in parsed.drivername:  # a bare "postgresql://"
        parsed = parsed.set(drivername=f"{backend}+{_ASYNC_DRIVERS[backend]}")
    if parsed.database not in (None, "", ":memory:") and "poolclass" not in kwargs:
        # A service serves tens of requests and jobs at once: with SQLAlchemy's 5 connections
        # (+10 opened and closed on demand) every burst reopened connections — on SQLite a new
        # thread, a file open and the pragmas each time. Idle ones cost a file handle each.
        size, overflow = (_POOL_SIZE, _POOL_OVERFLOW) if backend == "sqlite" else _SERVER_POOL
        kwargs.setdefault("pool_size", size)
        kwargs.setdefault("max_overflow", overflow)
    # A failed statement's error would quote its parameters (a login, a vault token, balances)
    # into every log line and message that shows it; the statement alone says what failed.
    kwargs.setdefault("hide_parameters", True)
    try:
        engine = _create_async_engine(parsed, **kwargs)
    except ModuleNotFoundError as exc:  # the URL's driver is not installed
        raise ConfigError(
            f"cannot open {parsed.render_as_string()}: {_missing_driver(exc.name or str(exc))}"
        ) from exc
    except Exception as exc:  # unknown dialect, sync-only driver
        raise ConfigError(f"cannot open {parsed.render_as_string()}: {exc}") from exc
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "do_connect", _create_owner_only)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    else:
        _ping_when_idle(engine)
        _out_of_step_is_lost(engine)
    return engine


def single_statements(engine: AsyncEngine) -> AsyncEngine:
    """``engine`` for work done one statement at a time: reads, and writes of one statement
    each. On PostgreSQL its connections are in autocommit: SQLAlchemy wraps every use of a
    connection in a transaction, two round trips more (``BEGIN``, and ``COMMIT`` or
    ``ROLLBACK``) for a statement that is a transaction of its own there, and that reads, at
    READ COMMITTED, a snapshot of its own in a transaction too. Several statements on one of
    its connections are not one transaction: what must be atomic goes through ``engine``.
    On another database, ``engine`` itself (a SQLite transaction's reads share a snapshot).

    >>> reads = single_statements(engine)  # doctest: +SKIP
    >>> async with reads.connect() as connection:  # doctest: +SKIP
    ...     row = (await connection.execute(query)).first()
    """
    if engine.dialect.name != "postgresql":
        return engine
    return engine.execution_options(isolation_level="AUTOCOMMIT")


PING_AFTER_IDLE = 10.0
"""Seconds a pooled connection may sit idle and be handed out without a ping, when its driver
tells whether the server closed it (asyncpg)."""
_IDLE_SINCE = "scrapeflow.idle_since"


def _ping_when_idle(engine: AsyncEngine) -> None:
    """A restarted server (or a connection the network cut) leaves the pool's idle connections
    dead: handed out unchecked, each would fail its next request once (a 500). SQLAlchemy's
    ``pool_pre_ping`` pings at every checkout: a round trip more for every transaction, about
    6% of a worker's CPU in ``bench/distributed.py``'s bank batch.

    A server that stops or restarts closes its clients' connections, and asyncpg marks each
    closed as soon as the event loop reads the close: a connection the driver knows closed is
    never handed out (the pool drops every connection older than it, as after a failed ping,
    and opens a new one). One idle for :data:`PING_AFTER_IDLE` seconds or more is also pinged
    (a connection a firewall dropped silently). With a driver that cannot tell, every
    checkout pings, as ``pool_pre_ping`` does."""
    dialect = engine.dialect
    pool = engine.sync_engine.pool

    def checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    def checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop(_IDLE_SINCE, None)
        if since is None:  # a new connection: alive
            return
        driver = getattr(dbapi_connection, "driver_connection", None)
        is_closed = getattr(driver, "is_closed", None)
        if callable(is_closed):
            if is_closed():
                raise InvalidatePoolError("the server closed a pooled connection")
            if time.monotonic() - since < PING_AFTER_IDLE:
                return
        try:
            alive = dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if not dialect.is_disconnect(exc, dbapi_connection, None):
                raise
            alive = False
        if not alive:
            raise InvalidatePoolError("a pooled connection did not answer its ping")

    event.listen(pool, "checkin", checked_in)
    event.listen(pool, "checkout", checked_out)


def _out_of_step_is_lost(engine: AsyncEngine) -> None:
    """A server that stops sends each client its last words (``terminating connection due
    to administrator command``), then closes. An asyncpg connection that reads them while
    idle is out of step with the server, and its next statement fails with asyncpg's
    ``InternalClientError`` ("cannot switch to state 12; another operation (2) is in
    progress"). SQLAlchemy counts an error a disconnect when it finds the connection closed
    by then, which asyncpg does on this error in every case tried (a pooled connection, a new
    one told just after its login); yet a refresh cut by a restart once failed with it in CI
    instead of running again. Counted as a disconnect here whatever SQLAlchemy finds: the
    connection and the pool's older ones are dropped, and the error says "the database went
    away" (:func:`~scrapeflow.db.connection_lost`)."""
    out_of_step = getattr(engine.dialect.loaded_dbapi, "InternalClientError", None)
    if out_of_step is None:
        return

    def handle_error(context: ExceptionContext) -> None:
        if isinstance(context.original_exception, out_of_step):
            context.is_disconnect = True

    event.listen(engine.sync_engine, "handle_error", handle_error)


_DRIVER_EXTRAS = {"psycopg": "distributed", "psycopg_pool": "distributed"}


def _missing_driver(module: str) -> str:
    """What to do about a database driver that is not installed."""
    top = module.split(".")[0]
    if top in _DRIVER_EXTRAS:
        extra = _DRIVER_EXTRAS[top]
        return (
            f"its driver {top} is not installed: install scrapeflow's {extra!r} extra "
            f"(pip install 'scrapeflow[{extra}]', or '.[{extra}]' in a checkout)"
        )
    return (
        f"its driver {top} is not installed, and scrapeflow runs on SQLite "
        "(sqlite+aiosqlite:///FILE) and PostgreSQL (postgresql+asyncpg://HOST/DB), whose "
        "drivers it brings"
    )


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (plain or ``file:…?uri=true``); None for another database,
    an in-memory one, or a URL that does not parse."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path, _ = _sqlite_target(parsed.database, uri=str(parsed.query.get("uri", "")) == "true")
    return path


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions bound to ``engine``; objects stay readable after commit (no expiry)."""
    return async_sessionmaker(engine, expire_on_commit=False)


def _sqlite_target(name: str, *, uri: bool) -> tuple[Path | None, bool]:
    """The file SQLite opens for ``name``, and whether it may create it."""
    if not uri or not name.startswith("file:"):
        return Path(name).expanduser(), True
    parts = urlsplit(name)
    mode = (parse_qs(parts.query).get("mode") or ["rwc"])[-1]
    if mode == "memory" or not parts.path:
        return None, False
    return Path(unquote(parts.path)), mode == "rwc"


def _create_owner_only(
    _dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]
) -> None:
    """Before SQLite opens a file that does not exist yet, create it empty and owner-only."""
    if not cargs or not isinstance(cargs[0], str) or cargs[0] == ":memory:":
        return
    path, creatable = _sqlite_target(cargs[0], uri=bool(cparams.get("uri")))
    if path is None or not creatable:
        return
    # There already, or not creatable here: SQLite opens it, or says why it cannot.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # The busy timeout first: switching a new file to WAL takes a lock, and processes
        # opening it together were refused at once ("database is locked") without it.
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _safe(url: str) -> str:
    """The URL without its password, for error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"
