"""The fetch log: one JSON line per URL outcome, one log per run and shard, for processors.

At ``{root}/{program}/logs/{yyyy-mm-dd}_{fetch_id}_{offset}_{limit}`` (the run's start date,
UTC). On local disk the log is appended in place; on S3 it is spooled in a local file and
uploaded whole when the last writer closes it (:mod:`._spool`). A killed run leaves every line
it wrote (in the log, or in the spool, which the next run of the shard resumes and uploads).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from scrapeflow._util.redact import redact
from scrapeflow.errors import ConfigError, ObjectNotFound, StorageCorrupt
from scrapeflow.storage._spool import SharedAppendFile, trim_cut_line
from scrapeflow.storage._store import BlobStore
from scrapeflow.storage._types import check_name, iso_utc, split_lines

__all__ = [
    "FetchLog",
    "FetchRecord",
    "default_spool_dir",
    "fetch_log_name",
    "fetch_log_names",
    "logged_urls",
    "read_fetch_log",
    "shard_records",
    "spool_path",
]

_LOG_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})_(.+)_(\d+)_(\d+)")


@dataclass(frozen=True, slots=True)
class FetchRecord:
    """One URL's outcome. ``checksum`` and ``location`` are set when the body was stored;
    ``error`` says why not otherwise (secrets in it are masked when written). ``processor`` and
    ``meta`` are the processor name and meta given with the URL."""

    requested_url: str
    started: datetime
    duration_ns: int
    final_url: str | None = None
    status: int | None = None
    checksum: str | None = None
    location: str | None = None
    error: str | None = None
    processor: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def stored(self) -> bool:
        """Whether the body was stored (a resumed run need not fetch this URL again)."""
        return self.checksum is not None and self.error is None

    def to_json(self) -> bytes:
        """The record as one JSON line (with the newline)."""
        return orjson.dumps(
            {
                "requested_url": self.requested_url,
                "final_url": self.final_url,
                "status": self.status,
                "checksum": self.checksum,
                "location": self.location,
                "error": None if self.error is None else redact(self.error),
                "started": iso_utc(self.started),
                "duration_ns": self.duration_ns,
                "processor": self.processor,
                "meta": dict(self.meta),
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )

    @classmethod
    def from_json(cls, line: bytes) -> FetchRecord:
        """Parse a line written by :meth:`to_json` (``ValueError``/``KeyError`` if it is not)."""
        data = orjson.loads(line)
        return cls(
            requested_url=data["requested_url"],
            started=datetime.fromisoformat(data["started"]),
            duration_ns=int(data["duration_ns"]),
            final_url=data.get("final_url"),
            status=data.get("status"),
            checksum=data.get("checksum"),
            location=data.get("location"),
            error=data.get("error"),
            processor=data.get("processor") or "",
            meta=data.get("meta") or {},
        )


def fetch_log_name(fetch_id: str, offset: int, limit: int, day: date) -> str:
    """``{yyyy-mm-dd}_{fetch_id}_{offset}_{limit}``, gofetch's log name."""
    check_name("fetch id", fetch_id)
    for what, value in (("offset", offset), ("limit", limit)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"fetch log {what} must be an integer >= 0, not {value!r}")
    return f"{day:%Y-%m-%d}_{fetch_id}_{offset}_{limit}"


def default_spool_dir() -> Path:
    """Where S3 fetch logs and WARC files are spooled: ``$XDG_CACHE_HOME/scrapeflow/spool``
    (``~/.cache/…``). It must survive a crash of the run, so not a temp directory."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "scrapeflow" / "spool"


def spool_path(store: BlobStore, key: str, spool_dir: str | Path | None) -> str:
    """The spool file of the store-relative ``key`` (one directory per store root)."""
    root = hashlib.sha256(store.root.encode()).hexdigest()[:16]
    return os.path.join(spool_dir or default_spool_dir(), root, *key.split("/"))


class FetchLog:
    """The log of one run of one shard; every process of the run may open it (same name).

    >>> async with FetchLog(store, "48213", offset=0, limit=500) as log:  # doctest: +SKIP
    ...     await log.write(FetchRecord(url, started, duration_ns, status=200, checksum=c))

    ``started`` (default: now) gives the date in the name; ``spool_dir`` is where an S3 log
    is built until it is uploaded (default :func:`default_spool_dir`).
    """

    def __init__(
        self,
        store: BlobStore,
        fetch_id: str,
        offset: int,
        limit: int,
        *,
        started: datetime | None = None,
        spool_dir: str | Path | None = None,
    ) -> None:
        if started is not None:
            iso_utc(started)  # refuses a naive datetime: its date in UTC would be a guess
        day = (started or datetime.now(UTC)).astimezone(UTC).date()
        self.store = store
        self.fetch_id, self.offset, self.limit = fetch_id, offset, limit
        self.name = fetch_log_name(fetch_id, offset, limit, day)
        self._key = store.key("logs", self.name)
        self.location = store._backend.location(self._key)
        self._spool_dir = spool_dir
        self._file: SharedAppendFile | None = None
        self.written = 0

    def __repr__(self) -> str:
        return f"FetchLog({self.location!r}, written={self.written})"

    async def open(self) -> FetchLog:
        """Start appending (resuming the shard's log of the same day if there is one)."""
        backend = self.store._backend
        local = backend.local_path(self._key)
        if local is not None:
            self._file = await SharedAppendFile.open(local, seed=None, trim=trim_cut_line)
            return self
        path = spool_path(self.store, self._key, self._spool_dir)
        await self._publish_leftovers(os.path.dirname(path))

        async def seed(tmp: str) -> bool:
            return await backend.download(self._key, tmp)

        self._file = await SharedAppendFile.open(path, seed=seed, trim=trim_cut_line)
        return self

    async def write(self, record: FetchRecord | bytes) -> None:
        """Append ``record`` (or its line, ``record.to_json()``, when the caller has it already):
        one write, on disk (in the kernel) when this returns."""
        if self._file is None:
            raise ConfigError(f"{self!r} is not open: use 'async with' or await open()")
        self._file.append(record if isinstance(record, bytes) else record.to_json())
        self.written += 1

    async def close(self) -> None:
        """Stop writing; on S3 the last writer of the run uploads the log."""
        file, self._file = self._file, None
        if file is not None:
            local = self.store._backend.local_path(self._key) is not None
            await file.close(None if local else self._upload)

    async def __aenter__(self) -> FetchLog:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _upload(self, path: str) -> None:
        await self.store._backend.upload(path, self._key)

    async def _publish_leftovers(self, directory: str) -> None:
        """Upload the spools a crashed run of this shard left on an earlier day."""
        for name in _shard_logs(_local_names(directory), self.fetch_id, self.offset, self.limit):
            if name == self.name:
                continue  # today's: this run resumes it
            leftover = os.path.join(directory, name)
            file = await SharedAppendFile.open(leftover, seed=None, trim=trim_cut_line)
            await file.close(functools.partial(self._upload_as, name))

    async def _upload_as(self, name: str, path: str) -> None:
        await self.store._backend.upload(path, self.store.key("logs", name))


async def read_fetch_log(store: BlobStore, name: str) -> list[FetchRecord]:
    """The records of the fetch log called ``name`` (see :func:`fetch_log_names`)."""
    key = store.key("logs", check_name("fetch log name", name))
    data = await store._backend.read(key)
    if data is None:
        raise ObjectNotFound(f"no fetch log {name} in {store.root}/{store.program}/logs")
    return _parse(data, store._backend.location(key))


async def fetch_log_names(
    store: BlobStore,
    fetch_id: str | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> list[str]:
    """Names of the stored fetch logs, oldest day first; only one shard's if all of
    ``fetch_id``, ``offset`` and ``limit`` are given, one run's if ``fetch_id`` is."""
    names = [
        n for n in await store._backend.list_names(store.key("logs")) if _LOG_NAME.fullmatch(n)
    ]
    if fetch_id is not None:
        names = [n for n in names if _parse_name(n)[1] == fetch_id]
    if offset is not None and limit is not None:
        names = [n for n in names if _parse_name(n)[2:] == (offset, limit)]
    return names


async def logged_urls(
    store: BlobStore,
    fetch_id: str,
    offset: int,
    limit: int,
    *,
    spool_dir: str | Path | None = None,
) -> set[str]:
    """The requested URLs that earlier runs of this shard stored successfully: a resumed run
    skips them. Includes what a crashed run left in its spool (S3 stores)."""
    records = await shard_records(store, fetch_id, offset, limit, spool_dir=spool_dir)
    return {r.requested_url for r in records if r.stored}


async def shard_records(
    store: BlobStore,
    fetch_id: str,
    offset: int,
    limit: int,
    *,
    spool_dir: str | Path | None = None,
) -> list[FetchRecord]:
    """Every record the runs of this shard logged (any day), with what a crashed run left in
    its spool (S3 stores)."""
    records: list[FetchRecord] = []
    for name in await fetch_log_names(store, fetch_id, offset, limit):
        records += await read_fetch_log(store, name)
    logs_key = store.key("logs")
    if store._backend.local_path(logs_key) is None:
        directory = os.path.dirname(spool_path(store, f"{logs_key}/x", spool_dir))
        for name in _shard_logs(_local_names(directory), fetch_id, offset, limit):
            path = os.path.join(directory, name)
            try:
                data = _read_local(path)
            except FileNotFoundError:
                continue  # uploaded meanwhile: read from the store above
            records += _parse(data, path)
    return records


def _parse(data: bytes, where: str) -> list[FetchRecord]:
    records = []
    for number, line in enumerate(split_lines(data), start=1):
        try:
            records.append(FetchRecord.from_json(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageCorrupt(
                f"{where} line {number} is not a fetch record ({type(exc).__name__})"
            ) from None
    return records


def _parse_name(name: str) -> tuple[str, str, int, int]:
    match = _LOG_NAME.fullmatch(name)
    if match is None:
        return ("", "", -1, -1)
    day, fetch_id, offset, limit = match.groups()
    return day, fetch_id, int(offset), int(limit)


def _shard_logs(names: list[str], fetch_id: str, offset: int, limit: int) -> list[str]:
    return [n for n in names if _parse_name(n)[1:] == (fetch_id, offset, limit)]


def _read_local(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _local_names(directory: str) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(directory) if e.is_file())
    except FileNotFoundError:
        return []
