"""The fetcher's journal: after a crash, a stored item has all its index lines and its fetch-log
line, or none, so a resumed run leaves exactly the lines a run without the crash leaves.

An item is stored in steps: its body, a line per index, then its fetch-log line, which marks it
done (a resumed run skips the URLs logged as stored). A process killed between its first index
line and its log line would leave lines that the resumed run, fetching the URL again, doubles.
So before its first index line, the item's record (its log line to be) is appended to the
journal; before fetching anything, a resumed run completes every journaled item that has no log
line (:func:`repair_shard`): it adds each index line that is missing, rebuilt from the record
byte for byte as the killed run wrote it, then the log line.

Each process has its own journal file, ``.{fetch_id}_{offset}_{limit}.journal/{pid}`` beside the
shard's lock (:func:`~scrapeflow.storage.shard_state_dir`): a record is one ``O_APPEND`` write,
nothing buffered (a killed process leaves all it wrote). The file is emptied whenever its process
has no item between journal and log, so it stays small, and a run that ends normally removes it.
Only :class:`LineIndex` indexes can be checked for a line; any other index gets its line again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from scrapeflow.errors import InputError, StorageError
from scrapeflow.storage._fetchlog import FetchLog, FetchRecord, shard_records
from scrapeflow.storage._index import LineIndex
from scrapeflow.storage._lock import shard_state_dir
from scrapeflow.storage._private import FILE_MODE, makedirs_private
from scrapeflow.storage._store import BlobStore
from scrapeflow.storage._types import Index, IndexEntry, check_name, split_lines

__all__ = ["IndexJournal", "journal_dir", "read_journal", "remove_journal", "repair_shard"]

_OPEN = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
_EMPTY_AT = 1 << 16  # bytes: empty the file when idle past this, not after every item


def journal_dir(
    store: BlobStore, fetch_id: str, offset: int, limit: int, spool_dir: str | Path | None = None
) -> str:
    """The directory of the shard's journal files (one per process)."""
    check_name("fetch id", fetch_id)
    return os.path.join(shard_state_dir(store, spool_dir), f".{fetch_id}_{offset}_{limit}.journal")


class IndexJournal:
    """One process's journal of a shard: :meth:`begin` an item before its first index line,
    :meth:`end` it after its log line.

    >>> journal = IndexJournal(store, "48213", 0, 500).open()  # doctest: +SKIP
    >>> journal.begin(record); ...index lines, log line...; journal.end()  # doctest: +SKIP
    """

    def __init__(
        self,
        store: BlobStore,
        fetch_id: str,
        offset: int,
        limit: int,
        *,
        spool_dir: str | Path | None = None,
    ) -> None:
        self.directory = journal_dir(store, fetch_id, offset, limit, spool_dir)
        self.path = os.path.join(self.directory, str(os.getpid()))
        self._fd: int | None = None
        self._open_items = 0
        self._size = 0

    def __repr__(self) -> str:
        return f"IndexJournal({self.path!r})"

    def open(self) -> IndexJournal:
        """Create (or reopen) this process's journal file."""
        try:
            makedirs_private(self.directory)
            self._fd = os.open(self.path, _OPEN, FILE_MODE)
        except OSError as exc:
            raise StorageError(f"cannot open the journal {self.path}: {exc.strerror}") from None
        self._size = os.fstat(self._fd).st_size
        return self

    def begin(self, record: FetchRecord | bytes) -> None:
        """Journal ``record`` (a stored item): call before the item's first index line.

        ``record`` may be given as its JSON line already (``record.to_json()``), which the
        fetcher also writes to the log: encoded once, not twice."""
        if self._fd is None:
            raise StorageError(f"{self!r} is not open")
        data = record if isinstance(record, bytes) else record.to_json()
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            raise StorageError(f"cannot append to {self.path}: {exc.strerror}") from None
        if written != len(data):  # a full disk: the cut record is skipped when read
            raise StorageError(f"append to {self.path}: wrote {written} of {len(data)} bytes")
        self._size += written
        self._open_items += 1

    def end(self) -> None:
        """An item begun here has its log line: call after writing it."""
        self._open_items -= 1
        if self._open_items == 0 and self._size >= _EMPTY_AT and self._fd is not None:
            # Every record here has its log line: none is needed any more.
            os.ftruncate(self._fd, 0)
            self._size = 0

    def close(self) -> None:
        """Stop journaling (the file stays: the run removes it when it ends normally)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def read_journal(directory: str) -> list[FetchRecord]:
    """Every record in the journal files of ``directory``; a record cut by a crash is skipped."""
    records: list[FetchRecord] = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return records
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, IsADirectoryError):
            continue
        for line in split_lines(data):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                records.append(FetchRecord.from_json(line))
    return records


def remove_journal(directory: str) -> None:
    """Remove the shard's journal (every item in it has its log line)."""
    shutil.rmtree(directory, ignore_errors=True)


async def repair_shard(
    store: BlobStore,
    fetch_id: str,
    offset: int,
    limit: int,
    indexes: Sequence[Index],
    *,
    spool_dir: str | Path | None = None,
) -> list[IndexEntry]:
    """Complete the items a killed run of the shard journaled but did not log: add their
    missing index lines, then their log lines; then remove the journal. Returns the entries
    completed. Call it holding the shard's lock, before fetching."""
    directory = journal_dir(store, fetch_id, offset, limit, spool_dir)
    journaled = read_journal(directory)
    completed: list[IndexEntry] = []
    if journaled:
        logged = {
            _identity(r)
            for r in await shard_records(store, fetch_id, offset, limit, spool_dir=spool_dir)
        }
        cut = {_identity(r): r for r in journaled if r.stored and _identity(r) not in logged}
        if cut:
            async with FetchLog(store, fetch_id, offset, limit, spool_dir=spool_dir) as log:
                for record in cut.values():
                    entry = _entry(record, fetch_id)
                    for index in indexes:
                        try:
                            missing = not await _has_line(index, entry)
                        except InputError:
                            continue  # a line that cannot be built was never written either
                        if missing:
                            await index.add(entry)
                    await log.write(record)
                    completed.append(entry)
    remove_journal(directory)
    return completed


def _identity(record: FetchRecord) -> tuple[str, datetime, int]:
    """A fetch: its URL, its start to the microsecond and its duration to the nanosecond."""
    return record.requested_url, record.started, record.duration_ns


def _entry(record: FetchRecord, fetch_id: str) -> IndexEntry:
    return IndexEntry(
        checksum=record.checksum or "",
        content_location=record.location or "",
        requested_link=record.requested_url,
        final_link=record.final_url or record.requested_url,
        fetch_started=record.started,
        fetch_duration_ns=record.duration_ns,
        parser_name=record.processor,
        fetch_id=fetch_id,
        parser_meta=record.meta,
    )


async def _has_line(index: Index, entry: IndexEntry) -> bool:
    if not isinstance(index, LineIndex):
        return False  # no way to tell: add it again (an index is told each fetch at least once)
    return index.line_of(entry) in await index.lines(index.key_of(entry))
