"""Schema migrations (Alembic) run from code: no ``alembic.ini`` to ship or find.

The database layer knows how to run migrations, not which: an application passes its own
Alembic script directory (``scrapeflow.banking`` passes ``banking/migrations``).

A database already at the head revision is recognised with one query, without importing
Alembic (about half a second of a short command's start-up): the head is read from the
revision files themselves. Anything less certain — several heads, a file that does not say its
revision plainly, a database elsewhere — goes through Alembic.

A database is migrated only when it is empty or already carries these migrations (an
``alembic_version`` table at one of their revisions): a database holding another application's
tables is refused, as is one at a revision these files do not know (a newer version's), with a
:class:`~scrapeflow.errors.ConfigError` naming the tables or the revision. An upgrade runs in
one transaction — on SQLite too, where DDL would otherwise commit statement by statement — so
a migration that fails leaves the database as it was, without an ``alembic_version`` table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db._engine import create_engine
from scrapeflow.db._errors import shown_url, unusable_reason
from scrapeflow.errors import ConfigError

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
    graph = _revisions(script_location)
    if graph is None:
        return None
    heads = graph[0] - graph[1]
    return heads.pop() if len(heads) == 1 else None


def _revisions(script_location: Path) -> tuple[set[str], set[str]] | None:
    """Every revision of the files, and every revision some file revises; None when a file
    does not say its revisions as plain literals."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted((script_location / "versions").glob("*.py")):
        found = {bool(m[0]): m[1] for m in _REVISION.findall(path.read_text(encoding="utf-8"))}
        if False not in found or True not in found:
            return None
        revisions.add(found[False].strip("\"'"))
        if found[True] != "None":
            parents.add(found[True].strip("\"'"))
    return revisions, parents


async def migrate(
    url: str,
    script_location: Path,
    revision: str = "head",
    *,
    owns: Callable[[str], bool] | None = None,
    adopt: bool = False,
) -> None:
    """Upgrade the database at ``url`` to ``revision`` of ``script_location``. Idempotent.

    A database without ``alembic_version`` must be empty but for the tables ``owns`` accepts
    (the application's own, made outside these migrations); ``adopt=True`` accepts any table,
    to add the schema to a database that already holds others. Refusals, a revision these
    files do not hold, and a migration the database rejects raise
    :class:`~scrapeflow.errors.ConfigError`; the database is then left as it was.
    """
    target = head_revision(script_location) if revision == "head" else revision
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        _transactional_ddl(engine)
    shown = shown_url(url)

    def upgrade(connection: Connection) -> None:
        stamped, current = _current(connection)
        if target is not None and current == target:
            return
        graph = _revisions(script_location)
        if current is None and not adopt:
            others = sorted(
                name
                for name in _tables(connection)
                if name != "alembic_version" and not (owns is not None and owns(name))
            )
            if others:
                listed = ", ".join(others[:5]) + (
                    f" and {len(others) - 5} more" if len(others) > 5 else ""
                )
                raise ConfigError(
                    f"the database {shown} holds tables of another application ({listed}): "
                    "refusing to add scrapeflow's tables to it (use an empty database, or adopt "
                    "this one: scrapeflow bank migrate --adopt)"
                )
        if stamped and current is not None and graph is not None and current not in graph[0]:
            raise ConfigError(
                f"the database {shown} is at migration revision {current!r}, which "
                "scrapeflow's migrations do not hold (a newer scrapeflow's, or another "
                "application's)"
            )
        from alembic import command
        from alembic.util import CommandError

        config = alembic_config(url, script_location)
        config.attributes["connection"] = connection
        try:
            command.upgrade(config, revision)
        except (CommandError, DBAPIError) as exc:
            if unusable_reason(exc) is not None:
                raise
            raise ConfigError(f"cannot migrate the database {shown}: {_first_line(exc)}") from None

    try:
        async with engine.begin() as connection:
            await connection.run_sync(upgrade)
    finally:
        await engine.dispose()


def _transactional_ddl(engine: AsyncEngine) -> None:
    """Make SQLite run the migration's DDL inside its transaction: Python's sqlite3 module
    otherwise lets each CREATE/ALTER commit by itself (SQLAlchemy's documented recipe)."""

    def no_implicit_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    def begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN")

    event.listen(engine.sync_engine, "connect", no_implicit_transactions)
    event.listen(engine.sync_engine, "begin", begin)


def _tables(connection: Connection) -> list[str]:
    found = inspect(connection)
    return [*found.get_table_names(), *found.get_view_names()]


def _current(connection: Connection) -> tuple[bool, str | None]:
    """Whether ``alembic_version`` exists, and the revision it holds (None unless one row)."""
    if not connection.dialect.has_table(connection, "alembic_version"):
        return False, None
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    return True, (str(rows[0][0]) if len(rows) == 1 else None)


def _first_line(error: BaseException) -> str:
    orig = getattr(error, "orig", None) or error
    lines = str(orig).strip().splitlines()
    return (lines[0] if lines else type(orig).__name__)[:200]
