"""Fetch logs: layout, JSON lines read back, resume, crash safety, several writer processes."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest

from scrapeflow.errors import ConfigError, ObjectNotFound, StorageCorrupt
from scrapeflow.storage import (
    BlobStore,
    FetchLog,
    FetchRecord,
    fetch_log_name,
    fetch_log_names,
    logged_urls,
    read_fetch_log,
    sha384_hex,
)
from tests.storage import write_log_then_die
from tests.storage.conftest import PROGRAM, Target

DAY = datetime(2024, 5, 1, 23, 30, tzinfo=timezone(timedelta(hours=-2)))  # 2024-05-02 in UTC
NAME = "2024-05-02_48213_0_500"


def ok(url: str, n: int = 0) -> FetchRecord:
    return FetchRecord(
        requested_url=url,
        started=datetime(2024, 5, 2, 1, 0, n, 250, tzinfo=UTC),
        duration_ns=42_000_000 + n,
        final_url=url + "?final",
        status=200,
        checksum=sha384_hex(url),
        location=f"/store/gofetch/sha384_content/{sha384_hex(url)}",
        processor="RSS",
        meta={"source": "feeds", "n": n},
    )


def failed(url: str, status: int | None, error: str) -> FetchRecord:
    return FetchRecord(
        requested_url=url,
        started=datetime(2024, 5, 2, 1, 0, 0, tzinfo=UTC),
        duration_ns=7,
        status=status,
        error=error,
        processor="RSS",
    )


def open_log(store: BlobStore, tmp_path: Path, **kwargs: object) -> FetchLog:
    args = {"fetch_id": "48213", "offset": 0, "limit": 500, "started": DAY}
    args.update(kwargs)
    return FetchLog(store, spool_dir=tmp_path / "spool", **args)  # type: ignore[arg-type]


async def test_a_log_is_written_where_gofetch_puts_it_and_read_back(
    target: Target, store: BlobStore, tmp_path: Path
) -> None:
    records = [
        ok("http://127.0.0.1/a", 1),
        failed("http://127.0.0.1/b", 404, "HTTP response 404"),
        failed("http://127.0.0.1/c", None, "FetchTimeout: no answer in 10 s"),
    ]
    log = open_log(store, tmp_path)
    assert log.name == NAME
    async with log:
        for record in records:
            await log.write(record)

    key = f"{PROGRAM}/logs/{NAME}"
    assert log.location == f"{store.root}/{key}"
    assert target.object_keys() == [key]
    lines = target.read(key).splitlines()
    assert len(lines) == 3
    assert orjson.loads(lines[0]) == {
        "requested_url": "http://127.0.0.1/a",
        "final_url": "http://127.0.0.1/a?final",
        "status": 200,
        "checksum": sha384_hex("http://127.0.0.1/a"),
        "location": f"/store/gofetch/sha384_content/{sha384_hex('http://127.0.0.1/a')}",
        "error": None,
        "started": "2024-05-02T01:00:01.000250Z",
        "duration_ns": 42_000_001,
        "processor": "RSS",
        "meta": {"source": "feeds", "n": 1},
    }
    assert await read_fetch_log(store, NAME) == records
    assert [r.stored for r in records] == [True, False, False]
    assert log.written == 3


async def test_an_s3_log_is_spooled_then_uploaded_on_close(
    s3_target: Target, tmp_path: Path
) -> None:
    target = s3_target
    async with target.store() as store, open_log(store, tmp_path) as log:
        await log.write(ok("http://127.0.0.1/a"))
        assert target.object_keys() == []  # not yet in the store: in the spool
        spooled = [p for p in (tmp_path / "spool").rglob("*") if p.is_file()]
        assert [p.name for p in spooled] == [NAME]
    assert target.object_keys() == [f"{PROGRAM}/logs/{NAME}"]
    assert not [p for p in (tmp_path / "spool").rglob("*") if p.is_file()]


async def test_secrets_in_errors_are_masked(store: BlobStore, tmp_path: Path) -> None:
    async with open_log(store, tmp_path) as log:
        await log.write(
            failed("http://a/", None, "Cannot connect via http://bob:hunter2@10.0.0.1:8")
        )

    [record] = await read_fetch_log(store, NAME)
    assert record.error == "Cannot connect via http://***@10.0.0.1:8"


async def test_a_second_run_the_same_day_appends(store: BlobStore, tmp_path: Path) -> None:
    for url in ("http://a/1", "http://a/2"):
        async with open_log(store, tmp_path) as log:
            await log.write(ok(url))

    assert [r.requested_url for r in await read_fetch_log(store, NAME)] == [
        "http://a/1",
        "http://a/2",
    ]


async def test_logged_urls_are_the_shards_stored_urls(store: BlobStore, tmp_path: Path) -> None:
    async with open_log(store, tmp_path) as log:
        await log.write(ok("http://a/stored"))
        await log.write(failed("http://a/404", 404, "HTTP response 404"))
    async with open_log(store, tmp_path, started=DAY + timedelta(days=3)) as log:
        await log.write(ok("http://a/later"))
    async with open_log(store, tmp_path, offset=500) as log:  # another shard
        await log.write(ok("http://a/other-shard"))
    async with open_log(store, tmp_path, fetch_id="99999") as log:  # another run
        await log.write(ok("http://a/other-run"))

    urls = await logged_urls(store, "48213", 0, 500, spool_dir=tmp_path / "spool")

    assert urls == {"http://a/stored", "http://a/later"}
    assert await fetch_log_names(store, "48213", 0, 500) == [NAME, "2024-05-05_48213_0_500"]
    assert await fetch_log_names(store, "48213") == [
        NAME,
        "2024-05-02_48213_500_500",
        "2024-05-05_48213_0_500",
    ]
    assert len(await fetch_log_names(store)) == 4


async def test_a_killed_run_keeps_what_it_wrote(target: Target, tmp_path: Path) -> None:
    urls = [f"http://127.0.0.1/{n}" for n in range(25)]
    spool = str(tmp_path / "spool")
    context = multiprocessing.get_context("spawn")
    process = context.Process(
        target=write_log_then_die, args=(target.url, target.options or None, spool, urls, True)
    )
    process.start()
    process.join(timeout=60)
    assert process.exitcode == -9  # SIGKILL: no close, no upload, no cleanup

    crashed = "2024-05-01_crash_0_100"
    async with target.store() as store:
        assert await logged_urls(store, "crash", 0, 100, spool_dir=spool) == set(urls)
        # The next run of the shard (another day) publishes what the crashed run spooled.
        async with FetchLog(
            store, "crash", 0, 100, started=datetime(2024, 5, 3, tzinfo=UTC), spool_dir=spool
        ) as log:
            await log.write(ok("http://127.0.0.1/next-day"))
        assert [r.requested_url for r in await read_fetch_log(store, crashed)] == urls
        assert await fetch_log_names(store, "crash", 0, 100) == [crashed, "2024-05-03_crash_0_100"]


async def test_processes_of_one_run_share_the_log(target: Target, tmp_path: Path) -> None:
    spool = str(tmp_path / "spool")
    context = multiprocessing.get_context("spawn")
    batches = [[f"http://127.0.0.1/{w}/{n}" for n in range(150)] for w in ("p1", "p2")]
    both_open = context.Barrier(2)  # the first to close is not the last writer
    processes = [
        context.Process(
            target=write_log_then_die,
            args=(target.url, target.options or None, spool, b, False, both_open),
        )
        for b in batches
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0, 0]

    async with target.store() as store:
        records = await read_fetch_log(store, "2024-05-01_crash_0_100")
    assert sorted(r.requested_url for r in records) == sorted(batches[0] + batches[1])
    assert not [p for p in Path(spool).rglob("*") if p.is_file()]


async def test_a_line_cut_by_a_crash_is_dropped_and_the_log_goes_on(tmp_path: Path) -> None:
    async with BlobStore(str(tmp_path / "store"), PROGRAM) as store:
        async with open_log(store, tmp_path) as log:
            await log.write(ok("http://a/1"))
        path = tmp_path / "store" / PROGRAM / "logs" / NAME
        with path.open("ab") as f:
            f.write(b'{"requested_url": "http://a/cut", "sta')  # a write cut by a crash
        assert [r.requested_url for r in await read_fetch_log(store, NAME)] == ["http://a/1"]

        async with open_log(store, tmp_path) as log:
            await log.write(ok("http://a/2"))

        assert [r.requested_url for r in await read_fetch_log(store, NAME)] == [
            "http://a/1",
            "http://a/2",
        ]


async def test_a_corrupt_log_line_is_named(tmp_path: Path) -> None:
    async with BlobStore(str(tmp_path / "store"), PROGRAM) as store:
        path = tmp_path / "store" / PROGRAM / "logs" / NAME
        path.parent.mkdir(parents=True)
        path.write_bytes(ok("http://a/1").to_json() + b"not json\n")
        with pytest.raises(StorageCorrupt, match=f"{NAME} line 2 is not a fetch record"):
            await read_fetch_log(store, NAME)


async def test_a_missing_log_is_object_not_found(store: BlobStore) -> None:
    with pytest.raises(ObjectNotFound, match=f"no fetch log {NAME} in"):
        await read_fetch_log(store, NAME)


def test_log_names_are_checked() -> None:
    assert fetch_log_name("48213", 0, 500, DAY.date()) == "2024-05-01_48213_0_500"
    with pytest.raises(ConfigError, match="fetch id 'a/b' is not usable"):
        fetch_log_name("a/b", 0, 500, DAY.date())
    with pytest.raises(ConfigError, match="offset must be an integer >= 0, not -1"):
        fetch_log_name("48213", -1, 500, DAY.date())


async def test_writing_to_a_log_that_is_not_open_is_an_error(
    store: BlobStore, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="is not open"):
        await open_log(store, tmp_path).write(ok("http://a/"))
