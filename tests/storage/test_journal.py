"""The fetcher's journal: an item cut between its index lines and its log line is completed once,
on local disk and on S3, and files the store creates on this machine are owner-only."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from scrapeflow.storage import (
    BlobStore,
    ChecksumIndex,
    FetchLog,
    FetchRecord,
    IndexEntry,
    IndexJournal,
    UrlIndex,
    journal_dir,
    make_indexes,
    read_fetch_log,
    repair_shard,
)
from tests._s3 import Target

SHARD = ("48213", 0, 3)
STARTED = datetime(2024, 5, 1, 8, 30, 15, 250001, tzinfo=UTC)


async def _stored(store: BlobStore, url: str, body: bytes) -> tuple[FetchRecord, IndexEntry]:
    stored = await store.put(body)
    record = FetchRecord(
        requested_url=url,
        started=STARTED,
        duration_ns=42_000_001,
        final_url=url,
        status=200,
        checksum=stored.checksum,
        location=stored.location,
        processor="RSS",
        meta={"n": 1},
    )
    entry = IndexEntry(
        stored.checksum, stored.location, url, url, STARTED, 42_000_001, "RSS", SHARD[0], {"n": 1}
    )
    return record, entry


async def test_a_cut_item_gets_its_missing_lines_once(store: BlobStore) -> None:
    logged, logged_entry = await _stored(store, "http://a.example/1", b"one")
    cut, cut_entry = await _stored(store, "http://a.example/2", b"two")
    indexes = make_indexes(["url_sha384"], store)
    journal = IndexJournal(store, *SHARD).open()
    async with FetchLog(store, *SHARD, started=STARTED) as log:
        # An item done in full: journal, index lines, log line.
        journal.begin(logged)
        for index in indexes:
            await index.add(logged_entry)
        await log.write(logged)
        journal.end()
        # An item cut by kill -9 after its first index line, before the second and the log.
        journal.begin(cut)
        await indexes[0].add(cut_entry)
    journal.close()

    completed = await repair_shard(store, *SHARD, indexes)
    again = await repair_shard(store, *SHARD, indexes)  # nothing left: the journal is gone

    assert [e.requested_link for e in completed] == ["http://a.example/2"] and again == []
    for entry in (logged_entry, cut_entry):
        assert len(await ChecksumIndex(store).lines(entry.checksum)) == 1
        assert len(await UrlIndex(store).lines(UrlIndex.key_for(entry.requested_link))) == 1
    records = [r for name in await _names(store) for r in await read_fetch_log(store, name)]
    assert sorted(r.requested_url for r in records) == ["http://a.example/1", "http://a.example/2"]
    assert [r for r in records if r.requested_url.endswith("/2")] == [cut]  # the same record
    assert not os.path.exists(journal_dir(store, *SHARD))


async def _names(store: BlobStore) -> list[str]:
    from scrapeflow.storage import fetch_log_names

    return await fetch_log_names(store, *SHARD)


async def test_no_journal_is_nothing_to_repair(store: BlobStore) -> None:
    assert await repair_shard(store, *SHARD, make_indexes([], store)) == []
    assert await _names(store) == []  # and no log made for nothing


async def test_what_the_store_makes_on_this_machine_is_owner_only(target: Target, tmp_path) -> None:
    """Local disk: bodies, index files, logs and their directories. S3: the spool of the log
    (on this machine until it is uploaded) and the journal."""
    previous = os.umask(0o022)
    try:
        async with target.store() as store:
            record, entry = await _stored(store, "http://a.example/1", b"one")
            for index in make_indexes(["url_sha384"], store):
                await index.add(entry)
            journal = IndexJournal(store, *SHARD).open()
            journal.begin(record)
            log = await FetchLog(store, *SHARD, started=STARTED).open()
            await log.write(record)
            made = [journal.path, os.path.dirname(journal.path)]
            spool = log._file.path if log._file is not None else ""
            made.append(spool)
            if target.root is not None:  # the store's root and all below, made by the store
                made += [str(target.root), *(str(p) for p in target.root.rglob("*"))]
            for path in made:
                mode = os.stat(path).st_mode & 0o777
                assert mode == (0o700 if os.path.isdir(path) else 0o600), f"{path}: {mode:o}"
            journal.close()
            await log.close()
    finally:
        os.umask(previous)
