"""Live delivery: every fact of a refresh or a job, stored with an increasing id, streamed over
SSE. A client that reconnects with ``Last-Event-ID`` gets exactly what it missed: the stream is
a read of the stored log from that id on, so nothing is lost and nothing comes twice.

Ids increase in commit order: one writer task of this process stores the events appended
meanwhile, in order, in one transaction at a time (a group commit: a hundred refreshes' events
cost a few transactions, not a hundred), so an event never becomes visible after one with a
higher id (a reader at id N never skips a late N-1). Between processes on one database the
writers take turns too: on PostgreSQL each transaction takes a transaction-scoped
advisory lock (a sequence hands out ids at insert, not at commit, so without it a process's
N-1 could commit after another's N), in the statement that inserts the batch
(:mod:`scrapeflow.server._eventrows`); SQLite lets one writer in at a time by itself.
``append`` returns once its event is stored.

A stream reads the database only when woken for events of its own customer or job, stored by
this process or by any other: on PostgreSQL through ``LISTEN/NOTIFY``
(:mod:`scrapeflow.server._notify`); on other databases one reader per process (the "tail")
looks every ``tail_every`` second for new events' customers and jobs, whatever the number of
streams. A stream also reads at a periodic catch-up (every ``catch_up`` seconds, jittered from
0.75 to 1.5 times, so that a thousand streams do not read at once), in case a notice was lost.
An idle stream holds no database connection: it waits on an in-process event.

An ``outbox`` runs inside the transaction that stores the event: what it writes (the webhook
deliveries the event calls for) commits with the event or not at all. On PostgreSQL, a batch
the outbox knows it wants nothing of, as long as a condition holds (its registry unchanged),
is stored in one statement of its own under that condition, without a transaction's round
trips around it; should the condition fail, nothing was stored and the batch goes the usual
way.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Collection,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from sqlalchemy import (
    Connection,
    func,
    select,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow._util.tasks import stop_task
from scrapeflow.db import create_tables, single_statements, write
from scrapeflow.jobs import Job, JobState
from scrapeflow.server._eventrows import Guard, events_table, insert_events, metadata
from scrapeflow.server._notify import EventNotices

__all__ = ["EVENT_KINDS", "FINAL_JOB_EVENTS", "Event", "EventLog", "Outbox", "events_table"]

_log = get_logger(__name__)

FINAL_JOB_EVENTS = frozenset({"job.succeeded", "job.failed", "job.cancelled"})
EVENT_KINDS = frozenset(
    {
        "bank.refresh_started",
        "bank.accounts",
        "bank.movements",
        "bank.access_finished",
        "bank.all_updated",
        *(f"job.{state.value}" for state in JobState),
    }
)
"""Every kind of event the service stores (what a webhook may ask for)."""


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    kind: str
    customer: str | None
    job_id: str | None
    data: dict[str, Any]
    at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "customer": self.customer,
            "job_id": self.job_id,
            "at": self.at.isoformat(),
            **self.data,
        }


@dataclass(frozen=True, slots=True)
class _NewEvent:
    kind: str
    data: dict[str, Any]
    customer: str | None
    job_id: str | None
    at: datetime


_CLOSE_WAIT = 10.0  # seconds a close waits for the events being stored
_BATCH = 500
"""Events stored in one transaction at most."""
_READ = 500
"""Events one read of a stream returns at most."""
_TAIL_ROWS = 1_000
"""New events the tail reads at once; past it, every stream is woken."""
_Place = tuple[int, str | None, str | None, int]
"""Where a stream reads: after which id, of which customer and job, how many at most."""


class Told(Protocol):
    """An event as its telling knows it, before it is stored (and after: an :class:`Event`)."""

    @property
    def kind(self) -> str: ...
    @property
    def customer(self) -> str | None: ...
    @property
    def data(self) -> dict[str, Any]: ...


class Outbox(Protocol):
    """Writes what must be sent about new events, in the transaction that stores them."""

    def enqueue(self, connection: Connection, events: Sequence[Event]) -> bool | None:
        """On the connection (and in the transaction) that stores ``events`` (those stored
        together, in the order of their ids): write what must be sent about them. True when
        it wrote something (then :attr:`EventLog.next_change` is set once it is committed)."""
        ...

    def quiet(self, events: Sequence[Told]) -> Guard | None:
        """A condition under which the outbox wants nothing of ``events`` (checked in the
        statement that stores them: PostgreSQL), or None when it may want something or does
        not know."""
        ...


class EventLog:
    """The stored, numbered events, and a wake-up for the streams reading them."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        catch_up: float = 20.0,
        tail_every: float = 1.0,
        outbox: Outbox | None = None,
    ) -> None:
        self.engine = engine
        self._single = single_statements(engine)
        self.catch_up = catch_up
        """About how often an idle stream reads anyway, in case a wake-up was lost (jittered)."""
        self.tail_every = tail_every
        """How often, without ``LISTEN/NOTIFY`` (SQLite), this process looks for the events
        other processes stored (one query for all its streams, none while none is open)."""
        self.outbox = outbox
        self._pending: list[tuple[_NewEvent, asyncio.Future[int]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._outbox_wrote = False
        self._watchers: dict[tuple[str, str], set[asyncio.Event]] = {}
        self._notices: EventNotices | None = None
        self._tail: asyncio.Task[None] | None = None
        self._reads: dict[_Place, tuple[int, asyncio.Future[list[Event]]]] = {}
        """The reads in flight by their place, with the wake-up count when each began: a
        stream asking for the same place since the same wake-up joins it."""
        self._wakes = 0

    @property
    def next_change(self) -> asyncio.Event:
        """Set once the outbox wrote for the next events this process stores, or another
        process's events are seen: take it before reading the outbox, then wait on it, and
        nothing slips between the read and the wait."""
        return self._changed

    async def open(self) -> None:
        """Create the table when missing; on PostgreSQL, start listening for other processes'
        events. Pair with :meth:`close`."""
        await create_tables(self.engine, metadata)
        if self.engine.dialect.name == "postgresql" and self._notices is None:
            self._notices = EventNotices(self.engine, self._wake_for)
            await self._notices.start()
        elif self.engine.dialect.name != "postgresql" and self._tail is None:
            self._tail = asyncio.create_task(self._follow_tail(), name="event log tail")

    async def close(self) -> None:
        """Let the events being stored land (bounded), then stop listening."""
        writer = self._writer
        if writer is not None and not writer.done():
            # Shielded and bounded: an event told before a stop is stored, not dropped with
            # the loop; a database that does not answer does not hold the stop for long.
            with contextlib.suppress(Exception):  # timed out, or the batch failed (logged)
                async with asyncio.timeout(_CLOSE_WAIT):
                    await asyncio.shield(writer)
        if self._notices is not None:
            await self._notices.stop()
            self._notices = None
        await stop_task(self._tail)
        self._tail = None

    async def _follow_tail(self) -> None:
        """Without notices: wake the streams of the customers and jobs of the events stored
        since the last look (by any process), one query per ``tail_every`` while streams are
        open, none otherwise."""
        last: int | None = None
        while True:
            await asyncio.sleep(self.tail_every)
            try:
                if not self._watchers:
                    last = None  # the streams that open next read the log themselves
                    continue
                if last is None:
                    # The first look since streams opened: events stored after a stream's own
                    # read and before this look are behind the tail's start; every stream
                    # reads past its own position once, and none waits for its catch-up.
                    last = await self._last_id()
                    self._wake_for(None, None)
                    continue
                last = await self._wake_since(last)
            except Exception as exc:  # the database away for a moment: look again later
                _log.warning("could not look for new events", error=type(exc).__name__)

    async def last_id(self) -> int:
        """The id of the newest event stored (0 when there is none)."""
        return await self._last_id()

    async def _last_id(self) -> int:
        async with self.engine.connect() as connection:
            found = await connection.scalar(select(func.max(events_table.c.id)))
        return int(found or 0)

    async def _wake_since(self, last: int) -> int:
        c = events_table.c
        query = (
            select(c.id, c.customer, c.job_id).where(c.id > last).order_by(c.id).limit(_TAIL_ROWS)
        )
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        if len(rows) == _TAIL_ROWS:
            self._wake_for(None, None)
        elif rows:
            self._wake_for(
                {r.customer for r in rows if r.customer is not None},
                {r.job_id for r in rows if r.job_id is not None},
            )
        return int(rows[-1].id) if rows else last

    async def __aenter__(self) -> EventLog:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def append(
        self,
        kind: str,
        data: Mapping[str, Any],
        *,
        customer: str | None = None,
        job_id: str | None = None,
    ) -> int:
        """Store one event, and what the outbox writes for it, in one transaction; its id.
        Events appended at the same time share the transaction (in the order appended)."""
        new = _NewEvent(kind, dict(data), customer, job_id, datetime.now(UTC))
        stored: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append((new, stored))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending(), name="event log writer")
        # The writer runs on if this caller is cancelled: the others' events are in its batch.
        return await asyncio.shield(stored)

    async def _write_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:_BATCH], self._pending[_BATCH:]
            try:
                events = await self._store([new for new, _ in batch])
            except BaseException as exc:
                cancelled = isinstance(exc, asyncio.CancelledError)
                failed = batch + (self._pending if cancelled else [])
                if cancelled:
                    self._pending = []
                for _, stored in failed:
                    if not stored.done():
                        stored.set_exception(exc)
                if cancelled:
                    raise
                continue
            for event, (_, stored) in zip(events, batch, strict=True):
                if not stored.done():
                    stored.set_result(event.id)
            self._wake(events)

    async def _store(self, batch: list[_NewEvent]) -> list[Event]:
        rows = [
            {"customer": n.customer, "job_id": n.job_id, "kind": n.kind, "data": n.data, "at": n.at}
            for n in batch
        ]
        outbox, notices = self.outbox, self._notices

        customers = {n.customer for n in batch if n.customer is not None}
        jobs = {n.job_id for n in batch if n.job_id is not None}

        notice = None if notices is None else notices.payload(customers, jobs)

        def events(ids: Sequence[int]) -> list[Event]:
            return [
                Event(int(event_id), new.kind, new.customer, new.job_id, new.data, new.at)
                for event_id, new in zip(ids, batch, strict=True)
            ]

        guard = None
        if outbox is not None and self.engine.dialect.name == "postgresql":
            guard = outbox.quiet(batch)
        if guard is not None:
            # Nothing to write beside the events while the guard holds: one statement.
            ids = await write(self._single, lambda c: insert_events(c, rows, notice, guard))
            if ids:
                return events(ids)

        def store(connection: Connection) -> tuple[list[Event], bool]:
            stored = events(insert_events(connection, rows, notice))
            wrote = bool(outbox is not None and outbox.enqueue(connection, stored))
            return stored, wrote

        stored, wrote = await write(self.engine, store)
        if wrote:
            self._outbox_wrote = True
        return stored

    def _wake(self, events: list[Event]) -> None:
        """After a batch of this process committed: its streams, and the courier if the outbox
        wrote (a courier round per batch of events no webhook wants was most of its cost)."""
        wrote, self._outbox_wrote = self._outbox_wrote, False
        self._wake_for(
            [e.customer for e in events if e.customer is not None],
            [e.job_id for e in events if e.job_id is not None],
            courier=wrote,
        )

    def _wake_for(
        self,
        customers: Collection[str] | None,
        jobs: Collection[str] | None,
        *,
        courier: bool = True,
    ) -> None:
        """Wake the courier (``courier``: another process's events may have deliveries), and
        the streams of these customers and jobs (None: every one)."""
        self._wakes += 1
        if courier:
            self._changed.set()
            self._changed = asyncio.Event()
        if customers is None and jobs is None:
            for watchers in self._watchers.values():
                for woken in watchers:
                    woken.set()
            return
        for kind, names in (("customer", customers or ()), ("job", jobs or ())):
            for name in names:
                for woken in self._watchers.get((kind, str(name)), ()):
                    woken.set()

    @contextlib.contextmanager
    def _watching(self, customer: str | None, job_id: str | None) -> Iterator[asyncio.Event]:
        """An event set whenever this process stores an event of the customer or the job."""
        woken = asyncio.Event()
        keys = [k for k in (("customer", customer), ("job", job_id)) if k[1] is not None]
        for key in keys:
            self._watchers.setdefault((key[0], str(key[1])), set()).add(woken)
        try:
            yield woken
        finally:
            for key in keys:
                watchers = self._watchers.get((key[0], str(key[1])))
                if watchers is not None:
                    watchers.discard(woken)
                    if not watchers:
                        del self._watchers[(key[0], str(key[1]))]

    async def job_changed(self, job: Job) -> None:
        """The job queue's listener: ``job.<state>`` with the job's progress and result. The
        parts of a refresh spread over workers (``bank.access``) tell nothing of their own:
        what they do is told as the refresh's (``bank.*`` events under its job)."""
        if job.kind == "bank.access":
            return
        # A refresh's and a one-time code's states are the customer's to see on its stream.
        theirs = job.kind in ("bank.refresh", "bank.otp")
        customer = job.params.get("customer") if theirs else None
        await self.append(
            f"job.{job.state.value}",
            {
                "state": job.state.value,
                "kind": job.kind,
                "progress": job.progress,
                "result": job.result,
                "error": job.error,
                # Whose job it is: a webhook of another key never hears of it (see Webhooks).
                "submitted_by": job.submitted_by,
            },
            customer=str(customer) if customer is not None else None,
            job_id=job.id,
        )

    async def after(
        self,
        after_id: int,
        *,
        customer: str | None = None,
        job_id: str | None = None,
        limit: int = _READ,
    ) -> list[Event]:
        """The events after ``after_id`` (of ``customer``, of ``job_id``), oldest first.

        Streams woken together at the same place share one read: twenty streams of a
        customer (a UI's tabs, or one key holding its cap) cost a query per batch of its
        events, not twenty."""
        place = (after_id, customer, job_id, limit)
        shared = self._reads.get(place)
        # Only a read begun since the last wake-up: one begun before may have missed the
        # events that woke the stream asking now.
        read = shared[1] if shared is not None and shared[0] == self._wakes else None
        if read is None or read.done():
            query = (
                select(events_table)
                .where(events_table.c.id > after_id)
                .order_by(events_table.c.id)
                .limit(limit)
            )
            if customer is not None:
                query = query.where(events_table.c.customer == customer)
            if job_id is not None:
                query = query.where(events_table.c.job_id == job_id)
            # A task of its own: a client that leaves mid-read cancels its stream, and a read
            # cut there would drop its connection unclosed, and the read of the streams that
            # share it; the read ends by itself instead.
            read = asyncio.ensure_future(self._read(query))
            self._reads[place] = (self._wakes, read)
            read.add_done_callback(partial(self._read_done, place))
        return list(await asyncio.shield(read))

    def _read_done(self, place: _Place, read: asyncio.Future[list[Event]]) -> None:
        if (shared := self._reads.get(place)) is not None and shared[1] is read:
            del self._reads[place]
        if not read.cancelled():
            read.exception()  # told to the streams that waited; none may be left to ask

    async def _read(self, query: Any) -> list[Event]:
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        return [Event(r.id, r.kind, r.customer, r.job_id, dict(r.data or {}), r.at) for r in rows]

    async def stream(
        self,
        after_id: int,
        *,
        customer: str | None = None,
        job_id: str | None = None,
        until: Awaitable[object] | None = None,
    ) -> AsyncIterator[Event]:
        """Events after ``after_id``, as they come; a job's stream ends with its final event.
        ``until``: the stream ends (within moments, idle or not) once it is done — the
        caller's key revoked or expired. Between reads the stream holds no connection."""
        ended = None if until is None else asyncio.ensure_future(until)
        try:
            with self._watching(customer, job_id) as woken:
                while ended is None or not ended.done():
                    woken.clear()  # before the read: an event stored after it sets it again
                    batch = await self.after(after_id, customer=customer, job_id=job_id)
                    for event in batch:
                        if ended is not None and ended.done():
                            return
                        after_id = event.id
                        yield event
                        if job_id is not None and event.kind in FINAL_JOB_EVENTS:
                            return
                    if len(batch) < _READ:  # all there was: wait to be woken
                        await self._idle(woken, ended)
        finally:
            if ended is not None and not ended.done():
                ended.cancel()

    async def _idle(self, woken: asyncio.Event, ended: asyncio.Future[object] | None) -> None:
        """Until woken for the stream's events, or its catch-up is due, or it is ``ended``."""
        if woken.is_set():
            return
        pause = self.catch_up * random.uniform(0.75, 1.5)
        waker: asyncio.Future[Any] = asyncio.ensure_future(woken.wait())
        waiting: list[asyncio.Future[Any]] = [waker] if ended is None else [waker, ended]
        try:
            await asyncio.wait(
                waiting,
                timeout=pause,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            waker.cancel()
