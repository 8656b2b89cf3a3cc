"""The bank schema's migrations (Alembic, in ``banking/migrations``), run from code."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from scrapeflow.db import migrate as _migrate
from scrapeflow.errors import ConfigError

__all__ = ["MIGRATIONS_DIR", "migrate"]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


async def migrate(url: str, revision: str = "head") -> None:
    """Create or upgrade the bank schema at ``url`` to ``revision`` (the latest). Idempotent.

    >>> await migrate("sqlite+aiosqlite:///scrapeflow.db")  # doctest: +SKIP
    """
    _check_sqlite_path(url)
    try:
        await _migrate(url, MIGRATIONS_DIR, revision)
    except (ArgumentError, NoSuchModuleError, OperationalError, DBAPIError, OSError) as exc:
        raise ConfigError(f"cannot open the database {_shown(url)}: {_reason(exc)}") from None


def _check_sqlite_path(url: str) -> None:
    """A SQLite file in a directory that is missing or read-only: say so before connecting
    (aiosqlite's connection thread would also print a traceback of its own)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # create_engine names the bad URL
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    folder = Path(parsed.database).expanduser().absolute().parent
    if not folder.is_dir():
        raise ConfigError(f"cannot open the database {_shown(url)}: no directory {folder}")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"cannot open the database {_shown(url)}: {folder} is not writable")


def _shown(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(an unreadable URL)"


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return (lines[0] if lines else type(orig).__name__)[:200]
