"""The bank schema's migrations (Alembic, in ``banking/migrations``), run from code."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from scrapeflow.db import migrate as _migrate
from scrapeflow.db import sqlite_file, unusable_reason
from scrapeflow.errors import ConfigError

__all__ = ["MIGRATIONS_DIR", "OWN_TABLE_PREFIX", "migrate"]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

OWN_TABLE_PREFIX = "scrapeflow_"
"""Tables scrapeflow makes outside these migrations (the job queue, the service's API keys)."""
_DISPATCH_TABLE_PREFIX = "procrastinate_"
"""The distributed job backend's dispatch tables (procrastinate's schema), which its queue
applies by itself: a worker or a queue may have started on the database first."""


async def migrate(url: str, revision: str = "head", *, adopt: bool = False) -> None:
    """Create or upgrade the bank schema at ``url`` to ``revision`` (the latest). Idempotent.

    The database must be empty, or scrapeflow's already (its ``alembic_version``, or only
    ``scrapeflow_*`` and the job backend's ``procrastinate_*`` tables): one holding another
    application's tables is refused with a :class:`~scrapeflow.errors.ConfigError` naming
    them, unless ``adopt=True`` (add the bank tables beside them). A migration that fails
    leaves the database as it was.

    >>> await migrate("sqlite+aiosqlite:///scrapeflow.db")  # doctest: +SKIP
    """
    _check_sqlite_path(url)
    try:
        await _migrate(url, MIGRATIONS_DIR, revision, owns=_ours, adopt=adopt)
    except DBAPIError as exc:
        reason = unusable_reason(exc)
        if reason is not None:
            raise ConfigError(f"the database {_shown(url)} {reason}") from None
        raise ConfigError(f"cannot open the database {_shown(url)}: {_reason(exc)}") from None
    except (ArgumentError, NoSuchModuleError, OperationalError, OSError) as exc:
        raise ConfigError(f"cannot open the database {_shown(url)}: {_reason(exc)}") from None


def _ours(table: str) -> bool:
    from scrapeflow.banking._models import Base

    return table in Base.metadata.tables or table.startswith(
        (OWN_TABLE_PREFIX, _DISPATCH_TABLE_PREFIX)
    )


def _check_sqlite_path(url: str) -> None:
    """A SQLite file in a directory that is missing or read-only, or a path that is a directory:
    say so before connecting (aiosqlite's connection thread would also print a traceback)."""
    path = sqlite_file(url)
    if path is None:
        return
    path = path.absolute()
    if path.is_dir():
        raise ConfigError(f"cannot open the database {_shown(url)}: {path} is a directory")
    if path.exists():
        return  # opened read-only when it cannot be written: reading commands still work
    folder = path.parent
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
