"""Schema migrations (Alembic) run from code: no ``alembic.ini`` to ship or find.

The database layer knows how to run migrations, not which: an application passes its own
Alembic script directory (``scrapeflow.banking`` passes ``banking/migrations``).

A database already at the head revision is recognised with one query, without importing
Alembic (about half a second of a short command's start-up): the head is read from the
revision files themselves. Anything less certain — several heads, a file that does not say its
revision plainly, a database elsewhere — goes through Alembic.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.engine import Connection

from scrapeflow.db._engine import create_engine

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["alembic_config", "head_revision", "migrate"]

_REVISION = re.compile(
    r"^(down_)?revision(?:\s*:\s*[^=]+)?\s*=\s*(None|\"[^\"]*\"|'[^']*')\s*$", re.M
)


def alembic_config(url: str, script_location: Path) -> Config:
    """An Alembic config for ``url``, e.g. for ``command.revision(..., autogenerate=True)``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision(script_location: Path) -> str | None:
    """The one head of the revision files in ``script_location/versions``, read as text; None
    when that is not certain (no file, several heads, a revision not written as a literal)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted((script_location / "versions").glob("*.py")):
        found = {bool(m[0]): m[1] for m in _REVISION.findall(path.read_text(encoding="utf-8"))}
        if False not in found or True not in found:
            return None
        revisions.add(found[False].strip("\"'"))
        if found[True] != "None":
            parents.add(found[True].strip("\"'"))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


async def migrate(url: str, script_location: Path, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` of ``script_location``. Idempotent."""
    target = head_revision(script_location) if revision == "head" else revision
    engine = create_engine(url)

    def upgrade(connection: Connection) -> None:
        if target is not None and _current(connection) == target:
            return
        from alembic import command

        config = alembic_config(url, script_location)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    try:
        async with engine.begin() as connection:
            await connection.run_sync(upgrade)
    finally:
        await engine.dispose()


def _current(connection: Connection) -> str | None:
    """The revision stamped in the database (one row of ``alembic_version``), or None."""
    if not connection.dialect.has_table(connection, "alembic_version"):
        return None
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    return str(rows[0][0]) if len(rows) == 1 else None
