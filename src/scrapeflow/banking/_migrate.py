"""The bank schema's migrations (Alembic, in ``banking/migrations``), run from code."""

from __future__ import annotations

from pathlib import Path

from scrapeflow.db import migrate as _migrate

__all__ = ["MIGRATIONS_DIR", "migrate"]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


async def migrate(url: str, revision: str = "head") -> None:
    """Create or upgrade the bank schema at ``url`` to ``revision`` (the latest). Idempotent.

    >>> await migrate("sqlite+aiosqlite:///scrapeflow.db")  # doctest: +SKIP
    """
    await _migrate(url, MIGRATIONS_DIR, revision)
