"""Tables made outside the migrations (the job queue's, the service's), created at start-up by
whichever process comes first."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import MetaData, Table, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["create_tables"]

# pg_advisory_xact_lock key: a service and its workers starting together on a new database
# would each find a table missing and create it; the second CREATE TABLE then fails.
_CREATE_LOCK = 0x5C4A9E_0002
_TRIES = 5


async def create_tables(
    engine: AsyncEngine, metadata: MetaData, tables: Sequence[Table] | None = None
) -> None:
    """Create the tables of ``metadata`` (or just ``tables``) that are missing, in one
    transaction; on PostgreSQL under an advisory lock, so processes starting together on one
    database take turns instead of failing (on SQLite, one that lost the race looks again).
    Idempotent."""
    for attempt in range(_TRIES):
        try:
            async with engine.begin() as connection:
                if connection.dialect.name == "postgresql":
                    lock = text("SELECT pg_advisory_xact_lock(:key)")
                    await connection.execute(lock, {"key": _CREATE_LOCK})
                await connection.run_sync(
                    lambda sync: metadata.create_all(sync, tables=tables, checkfirst=True)
                )
            return
        except OperationalError as exc:
            # SQLite has no such lock: another process made the table between the check and
            # the CREATE. Looking again finds it.
            if "already exists" not in str(exc) or attempt == _TRIES - 1:
                raise
