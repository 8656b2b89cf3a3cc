"""Reads on a request's path without the async engine's cost per statement.

A service read is a few indexed rows. Through SQLAlchemy's async engine each statement costs a
pool checkout (a ping on PostgreSQL), a reset at its return and, on SQLite, four hand-offs to
aiosqlite's thread and back: about 0.7 ms of CPU for a one-row SELECT, where the driver alone
takes a fraction of that. :class:`QuickReads` runs a Core SELECT compiled once per statement
(:class:`QuickQuery`: its SQL, the order of its parameters and SQLAlchemy's own bind and result
processors, so money, UTC datetimes and enums come back exactly as the engine returns them):

* **SQLite**: on a connection of the standard driver, in the calling thread: read-only
  (``query_only``), in autocommit, so each statement reads one snapshot and a WAL reader never
  waits for the writer. Its busy timeout is zero: should the file be busy (a checkpoint
  resetting the log), that one read goes through the engine instead, which waits.
* **PostgreSQL** (asyncpg): on asyncpg's own pool of ``pool_size`` connections
  (:data:`POOL_SIZE`), whose prepared statements are cached per connection.
* Any other database, or a statement that cannot be compiled once (an expanding ``IN``): through
  the engine, as before.

A statement given to :meth:`QuickReads.rows` is a ``select()`` whose changing values are
:func:`~sqlalchemy.bindparam` s, built once (a module constant): its SQL is compiled the first
time it is used and kept on the :class:`QuickQuery`.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Select
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db._engine import sqlite_file

__all__ = ["POOL_SIZE", "QuickQuery", "QuickReads"]

Processor = Callable[[Any], Any] | None
POOL_SIZE = 8
"""Connections of asyncpg's pool for the quick reads of one process. Under
``bench/service.py`` on PostgreSQL (a hundred clients, two processes, PostgreSQL on the same
two cores), a read waited for a connection 75–90 ms (p95) with 4, for 17–19 ms of its own;
13–15 ms with 8; under 1 ms with 12, but then the reads took more of the database's time from
the refreshes' writes (all updated p95 12 s in two runs, 10 s with 8)."""


class QuickQuery:
    """A SELECT to run many times with other parameters; compiled at its first use."""

    def __init__(self, statement: Select[*tuple[Any, ...]]) -> None:
        self.statement = statement
        self._compiled: dict[str, _Compiled | None] = {}

    def compiled(self, dialect: Dialect) -> _Compiled | None:
        """The statement compiled for ``dialect``; None when it must go through the engine."""
        if dialect.name not in self._compiled:
            try:
                self._compiled[dialect.name] = _Compiled(self.statement, dialect)
            except _NotQuick:
                self._compiled[dialect.name] = None
        return self._compiled[dialect.name]


class _Compiled:
    """One statement compiled for one dialect: SQL, positional parameters, processors."""

    def __init__(self, statement: Select[*tuple[Any, ...]], dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        if not compiled.positional or any(bind.expanding for bind in compiled.binds.values()):
            raise _NotQuick  # a named paramstyle (no quick read of it), or an IN list
        self.sql = compiled.string
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())
        self.defaults = {
            name: bind.value for name, bind in compiled.binds.items() if not bind.required
        }
        self.binds: tuple[Processor, ...] = tuple(
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in self.names
        )
        self.dialect = dialect
        self.columns = list(statement.selected_columns)
        self.results: tuple[Processor, ...] | None = None
        self._processed: tuple[tuple[int, Callable[[Any], Any]], ...] = ()
        self.plain = False
        if dialect.name == "sqlite":  # its processors need no column type from the driver
            self.typed([None] * len(self.columns))

    def typed(self, driver_types: Sequence[Any]) -> None:
        """Choose the result processors, given the driver's type of each column (asyncpg's
        numeric processors differ by the server's type, known once a statement is prepared)."""
        self.results = tuple(
            column.type.dialect_impl(self.dialect).result_processor(self.dialect, driver_type)
            for column, driver_type in zip(self.columns, driver_types, strict=True)
        )
        self.plain = not any(self.results)
        self._processed = tuple(
            (index, process) for index, process in enumerate(self.results) if process is not None
        )

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name, process in zip(self.names, self.binds, strict=True):
            value = params[name] if name in params else self.defaults[name]
            values.append(value if process is None or value is None else process(value))
        return values

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        assert self.results is not None
        if self.plain:
            return tuple(raw)
        values = list(raw)
        for index, process in self._processed:
            value = values[index]
            if value is not None:
                values[index] = process(value)
        return tuple(values)


class _NotQuick(Exception):
    """This statement goes through the engine."""


class QuickReads:
    """Quick reads on ``engine``'s database; an async context manager (its connections are
    opened inside, lazily, and closed on the way out)."""

    def __init__(self, engine: AsyncEngine, *, pool_size: int = POOL_SIZE) -> None:
        self.engine = engine
        self.pool_size = pool_size
        self._dialect = engine.dialect
        self._sqlite_path = sqlite_file(engine.url.render_as_string(hide_password=False))
        self._asyncpg = engine.dialect.driver == "asyncpg"
        self._sqlite: sqlite3.Connection | None = None
        self._pool: Any = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with contextlib.suppress(Exception):  # the server may be gone at shutdown
                await pool.close()

    async def rows(
        self, query: QuickQuery, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """The rows of ``query`` with ``params`` (its bind parameters by name), each a tuple in
        the order of the statement's columns, values as the engine would give them."""
        given = params or {}
        compiled = query.compiled(self._dialect)
        if compiled is None:
            pass
        elif self._sqlite_path is not None:
            try:
                return self._sqlite_rows(compiled, given)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
        elif self._asyncpg:
            pool = self._pool or await self._open_pool()
            if compiled.results is None:
                async with pool.acquire() as connection:
                    prepared = await connection.prepare(compiled.sql)
                    compiled.typed([a.type.oid for a in prepared.get_attributes()])
                    found = await prepared.fetch(*compiled.arguments(given))
            else:
                found = await pool.fetch(compiled.sql, *compiled.arguments(given))
            return [compiled.row(raw) for raw in found]
        async with self.engine.connect() as connection:
            result = await connection.execute(query.statement, dict(given))
            return [tuple(row) for row in result.all()]

    def _sqlite_rows(self, compiled: _Compiled, params: Mapping[str, Any]) -> list[Any]:
        connection = self._sqlite or self._open_sqlite()
        cursor = connection.execute(compiled.sql, compiled.arguments(params))
        try:
            return [compiled.row(raw) for raw in cursor.fetchall()]
        finally:
            cursor.close()

    def _open_sqlite(self) -> sqlite3.Connection:
        assert self._sqlite_path is not None
        connection = sqlite3.connect(
            self._sqlite_path, isolation_level=None, check_same_thread=False, timeout=0
        )
        connection.execute("PRAGMA query_only=ON")
        self._sqlite = connection
        return connection

    async def _open_pool(self) -> Any:
        import asyncpg  # type: ignore[import-untyped]

        url = self.engine.url.set(drivername="postgresql")
        deserialize = getattr(self._dialect, "_json_deserializer", None) or json.loads

        async def codecs(connection: Any) -> None:
            for kind in ("json", "jsonb"):
                await connection.set_type_codec(
                    kind, encoder=json.dumps, decoder=deserialize, schema="pg_catalog"
                )

        pool = await asyncpg.create_pool(
            url.render_as_string(hide_password=False),
            min_size=1,
            max_size=self.pool_size,
            init=codecs,
        )
        if self._pool is not None:  # opened meanwhile by another read: one pool
            await pool.close()
            return self._pool
        self._pool = pool
        return pool
