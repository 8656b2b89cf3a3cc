"""SqlStatusStore: task statuses in a SQL table, on SQLite and PostgreSQL, and the engine on it:
a run, a resume that skips what succeeded (also after the first process was SIGKILLed), and
follow-up tasks that a resume finds again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import scrapeflow
from scrapeflow.db import create_engine
from scrapeflow.errors import InputError, StatusCorrupt, StatusError, TaskNotFound
from scrapeflow.executor import Context, execute_async
from scrapeflow.sandbox import Sandbox
from scrapeflow.scrape import scrape
from scrapeflow.status import JsonDirStore, StatusStore
from scrapeflow.statusdb import STATUS_TABLE, SqlStatusStore
from tests._servers import RunningSite
from tests.test_follow_up import SMALL, FeedChain, first_page, page_keys, truth

KILL_BOUND = 60.0  # seconds the first process may take to save its quick tasks


async def raw_status(db_url: str, namespace: str, key: str) -> str:
    """The status column of one row, as stored."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as connection:
            found = await connection.scalar(
                text(f"SELECT status FROM {STATUS_TABLE} WHERE namespace = :n AND key = :k"),
                {"n": namespace, "k": key},
            )
    finally:
        await engine.dispose()
    assert isinstance(found, str)
    return found


async def test_the_store_keeps_what_the_json_store_would_write(db_url: str, tmp_path: Path) -> None:
    status = {
        "name": "k1",
        "params": {"url": "http://127.0.0.1/é", "n": [1, 2]},
        "scrape": {"size": 3, "response_headers": {"Content-Type": "text/html"}},
        "scrape_status": "SUCCESS",
        "scrape_last_run": "2026-01-01 00:00:00+00:00",
    }
    async with SqlStatusStore(db_url, namespace="run-1") as store:
        assert isinstance(store, StatusStore)
        await store.prepare()
        assert await store.keys() == []
        assert await store.load("k1") is None
        assert not await store.exists("k1")
        await store.save("k1", status)
        await store.save("k2", {"name": "k2", "params": {}})
        await store.save("k2", {"name": "k2", "params": {}, "more": 1})  # replaced

        assert await store.load("k1") == status
        assert await store.load("k2") == {"name": "k2", "params": {}, "more": 1}
        assert await store.exists("k1")
        assert await store.keys() == ["k1", "k2"]

    files = JsonDirStore(tmp_path / "statuses")
    await files.prepare()
    await files.save("k1", status)
    stored = await raw_status(db_url, "run-1", "k1")
    assert stored.encode() == files.path("k1").read_bytes()  # byte for byte


async def test_namespaces_keep_runs_apart(db_url: str) -> None:
    async with (
        SqlStatusStore(db_url, namespace="a") as first,
        SqlStatusStore(db_url, namespace="b") as second,
    ):
        await asyncio.gather(first.prepare(), second.prepare())  # the table made once
        await first.save("k", {"name": "k", "params": {"run": "a"}})
        assert await second.load("k") is None
        assert await second.keys() == []
        await second.save("k", {"name": "k", "params": {"run": "b"}})
        assert (await first.load("k"))["params"] == {"run": "a"}
        assert await first.keys() == ["k"]


async def test_concurrent_saves_of_different_keys_all_land(db_url: str) -> None:
    keys = [f"task-{n:03}" for n in range(120)]
    async with SqlStatusStore(db_url, namespace="busy") as store:
        await store.prepare()
        await asyncio.gather(
            *(store.save(key, {"name": key, "params": {"n": n}}) for n, key in enumerate(keys))
        )
        assert await store.keys() == keys
        loaded = await store.load_many(keys)
    assert loaded == {key: {"name": key, "params": {"n": n}} for n, key in enumerate(keys)}


async def test_a_row_that_is_not_a_status_is_reported_not_guessed(db_url: str) -> None:
    async with SqlStatusStore(db_url, namespace="odd") as store:
        await store.prepare()
        await store.save("good", {"name": "good", "params": {}})
        await store.save("bad", {"name": "bad", "params": {}})
        async with store.engine.begin() as connection:
            await connection.execute(
                text(f"UPDATE {STATUS_TABLE} SET status = '[1' WHERE key = 'bad'")
            )
        with pytest.raises(StatusCorrupt, match=r"task 'bad' in SqlStatusStore\(.*'odd'\)"):
            await store.load("bad")
        found = await store.load_many(["good", "bad", "never"])
    assert found["good"] == {"name": "good", "params": {}}
    assert isinstance(found["bad"], StatusCorrupt)
    assert "never" not in found


async def test_bad_names_and_an_unreachable_database_are_one_line_errors() -> None:
    url = "postgresql+asyncpg://scraper:s3cret-pw@127.0.0.1:1/nowhere"
    with pytest.raises(InputError, match="non-empty string"):
        SqlStatusStore(url, namespace="")
    with pytest.raises(InputError, match="at most 255"):
        SqlStatusStore(url, namespace="x" * 256)
    async with SqlStatusStore(url, namespace="n") as store:
        assert "s3cret" not in repr(store)
        with pytest.raises(InputError, match="cannot be a file name"):
            await store.save("../etc", {"name": "x", "params": {}})
        with pytest.raises(
            StatusError, match=r"cannot prepare task statuses in .*127\.0\.0\.1:1"
        ) as e:
            await store.prepare()
    assert "s3cret" not in str(e.value)
    assert "\n" not in str(e.value)


def test_the_store_is_exported_lazily() -> None:
    assert scrapeflow.SqlStatusStore is SqlStatusStore
    assert "SqlStatusStore" in scrapeflow.__all__


# -- the engine on the store ---------------------------------------------------------------


async def test_execute_async_runs_and_resumes_on_the_sql_store(
    db_url: str, tmp_path: Path, plain_site: RunningSite
) -> None:
    tasks = {f"p{n}": {"url": plain_site.page_url(n)} for n in range(5)}
    tasks["gone"] = {"url": f"{plain_site.url}/status/404"}
    async with SqlStatusStore(db_url, namespace="crawl") as store:
        done = await execute_async([scrape], tmp_path, tasks, store=store)
        assert done == [f"p{n}" for n in range(5)]
        assert not list(tmp_path.glob("*.status.json"))  # statuses in the table, not in files
        assert (tmp_path / "p1.scrape").read_bytes()  # bodies where they always were
        assert (await store.load("p1"))["scrape_status"] == "SUCCESS"
        assert (await store.load("gone"))["scrape_status"].startswith("ERROR HTTPStatusError")

    hits = plain_site.hits("/page/1")
    # Another store object (another machine would do the same): by keys only, params read back.
    async with SqlStatusStore(db_url, namespace="crawl") as again:
        redone = await execute_async([scrape], tmp_path, [*tasks], store=again)
        assert redone == [f"p{n}" for n in range(5)]
        assert (await again.load("p1"))["scrape_status"] == "SKIPPED"
        assert (await again.load("p1"))["scrape"]["http_status"] == 200  # output kept
        with pytest.raises(TaskNotFound, match=r"SqlStatusStore\(.*'crawl'\).*'nope'"):
            await execute_async([scrape], tmp_path, ["nope"], store=again)
    assert plain_site.hits("/page/1") == hits  # nothing fetched twice


async def test_follow_ups_are_kept_in_the_table_and_a_resume_finds_them(
    db_url: str, tmp_path: Path, sandbox: Sandbox
) -> None:
    chain = FeedChain(sandbox)
    chain.hold = 5
    async with SqlStatusStore(db_url, namespace="feed") as store:
        run = asyncio.create_task(
            execute_async([chain.page], tmp_path, first_page(SMALL), store=store)
        )
        await asyncio.wait_for(chain.held.wait(), 30)
        # Page 5 runs as soon as page 4 added it, maybe before page 4's own save (an await on
        # the database) lands: cancel once it has, or page 4 would rightly run again.
        async with asyncio.timeout(30):
            while ((await store.load(f"{SMALL}-p4")) or {}).get("page_status") != "SUCCESS":
                await asyncio.sleep(0.01)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        fifth = await store.load(f"{SMALL}-p5")  # saved by page 4 before it was scheduled
        assert fifth is not None and fifth["added_by"] == f"{SMALL}-p4"
        assert "page_status" not in fifth
        assert (await store.load(f"{SMALL}-p1"))["follow_ups"] == [f"{SMALL}-p2"]

    chain.hold = None
    async with SqlStatusStore(db_url, namespace="feed") as store:
        done = await execute_async([chain.page], tmp_path, first_page(SMALL), store=store)
        statuses = await store.load_many(page_keys(SMALL, 8))
    assert done == page_keys(SMALL, 8)
    assert chain.fetched == {(SMALL, n): 1 for n in range(1, 9)}  # no page fetched twice
    assert [statuses[k]["page_status"] for k in page_keys(SMALL, 8)] == [
        *["SKIPPED"] * 4,
        *["SUCCESS"] * 4,
    ]
    assert [i for k in page_keys(SMALL, 8) for i in statuses[k]["page"]["ids"]] == truth(
        sandbox, SMALL
    )


# A run in its own process: tasks q00..q19 finish at once, h0..h3 hang until the process dies.
KILLED_RUN = """
import asyncio, os, sys
from pathlib import Path
from scrapeflow.executor import execute_async
from scrapeflow.statusdb import SqlStatusStore

async def work(context, key, status):
    if status["params"]["hang"] and os.environ.get("HANG") == "1":
        await asyncio.Event().wait()
    return {"pid": os.getpid()}

async def main():
    tasks = {f"q{n:02}": {"hang": False} for n in range(20)}
    tasks |= {f"h{n}": {"hang": True} for n in range(4)}
    async with SqlStatusStore(sys.argv[1], namespace="killed") as store:
        await execute_async([work], Path(sys.argv[2]), tasks, max_parallelism=4, store=store)

asyncio.run(main())
"""


async def test_a_run_killed_with_sigkill_resumes_in_another_process(
    pg_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "killed_run.py"
    script.write_text(textwrap.dedent(KILLED_RUN))
    env = {**os.environ, "HANG": "1"}
    process = subprocess.Popen(
        [sys.executable, str(script), pg_url, str(tmp_path / "first")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    quick = [f"q{n:02}" for n in range(20)]
    hanging = [f"h{n}" for n in range(4)]
    try:
        async with SqlStatusStore(pg_url, namespace="killed") as store:
            await store.prepare()  # alongside the child's own: one makes the table
            deadline = time.monotonic() + KILL_BOUND
            while True:  # until the quick tasks are saved, while the others hang
                if process.poll() is not None:
                    raise AssertionError(f"the run ended by itself: {process.stderr.read()!r}")
                if time.monotonic() > deadline:
                    raise AssertionError("the first run did not save its quick tasks in time")
                if await store.exists("q00") and len(await store.keys()) == len(quick):
                    break
                await asyncio.sleep(0.05)
            process.send_signal(signal.SIGKILL)  # mid-run: four tasks in their executor
            await asyncio.to_thread(process.wait, 10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stderr is not None:
            process.stderr.close()
    assert process.returncode == -signal.SIGKILL

    # This test's process is the "other machine": another process, another directory.
    async with SqlStatusStore(pg_url, namespace="killed") as store:
        assert await store.keys() == quick  # the hanging ones never saved a thing
        first_pid = (await store.load("q00"))["work"]["pid"]

        async def work(context: Context, key: str, status: dict[str, Any]) -> dict[str, Any]:
            return {"pid": os.getpid()}

        done = await execute_async(
            [work],
            tmp_path / "second",
            [(k, {"hang": k[0] == "h"}) for k in quick + hanging],
            store=store,
        )
        statuses = await store.load_many(quick + hanging)
    assert done == quick + hanging
    for key in quick:  # skipped: what the killed process did stays
        assert statuses[key]["work_status"] == "SKIPPED"
        assert statuses[key]["work"]["pid"] == first_pid
    for key in hanging:  # run here, once
        assert statuses[key]["work_status"] == "SUCCESS"
        assert statuses[key]["work"]["pid"] == os.getpid()


async def test_an_in_memory_sqlite_store_works_for_a_single_process() -> None:
    async with SqlStatusStore("sqlite+aiosqlite://", namespace="mem") as store:
        await store.prepare()
        await store.save("k", {"name": "k", "params": {}})
        assert await store.keys() == ["k"]
