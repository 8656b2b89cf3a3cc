"""Tables made outside the migrations (the job queue's, the service's), created at start-up by
whichever process comes first; a newer release's nullable columns are added to an older
database's tables at the same time."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, MetaData, Table, inspect, text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["create_tables"]

# pg_advisory_xact_lock key: a service and its workers starting together on a new database
# would each find a table missing and create it; the second CREATE TABLE then fails.
_CREATE_LOCK = 0x5C4A9E_0002
_TRIES = 5
# What a process that lost the race to another (on SQLite, which has no advisory lock) reads.
_RACE_LOST = ("already exists", "duplicate column")


async def create_tables(
    engine: AsyncEngine, metadata: MetaData, tables: Sequence[Table] | None = None
) -> None:
    """Create the tables of ``metadata`` (or just ``tables``) that are missing, and add the
    nullable columns a table lacks (made by an older release), in one transaction; on
    PostgreSQL under an advisory lock, so processes starting together on one database take
    turns instead of failing (on SQLite, one that lost the race looks again). Idempotent.

    Only nullable columns without a server default are added this way (``ALTER TABLE … ADD
    COLUMN``, which every backend does in place): a column an old row cannot leave empty needs
    a migration."""
    for attempt in range(_TRIES):
        try:
            async with engine.begin() as connection:
                if connection.dialect.name == "postgresql":
                    lock = text("SELECT pg_advisory_xact_lock(:key)")
                    await connection.execute(lock, {"key": _CREATE_LOCK})
                await connection.run_sync(lambda sync: _create(sync, metadata, tables))
            return
        except (OperationalError, ProgrammingError) as exc:
            # SQLite has no such lock: another process made the table (or column) between the
            # check and the CREATE (ALTER). Looking again finds it.
            if not any(said in str(exc) for said in _RACE_LOST) or attempt == _TRIES - 1:
                raise


def _create(sync: Connection, metadata: MetaData, tables: Sequence[Table] | None) -> None:
    inspector = inspect(sync)
    existing = set(inspector.get_table_names())
    metadata.create_all(sync, tables=tables, checkfirst=True)
    quote = sync.dialect.identifier_preparer.quote
    for table in tables if tables is not None else metadata.sorted_tables:
        if table.name not in existing:
            continue  # made just now, whole
        have = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in have or not column.nullable or column.server_default is not None:
                continue
            kind = column.type.compile(dialect=sync.dialect)
            sync.execute(
                text(f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(column.name)} {kind}")
            )
