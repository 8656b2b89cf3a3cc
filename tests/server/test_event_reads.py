"""Streams of one customer woken together read its new events once between them, and a stream
woken after a read began never takes that read's answer (it could miss what woke it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import create_engine
from scrapeflow.server._events import Event, EventLog

STREAMS = 20


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(db_url)
    yield engine
    await engine.dispose()


def count_event_reads(engine: AsyncEngine) -> list[str]:
    """The statements reading the events table, as the database driver is given them."""
    seen: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "scrapeflow_events" in statement:
            seen.append(statement)

    sa_event.listen(engine.sync_engine, "before_cursor_execute", before)
    return seen


async def test_twenty_streams_of_a_customer_read_its_new_events_once(engine: AsyncEngine) -> None:
    # A catch-up far off and no tail (one process): only this process's own wake-up reads.
    async with EventLog(engine, catch_up=3600, tail_every=3600) as log:
        streams = [log.stream(0, customer="ana") for _ in range(STREAMS)]
        firsts = [asyncio.ensure_future(anext(stream)) for stream in streams]
        await asyncio.sleep(0.3)  # each has read the empty log and waits
        assert not any(first.done() for first in firsts)
        reads = count_event_reads(engine)
        stored = await log.append("bank.accounts", {"count": 2}, customer="ana")
        got: list[Event] = await asyncio.wait_for(asyncio.gather(*firsts), 10)
        assert [event.id for event in got] == [stored] * STREAMS
        assert len(reads) == 1, reads  # one read for the twenty
        for stream in streams:
            await stream.aclose()


async def test_a_stream_woken_after_a_read_began_reads_again(engine: AsyncEngine) -> None:
    async with EventLog(engine, catch_up=3600, tail_every=3600) as log:
        reads = count_event_reads(engine)
        before = asyncio.ensure_future(log.after(0, customer="ana"))
        joined = asyncio.ensure_future(log.after(0, customer="ana"))
        await asyncio.sleep(0)  # both asked, nothing stored since: one read between them
        stored = await log.append("bank.accounts", {"count": 1}, customer="ana")  # a wake-up
        after = await log.after(0, customer="ana")  # asked after it: a read of its own
        await asyncio.gather(before, joined)
        assert [event.id for event in after] == [stored]
        assert len(reads) == 2, reads
