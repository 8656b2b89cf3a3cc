"""The write queue (the seed's DB queue manager): every database write of a launch goes here.

Many scrapers finish batches at once; letting each open its own transaction is what gave the
seed's service deadlocks. The queue holds batches (bounded: a full queue makes scrapers wait,
which is the back-pressure), and a fixed number of writer tasks run them — one on SQLite, which
has a single writer anyway, a few on a server database. A batch that fails with a transient
error (deadlock, serialization failure, "database is locked", a dropped connection) is retried
with backoff: every write is an idempotent upsert, so running it twice is harmless.

:func:`queued_writes` tells how many batches wait in the running queues of this process (for a
service's metrics).
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

from scrapeflow._util.logs import get_logger

__all__ = ["WriteQueue", "queued_writes", "writers_for"]

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
    """

    def __init__(
        self,
        *,
        writers: int = 1,
        maxsize: int = 256,
        retries: int = 6,
        backoff: float = 0.05,
    ) -> None:
        if writers < 1:
            raise ValueError(f"a write queue needs at least one writer, got {writers}")
        self.writers = writers
        self.retries = retries
        self.backoff = backoff
        self.retried = 0
        self.batches = 0
        self._queue: asyncio.Queue[
            tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]] | None
        ] = asyncio.Queue(maxsize)
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

    async def submit(self, write: Callable[[], Awaitable[T]]) -> T:
        """Queue ``write`` (a coroutine function) and wait until it has run; its result.

        Waits for room when the queue is full. Raises what the write raised once its retries
        are spent (or at once, for an error that is not transient).
        """
        if not self._tasks:
            raise RuntimeError("the write queue is not running: use 'async with WriteQueue()'")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        await self._queue.put((write, future))
        return await future

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            write, future = item
            if future.cancelled():  # the submitter gave up (its scraper was cancelled)
                continue
            try:
                result = await self._run(write)
            except asyncio.CancelledError:
                if not future.done():
                    future.cancel()
                raise
            except BaseException as exc:  # whatever a write raised, its submitter hears of it
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(result)

    async def _run(self, write: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            try:
                result = await write()
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
