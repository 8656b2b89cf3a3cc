"""Task statuses in a SQL table: the engine's hot restart on any machine that reaches the database.

:class:`SqlStatusStore` is a :class:`~scrapeflow.status.StatusStore` on one table,
``scrapeflow_task_status`` (namespace, key, status, updated_at; primary key (namespace, key)).
A *namespace* is what a status directory is to :class:`~scrapeflow.status.JsonDirStore`: one
run's tasks (a ``run`` job's id, say). The status column holds exactly the JSON a status file
would (:func:`~scrapeflow.status.dump_status`), so the two stores say the same thing.

>>> from scrapeflow.executor import execute_async
>>> from scrapeflow.scrape import scrape
>>> store = SqlStatusStore("postgresql+asyncpg://scraper@db/scrapeflow", namespace="crawl-42")
>>> async with store:  # doctest: +SKIP
...     await execute_async([scrape], Path("/data/crawl-42"), tasks, store=store)

Run the same call on another machine after a crash and it skips what succeeded. (``scrape``
still writes page bodies under the directory given: local files.)

A save is one upsert statement in its own transaction (atomic: a killed run leaves the last
saved status or none). The table is made by :meth:`SqlStatusStore.prepare` when missing; it is
the engine's own, not one of the bank schema's migrations. SQLite, PostgreSQL and (through the
``mssql`` dialect) SQL Server work; PostgreSQL is what several machines share.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Self

from sqlalchemy import (
    Column,
    ColumnElement,
    MetaData,
    Table,
    UnicodeText,
    and_,
    inspect,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.types import Unicode

from scrapeflow.db import UTCDateTime, create_engine, create_tables, unusable_reason, upsert
from scrapeflow.errors import InputError, StatusCorrupt, StatusError
from scrapeflow.status import StatusData, check_key, dump_status, parse_status

__all__ = ["MAX_NAMESPACE_LENGTH", "STATUS_TABLE", "SqlStatusStore"]

STATUS_TABLE = "scrapeflow_task_status"
"""The table of every :class:`SqlStatusStore` on a database."""
MAX_NAMESPACE_LENGTH = 255
"""Characters in a namespace, at most."""

_METADATA = MetaData()
_TABLE = Table(
    STATUS_TABLE,
    _METADATA,
    Column("namespace", Unicode(MAX_NAMESPACE_LENGTH), primary_key=True),
    Column("key", Unicode(200), primary_key=True),  # a task key: at most 200 bytes of UTF-8
    Column("status", UnicodeText, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)
# Two processes preparing one PostgreSQL database at once: one creates, the other waits.
_IN_CHUNK = 500  # keys per "IN (...)" in load_many: well under every driver's parameter limit
# A store's own engine: a save is a millisecond on a LAN, so 5 connections serve thousands a
# second, and many stores (one per running job) stay far below PostgreSQL's 100 connections.
_OWN_POOL = {"pool_size": 2, "max_overflow": 3}


class SqlStatusStore:
    """A run's task statuses in the ``scrapeflow_task_status`` table, under ``namespace``.

    ``db`` is a database URL (the store opens its own engine; close it with :meth:`aclose`
    or ``async with``) or an open :class:`~sqlalchemy.ext.asyncio.AsyncEngine` to share (left
    open). Raises :class:`~scrapeflow.errors.InputError` for an empty or too long namespace.
    """

    def __init__(self, db: str | AsyncEngine, namespace: str) -> None:
        if not isinstance(namespace, str) or not namespace or "\x00" in namespace:
            raise InputError(f"a status namespace must be a non-empty string, got {namespace!r}")
        if len(namespace) > MAX_NAMESPACE_LENGTH:
            raise InputError(
                f"status namespace {namespace[:40]!r}... is {len(namespace)} characters long, "
                f"at most {MAX_NAMESPACE_LENGTH}"
            )
        self.namespace = namespace
        self._owns_engine = isinstance(db, str)
        self.engine = _own_engine(db) if isinstance(db, str) else db
        self._shown = self.engine.url.render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"SqlStatusStore({self._shown!r}, namespace={self.namespace!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store's own engine (a shared one is left open)."""
        if self._owns_engine:
            await self.engine.dispose()

    async def prepare(self) -> None:
        """Create the table if it is missing; :class:`~scrapeflow.errors.StatusError` when the
        database cannot be reached or written."""
        with self._errors("prepare"):
            try:
                await self._create_table()
            except DBAPIError:
                # Another process created it between our look and our CREATE (SQLite has no
                # advisory lock): looking again finds it; any other problem raises again.
                await self._create_table()

    async def _create_table(self) -> None:
        async with self.engine.connect() as connection:
            # There already (the usual case, and every results page of a job): no lock taken.
            if await connection.run_sync(lambda sync: inspect(sync).has_table(STATUS_TABLE)):
                return
        await create_tables(self.engine, _METADATA, [_TABLE])

    async def load(self, key: str) -> StatusData | None:
        with self._errors("read"):
            async with self.engine.connect() as connection:
                raw = await connection.scalar(
                    select(_TABLE.c.status).where(self._row(check_key(key)))
                )
        return None if raw is None else parse_status(raw, where=self._where(key))

    async def load_many(self, keys: Iterable[str]) -> dict[str, StatusData | StatusCorrupt]:
        """The saved statuses of ``keys`` (a key never saved is absent), in few queries. A row
        that is not a status maps to its :class:`~scrapeflow.errors.StatusCorrupt`, not
        raised: one bad row does not hide the others."""
        wanted = list(dict.fromkeys(check_key(k) for k in keys))
        found: dict[str, StatusData | StatusCorrupt] = {}
        with self._errors("read"):
            async with self.engine.connect() as connection:
                for start in range(0, len(wanted), _IN_CHUNK):
                    chunk = wanted[start : start + _IN_CHUNK]
                    rows = await connection.execute(
                        select(_TABLE.c.key, _TABLE.c.status).where(
                            _TABLE.c.namespace == self.namespace, _TABLE.c.key.in_(chunk)
                        )
                    )
                    for key, raw in rows:
                        try:
                            found[key] = parse_status(raw, where=self._where(key))
                        except StatusCorrupt as exc:
                            found[key] = exc
        return found

    async def save(self, key: str, status: StatusData) -> None:
        row = {
            "namespace": self.namespace,
            "key": check_key(key),
            "status": dump_status(status).decode(),
            "updated_at": datetime.now(UTC),
        }
        with self._errors("write"):
            async with self.engine.begin() as connection:
                await upsert(connection, _TABLE, [row], keys=["namespace", "key"])

    async def exists(self, key: str) -> bool:
        with self._errors("read"):
            async with self.engine.connect() as connection:
                found = await connection.scalar(
                    select(_TABLE.c.key).where(self._row(check_key(key)))
                )
        return found is not None

    async def keys(self) -> list[str]:
        """Every saved task's key in this namespace, sorted."""
        with self._errors("read"):
            async with self.engine.connect() as connection:
                rows = await connection.scalars(
                    select(_TABLE.c.key)
                    .where(_TABLE.c.namespace == self.namespace)
                    .order_by(_TABLE.c.key)
                )
                return list(rows)

    def _row(self, key: str) -> ColumnElement[bool]:
        return and_(_TABLE.c.namespace == self.namespace, _TABLE.c.key == key)

    def _where(self, key: str) -> str:
        return f"the status of task {key!r} in {self!r}"

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """A database that cannot be used (unreachable, read-only, no rights) becomes a one-line
        :class:`StatusError` naming it, never its password. A lost connection mid-run too: the
        run stops, and what was saved stays."""
        try:
            yield
        except (SQLAlchemyError, OSError) as exc:
            reason = unusable_reason(exc) or _first_line(exc)
            raise StatusError(
                f"cannot {doing} task statuses in {self._shown} (table {STATUS_TABLE}): {reason}"
            ) from exc


def _own_engine(url: str) -> AsyncEngine:
    try:
        in_memory = make_url(url).database in (None, "", ":memory:")
    except ArgumentError:
        in_memory = False  # create_engine says what is wrong with it
    return create_engine(url) if in_memory else create_engine(url, **_OWN_POOL)


def _first_line(error: BaseException) -> str:
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    return (lines[0] if lines else type(cause).__name__)[:200]
