"""Tables made outside the migrations, created by processes starting together on one new
database: each finds them or makes them, none fails."""

from __future__ import annotations

import asyncio

from sqlalchemy import inspect

from scrapeflow.db import create_engine
from scrapeflow.jobs import SqlJobStore
from scrapeflow.server._events import EventLog
from scrapeflow.server._webhooks import Webhooks


async def test_processes_starting_together_create_the_tables_once(empty_db_url: str) -> None:
    engines = [create_engine(empty_db_url) for _ in range(6)]
    try:

        async def start(n: int) -> None:
            engine = engines[n]
            await SqlJobStore(empty_db_url, engine=engine).open()
            await Webhooks(engine).open()
            await EventLog(engine).open()
            await EventLog(engine).close()

        await asyncio.gather(*(start(n) for n in range(6)))
        async with engines[0].connect() as connection:
            tables = set(await connection.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        for engine in engines:
            await engine.dispose()
    assert {"scrapeflow_jobs", "scrapeflow_events"} <= tables
