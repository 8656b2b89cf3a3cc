"""Async engine and session factory from a database URL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

from scrapeflow.errors import ConfigError

__all__ = ["DEFAULT_URL", "SQLITE_BUSY_TIMEOUT_MS", "create_engine", "session_factory"]

DEFAULT_URL = "sqlite+aiosqlite:///scrapeflow.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
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
    try:
        engine = _create_async_engine(parsed, **kwargs)
    except Exception as exc:  # unknown dialect, missing or sync-only driver
        raise ConfigError(f"cannot open {parsed.render_as_string()}: {exc}") from exc
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions bound to ``engine``; objects stay readable after commit (no expiry)."""
    return async_sessionmaker(engine, expire_on_commit=False)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _safe(url: str) -> str:
    """The URL without its password, for error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"
