"""Idempotent writes: insert a batch of rows, or update the ones whose natural key exists.

SQLite and PostgreSQL get one ``INSERT … ON CONFLICT (key) DO UPDATE … WHERE changed`` per
chunk, so a batch delivered twice leaves the same rows (and the same ``updated_at``).
Other dialects (MS SQL Server) take the portable path: in the caller's transaction, select the
rows with those keys, ``UPDATE`` the ones that changed and ``INSERT`` the rest. It is chosen over
``MERGE`` because SQLAlchemy has no MERGE construct and SQL Server's MERGE has known concurrency
pitfalls; the single writer of the write queue makes select-then-write safe.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, and_, false, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.sql import ColumnElement, Executable

__all__ = ["portable_statements", "upsert", "upsert_sync"]

_CHUNK = 500  # rows per statement: well under SQLite's and asyncpg's parameter limits
_PORTABLE_CHUNK = 100  # SQL Server takes at most 2,100 parameters per statement
_NATIVE = ("sqlite", "postgresql")


async def upsert(
    session: AsyncSession | AsyncConnection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    keys: Sequence[str],
    touch: str | None = None,
    stamps: Sequence[str] = (),
    insert_only: Sequence[str] = (),
    portable: bool = False,
) -> None:
    """Insert ``rows`` into ``table``, updating rows whose ``keys`` columns already exist.

    Every column a row gives, except the keys, is updated, and only when some value differs;
    ``touch`` names a timestamp column set to now on insert and on a real change. ``stamps``
    name columns the rows give that mark a change (a version number): written on insert and on
    a real change, never compared. ``insert_only`` columns are written on insert only. Columns a
    row does not give (a ``first_seen`` default) are set on insert and left alone on update.
    ``portable=True`` forces the select-then-write path used for dialects without ON CONFLICT.
    """
    if not rows:
        return
    bind = session if isinstance(session, AsyncConnection) else session.get_bind()
    shape = _Shape(table, tuple(keys), touch, tuple(stamps), tuple(insert_only))
    for statement, chunk in _chunks(bind.dialect.name, shape, rows, portable):
        if statement is not None:
            await session.execute(statement, chunk)
            continue
        found = await session.execute(select(table).where(_any_key(table, chunk, keys)))
        for write in shape.portable(chunk, found):
            await session.execute(write)


def upsert_sync(
    connection: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    keys: Sequence[str],
    touch: str | None = None,
    stamps: Sequence[str] = (),
    insert_only: Sequence[str] = (),
    portable: bool = False,
) -> None:
    """:func:`upsert` on a synchronous connection: the same statements, for a transaction
    run whole (:func:`scrapeflow.db.write`: no hand-off between its statements)."""
    if not rows:
        return
    shape = _Shape(table, tuple(keys), touch, tuple(stamps), tuple(insert_only))
    for statement, chunk in _chunks(connection.dialect.name, shape, rows, portable):
        if statement is not None:
            connection.execute(statement, chunk)
            continue
        found = connection.execute(select(table).where(_any_key(table, chunk, keys)))
        for write in shape.portable(chunk, found):
            connection.execute(write)


@dataclass(frozen=True, slots=True)
class _Shape:
    table: Table
    keys: tuple[str, ...]
    touch: str | None
    stamps: tuple[str, ...]
    insert_only: tuple[str, ...]

    def portable(self, chunk: list[dict[str, Any]], found: Iterable[Any]) -> list[Executable]:
        existing = {tuple(r._mapping[k] for k in self.keys): dict(r._mapping) for r in found}
        return portable_statements(
            self.table,
            chunk,
            keys=self.keys,
            existing=existing,
            touch=self.touch,
            stamps=self.stamps,
            insert_only=self.insert_only,
        )


def _chunks(
    dialect: str, shape: _Shape, rows: Sequence[Mapping[str, Any]], portable: bool
) -> Iterator[tuple[Executable | None, list[dict[str, Any]]]]:
    """The rows stamped and cut in chunks, each with its native statement (None: portable)."""
    now = datetime.now(UTC)
    touch = shape.touch
    stamped = [({**row, touch: now} if touch else dict(row)) for row in rows]
    native = dialect in _NATIVE and not portable
    size = _CHUNK if native else _PORTABLE_CHUNK
    for start in range(0, len(stamped), size):
        chunk = stamped[start : start + size]
        if not native:
            yield None, chunk
            continue
        # executemany of one parameterised statement: compiled once and cached, sent in
        # batches by SQLAlchemy's "insertmanyvalues"; a VALUES list per batch would be
        # compiled anew for each batch size.
        statement = _on_conflict(
            dialect,
            shape.table,
            tuple(chunk[0]),
            shape.keys,
            touch,
            shape.stamps,
            shape.insert_only,
        )
        yield statement, chunk


@functools.lru_cache(maxsize=256)
def _on_conflict(
    dialect: str,
    table: Table,
    columns: tuple[str, ...],
    keys: tuple[str, ...],
    touch: str | None,
    stamps: tuple[str, ...] = (),
    insert_only: tuple[str, ...] = (),
) -> Executable:
    # Built once per shape: making the "excluded" alias and the comparisons cost more than
    # running the statement. Statements are immutable, so sharing one is safe.
    builder = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = builder(table)
    skipped = {*keys, *stamps, *insert_only, *([touch] if touch else [])}
    compared = [name for name in columns if name not in skipped]
    changed = or_(*(table.c[name].is_distinct_from(stmt.excluded[name]) for name in compared))
    marks = [*([touch] if touch else []), *(name for name in stamps if name in columns)]
    values = {name: stmt.excluded[name] for name in [*compared, *marks]}
    return stmt.on_conflict_do_update(index_elements=list(keys), set_=values, where=changed)


def portable_statements(
    table: Table,
    rows: Iterable[Mapping[str, Any]],
    *,
    keys: Sequence[str],
    existing: Mapping[tuple[Any, ...], Mapping[str, Any]],
    touch: str | None = None,
    stamps: Sequence[str] = (),
    insert_only: Sequence[str] = (),
) -> list[Executable]:
    """The ``UPDATE``/``INSERT`` statements of the portable path, given the rows already stored.

    Pure (no database), so it can be compiled for any dialect, e.g. ``mssql``.
    """
    inserts: list[dict[str, Any]] = []
    statements: list[Executable] = []
    for row in rows:
        key = tuple(row[k] for k in keys)
        stored = existing.get(key)
        if stored is None:
            inserts.append(dict(row))
            continue
        skipped = {*keys, *stamps, *insert_only, touch}
        changes = {
            name: value
            for name, value in row.items()
            if name not in skipped and stored[name] != value
        }
        if changes:
            for mark in (touch, *stamps):
                if mark and mark in row:
                    changes[mark] = row[mark]
            where = and_(*(table.c[k] == row[k] for k in keys))
            statements.append(update(table).where(where).values(changes))
    if inserts:
        statements.append(insert(table).values(inserts))
    return statements


def _any_key(table: Table, rows: list[dict[str, Any]], keys: Sequence[str]) -> ColumnElement[bool]:
    if not rows:
        return false()
    return or_(*(and_(*(table.c[k] == row[k] for k in keys)) for row in rows))
