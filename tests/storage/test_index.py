"""Indexes: exact line formats and paths, the registry, and the claim that no line is ever lost,
with concurrent writers (tasks and processes) and compactions running alongside them."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
from datetime import datetime, timedelta, timezone

import pytest

from scrapeflow.errors import ConfigError, InputError
from scrapeflow.storage import (
    BlobStore,
    ChecksumIndex,
    Index,
    IndexEntry,
    IndexRegistry,
    LineIndex,
    UrlIndex,
    index_names,
    make_indexes,
    register_index,
    sha384_hex,
)
from tests.storage import add_index_lines, entry
from tests.storage.conftest import PROGRAM, Target

CHECKSUM = sha384_hex(b"page")


def fetch() -> IndexEntry:
    return IndexEntry(
        checksum=CHECKSUM,
        content_location=f"s3://bucket/crawls/gofetch/sha384_content/{CHECKSUM}",
        requested_link="http://127.0.0.1:8080/feed?id=7",
        final_link="http://127.0.0.1:8080/feed/7.xml",
        # 10:30:15.250 at UTC+2 is 08:30:15.250 UTC
        fetch_started=datetime(
            2024, 5, 1, 10, 30, 15, 250_000, tzinfo=timezone(timedelta(hours=2))
        ),
        fetch_duration_ns=123_456_789,
        parser_name="Pubmed_XML",
        fetch_id="48213",
    )


def index_keys(target: Target, name: str, key: str) -> list[str]:
    prefix = f"{PROGRAM}/index/{name}/{key}"
    return [k for k in target.object_keys() if k.startswith(prefix)]


async def test_checksum_index_line_format_and_path(target: Target, store: BlobStore) -> None:
    index = ChecksumIndex(store)
    await index.add(fetch())

    expected = (
        f"s3://bucket/crawls/gofetch/sha384_content/{CHECKSUM}\t"
        "http://127.0.0.1:8080/feed?id=7\thttp://127.0.0.1:8080/feed/7.xml\t"
        "2024-05-01T08:30:15.250000Z\t123456789\tPubmed_XML"
    )
    assert await index.lines(CHECKSUM) == [expected]
    base = f"{PROGRAM}/index/sha384_checksum/{CHECKSUM}"
    assert index.location(CHECKSUM) == f"{store.root}/{base}"
    keys = index_keys(target, "sha384_checksum", CHECKSUM)
    if target.kind == "local":
        assert keys == [base]
        assert target.read(base) == (expected + "\n").encode()
    else:  # S3 cannot append: the line is its own object until compacted
        assert len(keys) == 1 and keys[0].startswith(f"{base}.d/48213-")
        assert target.read(keys[0]) == (expected + "\n").encode()
        assert await index.compact(CHECKSUM) == 1
        assert index_keys(target, "sha384_checksum", CHECKSUM) == [base]
        assert target.read(base) == (expected + "\n").encode()
        assert await index.lines(CHECKSUM) == [expected]


async def test_url_index_line_format_and_key(target: Target, store: BlobStore) -> None:
    index = UrlIndex(store)
    await index.add(fetch())

    key = sha384_hex("http://127.0.0.1:8080/feed?id=7")
    assert UrlIndex.key_for("http://127.0.0.1:8080/feed?id=7") == key
    assert await index.lines(key) == [
        f"2024-05-01T08:30:15.250000Z\t{CHECKSUM}\t"
        f"s3://bucket/crawls/gofetch/sha384_content/{CHECKSUM}\t"
        "http://127.0.0.1:8080/feed/7.xml\tPubmed_XML"
    ]
    line = (await index.lines(key))[0]
    if target.kind == "local":  # one append-only file per shard, a record per line
        shard = f"{PROGRAM}/index/url_sha384/{key[:2]}.tsv"
        assert index_keys(target, "url_sha384", "") == [shard]
        assert target.read(shard) == f"{key}\t{line}\n".encode()
        assert index.location(key) == f"{store.root}/{shard}"
    else:  # S3: a key per URL, under a prefix named by the key's first two characters
        assert index_keys(target, "url_sha384", f"{key[:2]}/{key}.d/48213-")
        assert not index_keys(target, "url_sha384", key)


async def test_url_index_reads_lines_a_store_wrote_before_its_fan_out(
    target: Target, store: BlobStore
) -> None:
    """A store whose by-URL files were written flat (``url_sha384/{key}``) keeps them: its
    lines are read with the ones written since, and compaction folds both."""
    index = UrlIndex(store)
    key = UrlIndex.key_for("http://127.0.0.1:8080/feed?id=7")
    old = f"2024-04-01T08:00:00.000000Z\t{CHECKSUM}\tthere\thttp://127.0.0.1:8080/feed/7.xml\tRSS"
    await store._backend.add_line(f"{PROGRAM}/index/url_sha384/{key}", (old + "\n").encode(), "1")
    await index.add(fetch())

    lines = await index.lines(key)
    assert lines[0] == old and len(lines) == 2
    # Local disk: the old file folded into the shard file and gone; S3: both line objects
    # folded into their base objects.
    assert await index.compact(key) == (1 if target.kind == "local" else 2)
    assert await index.lines(key) == lines
    if target.kind == "local":
        assert not index_keys(target, "url_sha384", key)


async def test_an_unknown_key_has_no_lines(store: BlobStore) -> None:
    assert await ChecksumIndex(store).lines(CHECKSUM) == []
    assert await ChecksumIndex(store).compact(CHECKSUM) == 0


async def test_the_same_fetch_recorded_twice_is_one_line(store: BlobStore) -> None:
    index = ChecksumIndex(store)
    await index.add(fetch())
    await index.add(fetch())  # an at-least-once retry of the same fetch

    assert len(await index.lines(CHECKSUM)) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"parser_name": "RSS\tevil"}, "holds a tab or a newline"),
        ({"final_link": "http://x/\nforged line"}, "holds a tab or a newline"),
        ({"fetch_started": datetime(2024, 5, 1)}, "has no time zone"),
        ({"fetch_duration_ns": -1}, "is negative"),
    ],
)
async def test_an_entry_that_would_break_the_format_is_refused(
    store: BlobStore, change: dict[str, object], message: str
) -> None:
    bad = dataclasses.replace(fetch(), **change)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=message):
        await ChecksumIndex(store).add(bad)
    assert await ChecksumIndex(store).lines(CHECKSUM) == []


async def test_a_key_that_would_escape_the_index_is_refused(store: BlobStore) -> None:
    with pytest.raises(ConfigError, match="is not usable in a storage path"):
        await ChecksumIndex(store).lines("../../sha384_content/x")


# -- the registry ------------------------------------------------------------------------------


class ByHost(LineIndex):
    name = "by_host"

    def key_of(self, entry: IndexEntry) -> str:
        return entry.requested_link.split("/")[2].replace(":", "_")

    def line_of(self, entry: IndexEntry) -> str:
        return entry.fields(entry.checksum, entry.requested_link)


def test_the_canonical_index_is_always_first_and_cannot_be_disabled(tmp_path) -> None:
    store = BlobStore(str(tmp_path), PROGRAM)

    assert [i.name for i in make_indexes([], store)] == ["sha384_checksum"]
    made = make_indexes(["url_sha384", "sha384_checksum", "url_sha384"], store)
    assert [i.name for i in made] == ["sha384_checksum", "url_sha384"]
    assert all(isinstance(i, Index) for i in made)
    assert {"sha384_checksum", "url_sha384"} <= set(index_names())


def test_an_unknown_index_name_is_a_config_error_listing_the_known(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown index 'by_url'; registered: sha384_checksum"):
        make_indexes(["by_url"], BlobStore(str(tmp_path), PROGRAM))


def test_the_canonical_index_cannot_be_replaced() -> None:
    with pytest.raises(ConfigError, match="canonical index and cannot be replaced"):
        register_index("sha384_checksum", ByHost)


async def test_a_registered_index_is_built_and_records_lines(tmp_path) -> None:
    registry = IndexRegistry()
    registry.register("by_host", ByHost)
    with pytest.raises(ConfigError, match="already registered"):
        registry.register("by_host", ByHost)

    async with BlobStore(str(tmp_path), PROGRAM) as store:
        canonical, by_host = registry.make(["by_host"], store=store)
        for index in (canonical, by_host):
            await index.add(fetch())
        assert await by_host.lines("127.0.0.1_8080") == [
            f"{CHECKSUM}\thttp://127.0.0.1:8080/feed?id=7"
        ]
    assert (tmp_path / PROGRAM / "index" / "by_host" / "127.0.0.1_8080").is_file()
    assert "by_host" not in index_names()  # a registry of its own: the shared one is untouched


def test_a_factory_that_builds_the_wrong_index_is_refused(tmp_path) -> None:
    registry = IndexRegistry()
    registry.register("other", ByHost)
    with pytest.raises(ConfigError, match=r"built ByHost.*not an Index named 'other'"):
        registry.make(["other"], BlobStore(str(tmp_path), PROGRAM))


def test_register_index_uses_the_shared_registry(tmp_path) -> None:
    register_index("by_host_shared", ByHostShared)
    try:
        assert "by_host_shared" in index_names()
        made = make_indexes(["by_host_shared"], BlobStore(str(tmp_path), PROGRAM))
        assert [i.name for i in made] == ["sha384_checksum", "by_host_shared"]
    finally:
        from scrapeflow.storage._index import _REGISTRY

        _REGISTRY.unregister("by_host_shared")


class ByHostShared(ByHost):
    name = "by_host_shared"


# -- no line lost --------------------------------------------------------------------------------


def expected_lines(writers: list[str], count: int) -> set[str]:
    index = ChecksumIndex.__new__(ChecksumIndex)
    return {index.line_of(entry(n, writer=w)) for w in writers for n in range(count)}


async def test_concurrent_writers_lose_no_line(target: Target) -> None:
    """Two fetchers, each with its own store and event loop in its own thread, one key."""
    count = 60 if target.kind == "s3" else 1000

    async def writer(name: str) -> None:
        async with target.store() as store:
            index = ChecksumIndex(store)
            for n in range(count):
                await index.add(entry(n, writer=name))

    await asyncio.gather(
        asyncio.to_thread(asyncio.run, writer("w1")), asyncio.to_thread(asyncio.run, writer("w2"))
    )

    async with target.store() as store:
        lines = await ChecksumIndex(store).lines("a" * 96)
    assert len(lines) == 2 * count
    assert set(lines) == expected_lines(["w1", "w2"], count)


def test_concurrent_processes_lose_no_line(target: Target) -> None:
    count = 60 if target.kind == "s3" else 2000
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=add_index_lines, args=(target.url, target.options or None, name, count)
        )
        for name in ("p1", "p2")
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0, 0]

    async def read() -> list[str]:
        async with target.store() as store:
            return await ChecksumIndex(store).lines("a" * 96)

    lines = asyncio.run(read())
    assert len(lines) == 2 * count
    assert {line.split("\t")[1] for line in lines} == {
        f"http://127.0.0.1/{w}/{n}" for w in ("p1", "p2") for n in range(count)
    }


async def test_compaction_keeps_lines_added_while_it_runs(target: Target) -> None:
    """Writers and two compactors at once; every read sees every line added before it began."""
    key = "a" * 96
    added: list[str] = []
    stop = asyncio.Event()
    seen_counts: list[int] = []

    async def writer(name: str) -> None:
        async with target.store() as store:
            index = ChecksumIndex(store)
            for n in range(40):
                item = entry(n, writer=name)
                await index.add(item)
                added.append(index.line_of(item))
                await asyncio.sleep(0)

    async def compactor() -> None:
        async with target.store() as store:
            index = ChecksumIndex(store)
            while not stop.is_set():
                await index.compact(key)
                await asyncio.sleep(0)

    async def reader() -> None:
        async with target.store() as store:
            index = ChecksumIndex(store)
            while not stop.is_set():
                before = set(added)
                lines = await index.lines(key)
                assert len(lines) == len(set(lines)), "a line was returned twice"
                assert before <= set(lines), "a line added earlier is missing"
                seen_counts.append(len(lines))
                await asyncio.sleep(0)

    async def writers() -> None:
        await asyncio.gather(writer("w1"), writer("w2"))
        stop.set()

    await asyncio.gather(writers(), compactor(), compactor(), reader())

    async with target.store() as store:
        index = ChecksumIndex(store)
        await index.compact(key)
        lines = await index.lines(key)
    assert set(lines) == set(added) == expected_lines(["w1", "w2"], 40)
    assert len(lines) == 80
    assert seen_counts, "the reader never ran"
    base = f"{PROGRAM}/index/sha384_checksum/{key}"
    assert index_keys(target, "sha384_checksum", key) == [base]  # every line object folded
    assert sorted(target.read(base).decode().splitlines()) == sorted(added)


async def test_compaction_is_safe_against_a_concurrent_one(s3_target: Target) -> None:
    target = s3_target
    key = "a" * 96
    async with target.store() as first, target.store() as second:
        for n in range(30):
            await ChecksumIndex(first).add(entry(n, writer="w"))
        folded = await asyncio.gather(
            ChecksumIndex(first).compact(key), ChecksumIndex(second).compact(key)
        )
        lines = await ChecksumIndex(first).lines(key)
    assert set(lines) == expected_lines(["w"], 30)
    assert 30 <= sum(folded) <= 60  # the winner folded all 30; a loser folded none or the same
