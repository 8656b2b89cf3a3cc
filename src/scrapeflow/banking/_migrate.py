"""The bank schema's migrations (Alembic, in ``banking/migrations``), run from code."""

from __future__ import annotations

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
    try:
        await _migrate(url, MIGRATIONS_DIR, revision)
    except (ArgumentError, NoSuchModuleError, OperationalError, DBAPIError, OSError) as exc:
        raise ConfigError(f"cannot open the database {_shown(url)}: {_reason(exc)}") from None


def _shown(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(an unreadable URL)"


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return (lines[0] if lines else type(orig).__name__)[:200]
