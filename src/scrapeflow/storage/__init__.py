"""Content-addressed storage for fetched pages, on local disk or S3 (gofetch's layout).

Under ``{root}/{program}/``::

    sha384_content/{checksum}                    bodies, unchanged, stored once
    index/sha384_checksum/{checksum}             the canonical index: a line per fetch
    index/url_sha384/{key[:2]}.tsv               local disk: the by-URL index (key: SHA-384 of
                                                 the URL), an append-only file per shard
    index/url_sha384/{key[:2]}/{key}             S3: the by-URL index, a line set per URL
    index/{name}/{key}.d/{fetch_id}-{time}-{id}  S3 only: index lines not yet compacted
    logs/{yyyy-mm-dd}_{fetch_id}_{offset}_{limit}  a fetch log per run, a JSON line per URL
    warc/{fetch_id}_{offset}_{limit}.warc.gz     optional WARC records (extra ``warc``)

>>> async with BlobStore("s3://bucket/crawls", "gofetch") as store:  # doctest: +SKIP
...     stored = await store.put(body)
...     for index in make_indexes(["url_sha384"], store):
...         await index.add(IndexEntry(stored.checksum, stored.location, url, final, ...))

**No index line is ever lost**, with any number of fetchers on any number of machines adding
lines for the same key at once:

* *Local disk* appends each line with ``O_APPEND`` in a single ``os.write``. POSIX makes the
  move to the end and the write one atomic step for every appender, and a local filesystem
  writes a regular file under the inode lock, so lines never interleave or overwrite each
  other, across threads and processes. (Not NFS: its clients emulate ``O_APPEND``.)
* *S3* cannot append, and a read-modify-write of one object would lose the line of whichever
  writer wrote first. So a line is written as **its own object**,
  ``{index key}.d/{fetch_id}-{time_ns}-{uuid4}`` with ``If-None-Match: *``: unique on every
  machine, never overwriting anything. ``lines(key)`` lists those objects, reads them, then
  reads the base object ``{index key}``, and returns the union.
* The by-URL index on local disk appends ``{key}\\t{line}`` records to one file per shard
  (:class:`UrlIndex`): no file per URL. A torn record (a writer killed inside its write) is
  never read and hides no other; compaction rewrites a shard file atomically (temp file and
  rename) under an exclusive ``flock`` that appenders wait for.
* ``await index.compact(key)`` folds line objects into the base: it notes the base's ETag,
  reads the line objects, writes base + lines with ``If-Match`` (``If-None-Match: *`` when there
  was no base), and only then deletes the line objects **it read**. A line added meanwhile is
  not among them and stays; a concurrent compaction makes the conditional write fail, and the
  loser deletes nothing. A reader that finds a listed line object gone reads the base after it,
  which already holds that line (the base is written before any delete).
* Between that write and the deletes, a line exists in both places, so ``lines()`` returns each
  distinct line once. A line is a fetch (its start time to the microsecond, its duration to the
  nanosecond), so an exact duplicate is the same fetch recorded twice (a compaction half-way, or
  an at-least-once retry): collapsing it is the idempotence every queue here needs.

S3 needs strong read-after-write consistency (AWS since 2020, MinIO) and, for concurrent
compactions, conditional writes (AWS since 2024, MinIO, R2); on a store without ``If-Match``
run compaction from one place at a time. Adding lines never depends on either.

**One run of a shard at a time, exact after a crash**: :class:`ShardLock` (a ``flock`` beside the
shard's log, inherited by the run's workers) refuses a second run of a shard with
:class:`FetchInProgress`; :class:`IndexJournal` records an item before its index lines, and
:func:`repair_shard` completes, line for line, what a killed run left between its index lines and
its log line. On local disk what the store creates is owner-only (``0600`` files, ``0700``
directories). See ``docs/storage.md`` §5 and §6.
"""

from scrapeflow.storage._fetchlog import (
    FetchLog,
    FetchRecord,
    default_spool_dir,
    fetch_log_name,
    fetch_log_names,
    logged_urls,
    read_fetch_log,
    shard_records,
)
from scrapeflow.storage._index import (
    CANONICAL_INDEX,
    ChecksumIndex,
    IndexFactory,
    IndexRegistry,
    LineIndex,
    UrlIndex,
    index_names,
    make_indexes,
    register_index,
)
from scrapeflow.storage._journal import IndexJournal, journal_dir, remove_journal, repair_shard
from scrapeflow.storage._lock import FetchInProgress, ShardLock, shard_state_dir
from scrapeflow.storage._store import BlobStore
from scrapeflow.storage._types import Index, IndexEntry, StoredContent, sha384_hex
from scrapeflow.storage._warc import WarcWriter

__all__ = [
    "CANONICAL_INDEX",
    "BlobStore",
    "ChecksumIndex",
    "FetchInProgress",
    "FetchLog",
    "FetchRecord",
    "Index",
    "IndexEntry",
    "IndexFactory",
    "IndexJournal",
    "IndexRegistry",
    "LineIndex",
    "ShardLock",
    "StoredContent",
    "UrlIndex",
    "WarcWriter",
    "default_spool_dir",
    "fetch_log_name",
    "fetch_log_names",
    "index_names",
    "journal_dir",
    "logged_urls",
    "make_indexes",
    "read_fetch_log",
    "register_index",
    "remove_journal",
    "repair_shard",
    "sha384_hex",
    "shard_records",
    "shard_state_dir",
]
