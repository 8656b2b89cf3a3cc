"""psycopg's connection pool for procrastinate, at one round trip a statement.

procrastinate runs each of its statements (fetch a job, finish it, defer some, beat) on a
connection of its own from this pool. With psycopg's pool as procrastinate configures it, a
statement cost four round trips: the pool's check (an empty statement) at every checkout,
``BEGIN``, the statement, ``COMMIT``. In ``bench/distributed.py``'s bank batch that was about
seven round trips an access. Here:

* **autocommit**: procrastinate's statements are one each (calls of its own SQL functions),
  never a transaction of several, so none needs ``BEGIN`` and ``COMMIT``;
* **a check only when in doubt**: a connection that libpq knows broken or closed is dropped;
  one whose socket has something to read while idle (a server that stops sends its clients
  its last words, then closes) or that sat idle for :data:`CHECK_AFTER_IDLE` seconds (a
  connection a firewall dropped silently) is checked with psycopg's own check (the rule of
  the service's own pools, :data:`~scrapeflow.db._engine.PING_AFTER_IDLE`); the others are
  handed out as they are;
* **prompt reconnection** after the database went away (:class:`PromptReconnectPool`).
"""

from __future__ import annotations

import random
import select
import time
from typing import Any
from weakref import WeakKeyDictionary

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.pool_async import AddConnection, MaintenanceTask

from scrapeflow.db._engine import PING_AFTER_IDLE

__all__ = ["CHECK_AFTER_IDLE", "PromptReconnectPool"]

CHECK_AFTER_IDLE = PING_AFTER_IDLE
"""Seconds a pooled connection may sit idle and still be handed out unchecked."""
_RECONNECT_EVERY = 1.0
"""Seconds at most between two connection attempts of the pool to a lost database."""


class PromptReconnectPool(AsyncConnectionPool):
    """psycopg's pool for procrastinate: autocommit connections, checked when in doubt (see
    the module), and a database it lost tried again every second or so.

    The pool's own attempts back off, doubling: 1, 3, 7, 15, 31… seconds after the loss, and
    the callers waiting for a connection wait for them. A PostgreSQL restart of 10 s was noticed
    about 4 s after the server was back (the attempt at 15 s), an outage of 20 s about 10 s
    after: no job was fetched, dispatched or handed back meanwhile. Here an attempt comes about
    a second (±10%, so that workers do not all try at once) after the one that failed, as long
    as the pool tries (its ``reconnect_timeout``).

    procrastinate passes psycopg's check of every checkout (``check``): replaced by
    :meth:`_check_in_doubt`."""

    def __init__(self, *args: Any, check: Any = None, **kwargs: Any) -> None:
        self._idle_since: WeakKeyDictionary[AsyncConnection[Any], float] = WeakKeyDictionary()
        super().__init__(
            *args,
            check=self._check_in_doubt,
            configure=_autocommit,
            reset=self._returned,
            **kwargs,
        )

    async def schedule_task(self, task: MaintenanceTask, delay: float) -> None:
        """psycopg's: run ``task`` in ``delay`` seconds; a new connection's attempt, after
        one that failed, in about a second at most."""
        if isinstance(task, AddConnection):
            delay = min(delay, _RECONNECT_EVERY * random.uniform(0.9, 1.1))
        await super().schedule_task(task, delay)

    async def _returned(self, connection: AsyncConnection[Any]) -> None:
        self._idle_since[connection] = time.monotonic()

    async def _check_in_doubt(self, connection: AsyncConnection[Any]) -> None:
        """Raise (the pool then drops the connection and takes another) for a connection that
        cannot serve; return at once for one that can, as far as can be told without a round
        trip."""
        if connection.closed or connection.broken:
            raise ConnectionError("the connection is closed")
        since = self._idle_since.pop(connection, None)
        if since is None:  # new: it has just connected
            return
        if time.monotonic() - since < CHECK_AFTER_IDLE and not _has_word(connection):
            return
        await AsyncConnectionPool.check_connection(connection)


async def _autocommit(connection: AsyncConnection[Any]) -> None:
    await connection.set_autocommit(True)


def _has_word(connection: AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket has something to read: the server said something
    unasked (its last words before closing, most likely), or closed it."""
    try:
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
    except (OSError, ValueError):  # no socket any more
        return True
    return bool(readable)
