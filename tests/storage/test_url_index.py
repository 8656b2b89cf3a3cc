"""The by-URL index as a user sees it: "which content did URL X give", after fetches, after a
torn record, after compaction, on a store of an older layout, and with writers in parallel.

On local disk its lines live in one append-only file per shard (``url_sha384/{key[:2]}.tsv``),
not a file per URL; on S3 a URL keeps its own line set. Both read the older layouts."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
from pathlib import Path

from scrapeflow.storage import BlobStore, IndexEntry, UrlIndex, sha384_hex
from tests.storage import add_url_lines, entry, urls_in_shard
from tests.storage.conftest import PROGRAM, Target


def fetched(url: str, n: int = 0, *, checksum: str = "c" * 96) -> IndexEntry:
    return dataclasses.replace(
        entry(n, writer="w", checksum=checksum, fetch_id="48213"), requested_link=url
    )


def line(item: IndexEntry) -> str:
    return UrlIndex.__new__(UrlIndex).line_of(item)


def index_dir(store: Path) -> Path:
    return store / PROGRAM / "index" / "url_sha384"


async def test_which_content_a_url_gave_after_many_fetches(target: Target) -> None:
    urls = [f"http://127.0.0.1/page/{n}" for n in range(600)]
    async with target.store() as store:
        index = UrlIndex(store)
        for url in urls:
            await index.add(fetched(url, checksum=sha384_hex(url)))
        await index.add(fetched(urls[7], 1, checksum="d" * 96))  # fetched again, other content

        found = await index.lines(UrlIndex.key_for(urls[7]))
        assert [row.split("\t")[1] for row in found] == [sha384_hex(urls[7]), "d" * 96]
        assert await index.lines(UrlIndex.key_for("http://127.0.0.1/never")) == []
    if target.root is not None:  # 600 URLs, at most 256 files: one per shard, none per URL
        files = sorted(p.name for p in index_dir(target.root).rglob("*") if p.is_file())
        assert 200 < len(files) <= 256 and all(len(name) == 6 for name in files), files[:3]


async def test_a_torn_record_is_skipped_and_hides_no_other_line(tmp_path: Path) -> None:
    """A writer killed inside its write leaves a record without its newline; the next writer's
    record follows it on the same line. The torn one is never read; the next one is."""
    first, second = urls_in_shard("ab", "w", 2)
    async with BlobStore(str(tmp_path), PROGRAM) as store:
        index = UrlIndex(store)
        await index.add(fetched(first, 0))
        whole = line(fetched(first, 1))
        shard = index.location(UrlIndex.key_for(first))
        with open(shard, "ab") as f:  # what kill -9 inside the write leaves
            f.write(f"{UrlIndex.key_for(first)}\t{whole[:40]}".encode())
        assert await index.lines(UrlIndex.key_for(first)) == [line(fetched(first, 0))]

        await index.add(fetched(second, 2))  # another process appends after the torn record

        assert await index.lines(UrlIndex.key_for(first)) == [line(fetched(first, 0))]
        assert await index.lines(UrlIndex.key_for(second)) == [line(fetched(second, 2))]
        # Compaction drops the torn bytes and keeps every whole line.
        assert await index.compact(UrlIndex.key_for(second)) == 0
        assert Path(shard).read_bytes().decode().splitlines() == [
            f"{UrlIndex.key_for(first)}\t{line(fetched(first, 0))}",
            f"{UrlIndex.key_for(second)}\t{line(fetched(second, 2))}",
        ]
        assert await index.lines(UrlIndex.key_for(second)) == [line(fetched(second, 2))]


def _write_old_layout(root: Path, url: str, lines: list[str], *, flat: bool) -> Path:
    """What an earlier release wrote: a file per URL, flat or in a subdirectory."""
    key = UrlIndex.key_for(url)
    path = index_dir(root) / (key if flat else f"{key[:2]}/{key}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{row}\n" for row in lines))
    return path


async def test_a_store_of_the_older_layouts_is_read_then_folded(tmp_path: Path) -> None:
    fanned, flat, both = urls_in_shard("5e", "old", 3)
    old = {
        fanned: [line(fetched(fanned, 0))],
        flat: [line(fetched(flat, 1))],
        both: [line(fetched(both, 2)), line(fetched(both, 3))],
    }
    files = [
        _write_old_layout(tmp_path, fanned, old[fanned], flat=False),
        _write_old_layout(tmp_path, flat, old[flat], flat=True),
        _write_old_layout(tmp_path, both, old[both][:1], flat=True),
        _write_old_layout(tmp_path, both, old[both][1:], flat=False),
    ]
    async with BlobStore(str(tmp_path), PROGRAM) as store:
        index = UrlIndex(store)
        await index.add(fetched(both, 4))  # a fetch since: into the shard file
        expected = dict(old)
        expected[both] = [*old[both], line(fetched(both, 4))]
        for url, rows in expected.items():
            assert sorted(await index.lines(UrlIndex.key_for(url))) == sorted(rows)

        assert await index.compact(UrlIndex.key_for(flat)) == 4  # the shard's four old files

        assert not any(path.exists() for path in files)
        assert [p.name for p in index_dir(tmp_path).rglob("*") if p.is_file()] == ["5e.tsv"]
        for url, rows in expected.items():
            assert sorted(await index.lines(UrlIndex.key_for(url))) == sorted(rows)
        assert await index.compact(UrlIndex.key_for(flat)) == 0  # nothing left to fold


async def test_an_s3_store_keeps_a_line_set_per_url_and_reads_the_flat_one(
    s3_target: Target,
) -> None:
    """S3 cannot append: each URL keeps its own line objects, folded into its base object by
    compaction; a base object of the flat layout is read too."""
    url = "http://127.0.0.1/feed"
    key = UrlIndex.key_for(url)
    old = line(fetched(url, 0))
    async with s3_target.store() as store:
        await store._backend.replace(f"{PROGRAM}/index/url_sha384/{key}", f"{old}\n".encode())
        index = UrlIndex(store)
        await index.add(fetched(url, 1))
        assert await index.lines(key) == [old, line(fetched(url, 1))]
        assert await index.compact(key) == 1
        assert await index.lines(key) == [old, line(fetched(url, 1))]
    keys = [k for k in s3_target.object_keys() if "/url_sha384/" in k]
    assert sorted(keys) == sorted(
        [f"{PROGRAM}/index/url_sha384/{key}", f"{PROGRAM}/index/url_sha384/{key[:2]}/{key}"]
    )


def test_parallel_writer_processes_and_compactions_lose_no_line(tmp_path: Path) -> None:
    """Three processes append to one shard file while this one compacts it again and again:
    every line is there once, and the file holds nothing else."""
    count = 400
    urls = {name: urls_in_shard("ab", name, count) for name in ("p1", "p2", "p3")}
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=add_url_lines, args=(str(tmp_path), name, urls[name]))
        for name in urls
    ]

    async def compact_while_they_write() -> int:
        async with BlobStore(str(tmp_path), PROGRAM) as store:
            index = UrlIndex(store)
            compactions = 0
            while any(p.is_alive() for p in processes):
                await index.compact("ab")
                compactions += 1
                await asyncio.sleep(0.005)
            await index.compact("ab")
            return compactions

    for process in processes:
        process.start()
    try:
        compactions = asyncio.run(compact_while_they_write())
    finally:
        for process in processes:
            process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0, 0, 0]
    assert compactions > 1

    async def lookups() -> dict[str, list[str]]:
        async with BlobStore(str(tmp_path), PROGRAM) as store:
            index = UrlIndex(store)
            return {u: await index.lines(UrlIndex.key_for(u)) for us in urls.values() for u in us}

    found = asyncio.run(lookups())
    for name, listed in urls.items():
        for n, url in enumerate(listed):
            item = dataclasses.replace(entry(n, writer=name, fetch_id=name), requested_link=url)
            assert found[url] == [line(item)], url
    records = (index_dir(tmp_path) / "ab.tsv").read_bytes().splitlines()
    assert len(records) == 3 * count == len(set(records))
    assert os.listdir(index_dir(tmp_path)) == ["ab.tsv"]  # no temp file left behind


async def test_concurrent_tasks_of_one_process_lose_no_line(tmp_path: Path) -> None:
    writers = 2
    urls = urls_in_shard("0f", "t", 200)
    async with BlobStore(str(tmp_path), PROGRAM) as store:
        index = UrlIndex(store)

        async def write(part: list[str], offset: int) -> None:
            for n, url in enumerate(part):
                await index.add(fetched(url, offset + n))
                if n % 50 == 0:
                    await index.compact(UrlIndex.key_for(url))

        half = len(urls) // writers
        await asyncio.gather(
            *(write(urls[i * half : (i + 1) * half], i * half) for i in range(writers))
        )
        for n, url in enumerate(urls):
            assert await index.lines(UrlIndex.key_for(url)) == [line(fetched(url, n))]
