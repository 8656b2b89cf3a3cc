"""One process's share of a fetch: fetchers and store writers, joined by a bounded queue.

``concurrent_fetches`` fetchers send requests through the HTTP layer (retries, slots, proxies)
and hand whole answers to ``concurrent_writers`` writers, which store 2xx bodies unchanged under
their SHA-384, add index lines, append WARC records, push to Redis and log every URL's outcome.
A slow store does not stall the network side until the queue (four answers per fetcher) is
full. URLs that an earlier run of the same fetch id stored are skipped (resume).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scrapeflow.errors import FetchError
from scrapeflow.fetch._input import FetchItem
from scrapeflow.fetch._settings import FetchSettings
from scrapeflow.http import HostPolicy, HttpClient, HttpConfig, Response
from scrapeflow.storage import (
    BlobStore,
    FetchLog,
    FetchRecord,
    IndexEntry,
    WarcWriter,
    logged_urls,
    make_indexes,
)

__all__ = ["FetchReport", "fetch_items"]

ProgressCallback = Callable[[str], None]  # called with "stored", "duplicate", "failed", "skipped"


@dataclass
class FetchReport:
    """What one process did."""

    items: int = 0
    stored: int = 0
    duplicates: int = 0
    failed: int = 0
    skipped: int = 0
    bytes: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, other: FetchReport) -> None:
        for name in ("items", "stored", "duplicates", "failed", "skipped", "bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for kind, count in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + count


@dataclass(frozen=True, slots=True)
class _Fetched:
    item: FetchItem
    started: datetime
    duration_ns: int
    response: Response | None
    error: str | None


async def fetch_items(
    settings: FetchSettings,
    items: Sequence[FetchItem],
    *,
    log_limit: int,
    on_progress: ProgressCallback | None = None,
    http: HttpConfig | None = None,
) -> FetchReport:
    """Fetch ``items`` into the store of ``settings``. ``log_limit`` names the run's log."""
    report = FetchReport(items=len(items))
    async with contextlib.AsyncExitStack() as stack:
        store = await stack.enter_async_context(
            BlobStore(settings.store, settings.program, storage_options=settings.storage_options)
        )
        shard = (settings.fetch_id, settings.offset, log_limit)
        done_before = await logged_urls(store, *shard)
        todo = [item for item in items if item.url not in done_before]
        report.skipped = len(items) - len(todo)
        for _ in range(report.skipped):
            _progress(on_progress, "skipped")
        if not todo:
            return report
        log = await stack.enter_async_context(FetchLog(store, *shard))
        warc = await stack.enter_async_context(WarcWriter(store, *shard)) if settings.warc else None
        redis = await stack.enter_async_context(_redis(settings)) if settings.redis_url else None
        indexes = make_indexes(settings.indexes, store)
        config = http or HttpConfig(
            max_connections=settings.concurrent_fetches,
            host=HostPolicy(concurrency=settings.concurrent_fetches),
        )
        client = await stack.enter_async_context(HttpClient(config))
        queue: asyncio.Queue[_Fetched | None] = asyncio.Queue(settings.concurrent_fetches * 4)
        pending = iter(todo)

        async def fetcher() -> None:
            for item in pending:
                await queue.put(await _fetch(client, item))

        async def writer() -> None:
            while (fetched := await queue.get()) is not None:
                outcome = await _store(fetched, store, indexes, log, warc, redis, settings)
                _count(report, fetched, outcome)
                _progress(on_progress, outcome)

        writers = [asyncio.create_task(writer()) for _ in range(settings.concurrent_writers)]
        try:
            await asyncio.gather(*(fetcher() for _ in range(settings.concurrent_fetches)))
        finally:
            for _ in writers:
                await queue.put(None)
            await asyncio.gather(*writers)
    return report


async def _fetch(client: HttpClient, item: FetchItem) -> _Fetched:
    started = datetime.now(UTC)
    clock = time.perf_counter_ns()
    try:
        response: Response | None = await client.request(
            "GET", item.url, session=client.pooled_session()
        )
        error = None
    except FetchError as exc:
        response, error = None, f"{type(exc).__name__}: {exc}"
    return _Fetched(item, started, time.perf_counter_ns() - clock, response, error)


async def _store(
    fetched: _Fetched,
    store: BlobStore,
    indexes: list[Any],
    log: FetchLog,
    warc: WarcWriter | None,
    redis: Any,
    settings: FetchSettings,
) -> str:
    item, response = fetched.item, fetched.response
    processor = item.processor or settings.default_processor

    def record(**outcome: Any) -> FetchRecord:
        return FetchRecord(
            requested_url=item.url,
            started=fetched.started,
            duration_ns=fetched.duration_ns,
            final_url=None if response is None else response.url,
            status=None if response is None else response.status,
            processor=processor,
            meta=item.meta,
            **outcome,
        )

    if response is None or not 200 <= response.status < 300:
        error = fetched.error if response is None else f"HTTP {response.status}"
        await log.write(record(error=error))
        return "failed"
    stored = await store.put(response.body)
    entry = IndexEntry(
        checksum=stored.checksum,
        content_location=stored.location,
        requested_link=item.url,
        final_link=response.url,
        fetch_started=fetched.started,
        fetch_duration_ns=fetched.duration_ns,
        parser_name=processor,
        fetch_id=settings.fetch_id,
        parser_meta=item.meta,
    )
    for index in indexes:
        await index.add(entry)
    if warc is not None:
        await warc.write(
            item.url,
            status=response.status,
            headers=list(response.headers.items()),
            body=response.body,
            final_url=response.url,
            started=fetched.started,
        )
    if redis is not None:
        await redis.push(entry)
    await log.write(record(checksum=stored.checksum, location=stored.location))
    return "stored" if stored.created else "duplicate"


def _count(report: FetchReport, fetched: _Fetched, outcome: str) -> None:
    if outcome == "failed":
        report.failed += 1
        kind = (fetched.error or "").split(":", 1)[0] or (
            f"HTTP {fetched.response.status}" if fetched.response else "error"
        )
        report.errors[kind] = report.errors.get(kind, 0) + 1
        return
    if fetched.response is not None:
        report.bytes += len(fetched.response.body)
    if outcome == "stored":
        report.stored += 1
    else:
        report.duplicates += 1


def _progress(callback: ProgressCallback | None, outcome: str) -> None:
    if callback is not None:
        callback(outcome)


@contextlib.asynccontextmanager
async def _redis(settings: FetchSettings) -> AsyncIterator[Any]:
    from scrapeflow.fetch._redis import RedisPush

    push = RedisPush(settings.redis_url or "", stream=f"scrapeflow:{settings.program}:fetched")
    try:
        await push.connect()
        yield push
    finally:
        await push.close()
