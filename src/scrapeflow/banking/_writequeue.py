"""The write queue (the seed's DB queue manager): every database write of a launch goes here.

Many scrapers finish batches at once; letting each open its own transaction is what gave the
seed's service deadlocks. The queue holds batches (bounded: a full queue makes scrapers wait,
which is the back-pressure), and a fixed number of writer tasks run them — one on SQLite, which
has a single writer anyway, a few on a server database. A batch that fails with a transient
error (deadlock, serialization failure, "database is locked", a dropped connection) is retried
with backoff: every write is an idempotent upsert, so running it twice is harmless.

**Group commit.** A queue given the engine (``WriteQueue(engine=...)``) with a single writer
runs the :class:`GroupedWrite` batches it finds waiting — scrapeflow's own writer's batches and
the launcher's state changes — in one transaction, up to ``group`` of them: one connection
checkout, one ``BEGIN`` and one ``COMMIT`` for all, where each of those cost a round trip to
SQLite's thread per batch. Every batch still lands whole or not at all, and exactly once: when
any batch of a group fails, the group's transaction is rolled back and each of its batches runs
again alone, in its own transaction, so the one that fails fails alone and the others land.
What a batch remembers of what it stored (an account's row id) is kept only once its
transaction committed (:attr:`GroupedWrite.landed`). Several writers (a server database) keep a
transaction per batch: groups would take customers' row locks in different orders and deadlock.
The batches that can (:attr:`GroupedWrite.run_sync`) run their transaction whole through
:func:`scrapeflow.db.write`: on a SQLite file, at once in the loop's thread, holding SQLite's
write lock for SQLite's own time (through aiosqlite each statement is several hand-offs between
the event loop and the connection's thread, and the lock stayed held across them; in a worker
thread, each statement waited to take the GIL back from the busy loop).

:func:`queued_writes` tells how many batches wait in the running queues of this process (for a
service's metrics).
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow.db import write as write_whole

__all__ = ["GroupedWrite", "WriteQueue", "queued_writes", "writers_for"]

T = TypeVar("T")
_log = get_logger(__name__)
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "08006", "08003"})
_TRANSIENT_TEXT = ("database is locked", "deadlock", "could not serialize", "connection was closed")


_running: weakref.WeakSet[WriteQueue] = weakref.WeakSet()


def queued_writes() -> int:
    """Batches waiting for a writer, over every running write queue of this process."""
    return sum(queue.depth for queue in list(_running))


def writers_for(url: str) -> int:
    """Writer tasks suited to the database at ``url``: 1 for SQLite, 4 otherwise."""
    return 1 if url.startswith("sqlite") else 4


@dataclass(frozen=True, slots=True)
class GroupedWrite(Generic[T]):
    """A batch that may share one transaction with the batches queued beside it.

    ``run`` writes it on the connection it is given, inside a transaction it must neither
    commit nor roll back; it may run more than once (alone, after its group failed), so it
    must be idempotent. ``landed`` gets its result once its transaction committed.
    """

    run: Callable[[AsyncConnection], Awaitable[T]]
    landed: Callable[[T], None] | None = None
    run_sync: Callable[[Connection], T] | None = None
    """The same write on a synchronous connection, for a transaction run whole
    (:func:`scrapeflow.db.write`); None: the write runs on the event loop's connection."""


_Item = tuple[Callable[[], Awaitable[Any]] | GroupedWrite[Any], asyncio.Future[Any]]


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError | DBAPIError):
        return False
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in _TRANSIENT_SQLSTATES:
        return True
    text = str(orig or exc).lower()
    return any(marker in text for marker in _TRANSIENT_TEXT)


class WriteQueue:
    """Bounded queue of write batches, run by ``writers`` tasks, transient failures retried.

    >>> async with WriteQueue(writers=1) as queue:  # doctest: +SKIP
    ...     await queue.submit(lambda: writer.write_accounts(access_id, accounts))

    ``engine``: the database that :meth:`submit` runs :class:`GroupedWrite` batches on (in
    groups of up to ``group`` with a single writer; see the module's documentation).
    """

    def __init__(
        self,
        *,
        writers: int = 1,
        maxsize: int = 256,
        retries: int = 6,
        backoff: float = 0.05,
        engine: AsyncEngine | None = None,
        group: int = 64,
    ) -> None:
        if writers < 1:
            raise ValueError(f"a write queue needs at least one writer, got {writers}")
        if group < 1:
            raise ValueError(f"a group holds at least one batch, got {group}")
        self.writers = writers
        self.retries = retries
        self.backoff = backoff
        self.engine = engine
        self.group = group if writers == 1 else 1
        self.retried = 0
        self.batches = 0
        self.transactions = 0
        """Transactions that grouped batches committed (a group's, or a batch's alone)."""
        self._queue: asyncio.Queue[_Item | None] = asyncio.Queue(maxsize)
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> WriteQueue:
        self._tasks = [
            asyncio.create_task(self._work(), name=f"db-writer-{n}") for n in range(self.writers)
        ]
        _running.add(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Finish what is queued, then stop the writers."""
        if not self._tasks:
            return
        _running.discard(self)
        for _ in self._tasks:
            await self._queue.put(None)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    @property
    def depth(self) -> int:
        """Batches waiting for a writer."""
        return self._queue.qsize()

    async def submit(self, write: Callable[[], Awaitable[T]] | GroupedWrite[T]) -> T:
        """Queue ``write`` and wait until it has run; its result.

        ``write`` is a coroutine function that opens its own transaction, or a
        :class:`GroupedWrite` that the queue runs in a transaction on its engine (shared with
        other batches when grouping). Waits for room when the queue is full. Raises what the
        write raised once its retries are spent (or at once, for an error that is not
        transient).
        """
        if not self._tasks:
            raise RuntimeError("the write queue is not running: use 'async with WriteQueue()'")
        if isinstance(write, GroupedWrite) and self.engine is None:
            raise RuntimeError("a grouped write needs a queue given the engine to write on")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        await self._queue.put((write, future))
        return await future

    async def _work(self) -> None:
        held: _Item | None = None  # taken while gathering a group that it cannot join
        stopping = False
        while not stopping:
            item, held = (held, None) if held is not None else (await self._queue.get(), None)
            if item is None:
                return
            group = [item]
            if isinstance(item[0], GroupedWrite):
                while len(group) < self.group and not self._queue.empty():
                    more = self._queue.get_nowait()
                    if more is None:  # close(): this group is the last
                        stopping = True
                        break
                    if not isinstance(more[0], GroupedWrite):
                        held = more
                        break
                    group.append(more)
            await self._settle(group)

    async def _settle(self, items: list[_Item]) -> None:
        """Run ``items`` (one, or a group of grouped writes) and tell each submitter."""
        items = [(write, future) for write, future in items if not future.cancelled()]
        if not items:  # their submitters gave up (scrapers cancelled)
            return
        try:
            alone = items
            if len(items) > 1:
                # The writes run whole and the loop's in a transaction each: they are
                # independent batches (one that depends on another waits for it to land).
                alone = []
                for part in self._parts(items):
                    if len(part) == 1 or not await self._run_group(part):
                        alone.extend(part)
            for write, future in alone:
                try:
                    result = await self._run(write)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # whatever a write raised, its submitter hears of it
                    if not future.done():
                        future.set_exception(exc)
                else:
                    if not future.done():
                        future.set_result(result)
        except asyncio.CancelledError:
            for _, future in items:
                if not future.done():
                    future.cancel()
            raise

    def _whole(self, write: object) -> bool:
        """Whether ``write`` runs whole through :func:`scrapeflow.db.write`."""
        return (
            self.engine is not None
            and isinstance(write, GroupedWrite)
            and write.run_sync is not None
        )

    def _parts(self, items: list[_Item]) -> list[list[_Item]]:
        whole = [item for item in items if self._whole(item[0])]
        looped = [item for item in items if not self._whole(item[0])]
        return [part for part in (whole, looped) if part]

    async def _run_group(self, items: list[_Item]) -> bool:
        """Run grouped writes in one transaction; False (nothing of it stored) if one failed."""
        writes = [write for write, _ in items if isinstance(write, GroupedWrite)]
        try:
            if self._whole(writes[0]):
                results = await self._run_whole(writes)
            else:
                assert self.engine is not None
                results = []
                async with self.engine.begin() as connection:
                    for write in writes:
                        results.append(await write.run(connection))
        except Exception as exc:
            # Rolled back whole: each batch runs again alone, so the failing one fails alone.
            _log.info("write group failed, writing its batches one by one", error=repr(exc))
            return False
        self.transactions += 1
        for (_, future), write, result in zip(items, writes, results, strict=True):
            self.batches += 1
            if write.landed is not None:
                write.landed(result)
            if not future.done():
                future.set_result(result)
        return True

    async def _run_whole(self, writes: list[GroupedWrite[Any]]) -> list[Any]:
        assert self.engine is not None
        steps = [write.run_sync for write in writes if write.run_sync is not None]
        return await write_whole(self.engine, lambda c: [step(c) for step in steps])

    async def _run(self, write: Callable[[], Awaitable[T]] | GroupedWrite[T]) -> T:
        attempt = 0
        while True:
            try:
                result = await self._once(write)
            except Exception as exc:
                if attempt >= self.retries or not _transient(exc):
                    raise
                attempt += 1
                self.retried += 1
                wait = random.uniform(0, self.backoff * 2**attempt)
                _log.warning("database write retried", attempt=attempt, error=type(exc).__name__)
                await asyncio.sleep(wait)
            else:
                self.batches += 1
                return result

    async def _once(self, write: Callable[[], Awaitable[T]] | GroupedWrite[T]) -> T:
        if not isinstance(write, GroupedWrite):
            return await write()
        if self._whole(write):
            result = cast(T, (await self._run_whole([write]))[0])
        else:
            assert self.engine is not None
            async with self.engine.begin() as connection:
                result = await write.run(connection)
        self.transactions += 1
        if write.landed is not None:
            write.landed(result)
        return result
