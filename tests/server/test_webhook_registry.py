"""Who gets an event is decided by the webhooks registered when it is stored, whatever each
process remembers of them: on PostgreSQL a process keeps the registry it read last and stores
events none of its webhooks wants in one statement under "the registry is unchanged". A webhook
another process just made gets the very next event; a key that expired gets nothing; and a
batch nobody wants reads no registry. On each backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.banking import CredentialVault
from scrapeflow.db import create_engine
from scrapeflow.server._eventrows import WRITERS_LOCK
from scrapeflow.server._events import EventLog
from scrapeflow.server._keys import create_key, keys_table, open_keys
from scrapeflow.server._webhooks import Webhooks

VAULT = CredentialVault([CredentialVault.generate_key()])


@pytest.fixture
async def engines(db_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """Two processes' engines on one database with the keys' and webhooks' tables."""
    async for pair in _engines(db_url):
        yield pair


@pytest.fixture
async def pg_engines(pg_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """The same on PostgreSQL alone."""
    async for pair in _engines(pg_url):
        yield pair


async def _engines(url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    pair = (create_engine(url), create_engine(url))
    try:
        await open_keys(pair[0])
        await Webhooks(pair[0]).open()
        yield pair
    finally:
        for engine in pair:
            await engine.dispose()


def registry_reads(engine: AsyncEngine) -> Callable[[], int]:
    """How many times ``engine`` has read the webhooks' registry from now on (a statement that
    selects from it, not one that only checks it while inserting events)."""
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "scrapeflow_webhooks" in statement:
            seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", before)
    return lambda: len(seen)


async def delivered(hooks: Webhooks, webhook_id: str) -> list[int]:
    return sorted(d.event_id for d in await hooks.deliveries(webhook_id))


async def test_a_webhook_another_process_just_made_gets_the_next_event(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    here, there = engines
    hooks_here, hooks_there = Webhooks(here), Webhooks(there)
    _, key = await create_key(here, scopes=["read"], customers=["ana"])
    banks, _ = await hooks_here.create(key, "https://receiver.example/bank", ["bank."], VAULT)
    reads = registry_reads(here)
    async with EventLog(here, outbox=hooks_here) as log:
        # Job events: the only webhook wants bank events. The first batch reads the registry.
        first = await log.append("job.running", {"n": 1}, customer="ana", job_id="j1")
        second = await log.append("job.running", {"n": 2}, customer="ana", job_id="j1")
        if here.dialect.name == "postgresql":
            assert reads() == 1  # the second batch did not read it again
        # Another process registers a webhook for job events, then this one tells one more.
        jobs, _ = await hooks_there.create(key, "https://receiver.example/jobs", ["job."], VAULT)
        third = await log.append("job.succeeded", {"n": 3}, customer="ana", job_id="j1")
        bank = await log.append("bank.accounts", {"n": 4}, customer="ana")
        stored = await log.after(0)
    assert [e.id for e in stored] == [first, second, third, bank]
    assert [e.data["n"] for e in stored] == [1, 2, 3, 4]
    assert await delivered(hooks_there, jobs.id) == [third]
    assert await delivered(hooks_there, banks.id) == [bank]


async def test_a_key_gets_no_event_once_its_expiry_passed(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    here, there = engines
    hooks = Webhooks(here)
    _, key = await create_key(
        here, scopes=["read"], customers=["ana"], expires_at=datetime.now(UTC) + timedelta(hours=1)
    )
    hook, _ = await hooks.create(key, "https://receiver.example/", [], VAULT)
    async with EventLog(here, outbox=hooks) as log:
        kept = await log.append("job.running", {}, customer="ana", job_id="j1")
        # As a key made with an expiry that has since passed: nothing else changes.
        until = datetime.now(UTC) + timedelta(seconds=0.2)
        async with there.begin() as connection:
            await connection.execute(
                update(keys_table).where(keys_table.c.id == key.id).values(expires_at=until)
            )
        await asyncio.sleep((until - datetime.now(UTC)).total_seconds() + 0.05)
        await log.append("job.succeeded", {}, customer="ana", job_id="j1")
    assert await delivered(hooks, hook.id) == [kept]


async def test_an_event_stored_after_a_webhook_was_made_reaches_it_whatever_the_wait(
    pg_engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """On PostgreSQL an event batch waits its turn among the writers of every process (SQLite
    lets one writer in at a time): a webhook made while a batch waits, and done before the
    batch is stored, gets its event."""
    here, there = pg_engines
    hooks_here, hooks_there = Webhooks(here), Webhooks(there)
    _, key = await create_key(here, scopes=["read"], customers=["ana"])
    await hooks_here.create(key, "https://receiver.example/bank", ["bank."], VAULT)
    done: dict[str, float] = {}

    async def timed(name: str, work: Awaitable[Any]) -> Any:
        value = await work
        done[name] = time.monotonic()
        return value

    async with EventLog(here, outbox=hooks_here) as log:
        await log.append("job.running", {}, customer="ana", job_id="j1")  # the registry read
        async with there.connect() as other_writer:  # another process's batch, slow to commit
            await other_writer.execute(text("SELECT pg_advisory_lock(:k)"), {"k": WRITERS_LOCK})
            try:
                told = asyncio.create_task(
                    timed("event", log.append("job.succeeded", {}, customer="ana", job_id="j1"))
                )
                await asyncio.sleep(0.3)  # the batch waits for its turn
                made = asyncio.create_task(
                    timed(
                        "webhook",
                        hooks_there.create(key, "https://receiver.example/", ["job."], VAULT),
                    )
                )
                await asyncio.sleep(0.3)
            finally:
                await other_writer.execute(
                    text("SELECT pg_advisory_unlock(:k)"), {"k": WRITERS_LOCK}
                )
            event_id = await told
            hook, _ = await made
    delivered_to = await delivered(hooks_there, hook.id)
    if done["webhook"] < done["event"]:
        assert delivered_to == [event_id]  # made first, so it gets the event
    else:
        assert delivered_to == []  # the event was stored before the webhook was made
