"""Events appended by several processes at once (two service processes, or a service and its
workers, on one database): a reader following the log by id never skips one, on each backend;
and on PostgreSQL a stream hears of another process's events at once (LISTEN/NOTIFY), not at
its next poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from sqlalchemy import Connection, text

from scrapeflow.db import create_engine
from scrapeflow.server._events import Event, EventLog, Told

APPENDS = 40


class SlowOutbox:
    """Holds the events' transaction open a moment, as a webhook fan-out to many keys does: in
    the database on PostgreSQL (the other writers go on meanwhile); SQLite has one writer at a
    time, and this one holds the process too."""

    def enqueue(self, connection: Connection, events: Sequence[Event]) -> None:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_sleep(0.02)"))
        else:
            time.sleep(0.02)

    def quiet(self, events: Sequence[Told]) -> None:
        return None  # every batch in a transaction, slow to commit


slow_outbox = SlowOutbox()


async def test_a_reader_never_skips_an_event_another_process_commits_late(db_url: str) -> None:
    engines = [create_engine(db_url) for _ in range(3)]
    slow = EventLog(engines[0], outbox=slow_outbox)  # one process, slow to commit
    quick = EventLog(engines[1])  # another, quick
    reader = EventLog(engines[2])
    try:
        await slow.open()
        await slow.close()
        seen: list[int] = []
        done = asyncio.Event()

        async def follow() -> None:
            last, finishing = 0, False
            while True:
                finishing = done.is_set()  # one more read after the last append returned
                for event in await reader.after(last):
                    seen.append(event.id)
                    last = event.id
                if finishing:
                    return
                await asyncio.sleep(0.001)

        async def append(log: EventLog, name: str) -> None:
            for n in range(APPENDS):
                await log.append("bank.accounts", {"n": n}, customer=name)

        following = asyncio.create_task(follow())
        await asyncio.gather(append(slow, "slow"), append(quick, "quick"))
        done.set()
        await asyncio.wait_for(following, 30)
        stored = [e.id for e in await reader.after(0, limit=10 * APPENDS)]
        assert len(stored) == 2 * APPENDS
        assert seen == stored  # every id, once, in order: none committed behind the reader
    finally:
        for engine in engines:
            await engine.dispose()


async def test_a_stream_hears_at_once_of_events_another_process_stored(pg_url: str) -> None:
    engines = [create_engine(pg_url) for _ in range(2)]
    try:
        # A catch-up far longer than the wait below: only a notice can wake the stream in time.
        async with EventLog(engines[0]) as worker, EventLog(engines[1], catch_up=3600) as server:
            assert server._notices is not None
            await asyncio.wait_for(server._notices.listening.wait(), 10)
            stream = server.stream(0, customer="ana")
            first = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.2)  # the stream has read the empty log and waits
            assert not first.done()
            other = await worker.append("bank.accounts", {"count": 2}, customer="bob")
            stored = await worker.append("bank.accounts", {"count": 3}, customer="ana")
            event = await asyncio.wait_for(first, 10)
            assert (event.id, event.customer, event.data) == (stored, "ana", {"count": 3})
            assert other < stored
            await stream.aclose()
    finally:
        for engine in engines:
            await engine.dispose()


async def test_closing_the_log_lands_the_events_told_before(db_url: str) -> None:
    """A stop (the service's, a worker's) closes the log right after the last events were
    told: they are stored, not dropped with the writer."""
    engine = create_engine(db_url)
    try:
        log = EventLog(engine, outbox=slow_outbox)
        await log.open()
        told = [
            asyncio.create_task(log.append("test.told", {"n": n}, customer="c1")) for n in range(20)
        ]
        await asyncio.sleep(0)  # they are queued, the writer has started
        await log.close()
        for task in told:
            task.cancel()  # the callers gave up waiting: what they told stays told
        await asyncio.gather(*told, return_exceptions=True)
        stored = await EventLog(engine).after(0, customer="c1")
    finally:
        await engine.dispose()
    assert [event.data["n"] for event in stored] == list(range(20))


async def test_events_stored_together_keep_their_order_and_their_data(db_url: str) -> None:
    """A batch of events appended at once is one transaction (on PostgreSQL one statement with
    the writers' lock and the notice): each keeps its place and what it said, to the byte."""
    engine = create_engine(db_url)
    try:
        async with EventLog(engine) as log:
            data = [
                {"n": n, "text": "ñandú 😀 \\\" '", "nested": {"list": [n, None, True]}}
                for n in range(30)
            ]
            ids = await asyncio.gather(
                *(
                    log.append(f"test.{n}", data[n], customer=f"c{n % 3}", job_id=f"j{n % 2}")
                    for n in range(30)
                )
            )
            assert ids == sorted(ids) and len(set(ids)) == 30  # in the order appended
            stored = await log.after(ids[0] - 1)
    finally:
        await engine.dispose()
    assert [e.id for e in stored] == ids
    assert [e.kind for e in stored] == [f"test.{n}" for n in range(30)]
    assert [e.data for e in stored] == data
    assert [(e.customer, e.job_id) for e in stored] == [
        (f"c{n % 3}", f"j{n % 2}") for n in range(30)
    ]
