"""Events stored by other processes, told at once: PostgreSQL's ``LISTEN/NOTIFY``.

Every transaction that stores events also sends a notice on :data:`CHANNEL` (delivered when it
commits, never for a rolled-back one) naming the customers and jobs the events are about and
the process that stored them. Each process listens on its own connection and wakes the streams
of those customers and jobs, so a stream follows work done on any machine without waiting for
its catch-up. A notice that would not fit says "everything" instead. When the listening connection
drops (a database restart), it reconnects with backoff, then wakes every stream; meanwhile the
streams' periodic catch-up carries on, so nothing is missed, only later.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Collection
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow._util.tasks import stop_task

__all__ = ["CHANNEL", "EventNotices", "Woken"]

_log = get_logger(__name__)

CHANNEL = "scrapeflow_events"
_MAX_PAYLOAD = 7_000  # PostgreSQL's limit is 8,000 bytes
_RETRY = (0.5, 30.0)  # first and longest wait before listening again
_PING = 30.0  # seconds between two checks that the listening connection still answers

Woken = Callable[[Collection[str] | None, Collection[str] | None], None]
"""Told the customers and jobs of events another process stored (None, None: maybe any)."""


class EventNotices:
    """Sends and receives the notices of one process's event log on PostgreSQL."""

    def __init__(self, engine: AsyncEngine, woken: Woken) -> None:
        self.engine = engine
        self.woken = woken
        self.sender = secrets.token_hex(6)
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()
        """Set while the listening connection is up (tests wait on it)."""

    def payload(self, customers: set[str], jobs: set[str]) -> str:
        """The notice of events of these customers and jobs, for the ``pg_notify`` on
        :data:`CHANNEL` of the statement that stores them (its transaction sends it when it
        commits)."""
        payload = orjson.dumps(
            {"from": self.sender, "customers": sorted(customers), "jobs": sorted(jobs)}
        )
        if len(payload) > _MAX_PAYLOAD:
            payload = orjson.dumps({"from": self.sender, "all": True})
        return payload.decode()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="event notices")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _listen(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        wait = _RETRY[0]
        while True:
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(dsn)
            except Exception as exc:  # down, refusing, mid-restart: try again later
                _log.warning("cannot listen for events", error=type(exc).__name__, retry_in=wait)
                await asyncio.sleep(wait)
                wait = min(wait * 2, _RETRY[1])
                continue
            try:
                connection.add_termination_listener(lambda _, lost=lost: lost.set())
                await connection.add_listener(CHANNEL, self._received)
                self.listening.set()
                wait = _RETRY[0]
                self.woken(None, None)  # what was stored while nobody listened
                while not lost.is_set():  # a network that drops silently is found by a ping
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), _PING)
                    if not lost.is_set():
                        await asyncio.wait_for(connection.fetchval("SELECT 1"), _PING)
                _log.warning("the event listener's connection was lost; listening again")
            except Exception as exc:
                _log.warning("the event listener failed; listening again", error=type(exc).__name__)
                await asyncio.sleep(wait)
                wait = min(wait * 2, _RETRY[1])
            finally:
                self.listening.clear()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(connection.close(), 5)

    def _received(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        try:
            notice = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.woken(None, None)
            return
        if not isinstance(notice, dict) or notice.get("from") == self.sender:
            return  # our own: the streams were woken when the events were stored
        if notice.get("all"):
            self.woken(None, None)
        else:
            self.woken(notice.get("customers") or (), notice.get("jobs") or ())
