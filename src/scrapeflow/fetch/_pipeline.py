"""One process's share of a fetch: fetchers and store writers, joined by a bounded queue.

``concurrent_fetches`` fetchers send requests through the HTTP layer (retries, slots, proxies)
and hand whole answers to ``concurrent_writers`` writers, which store 2xx bodies unchanged under
their SHA-384, add index lines, append WARC records, push to Redis and log every URL's outcome.
A slow store does not stall the network side until the queue (four answers per fetcher) is
full. URLs that an earlier run of the same fetch id stored are skipped (resume).

A stored item is journaled before its index lines and marked done by its log line, so a run
killed half-way through an item is completed exactly by the next run (``storage``'s journal).
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
    Index,
    IndexEntry,
    IndexJournal,
    WarcWriter,
    logged_urls,
    make_indexes,
)

__all__ = ["STOP_GRACE", "FetchReport", "fetch_items", "fetch_share"]

STOP_GRACE = 4.0
"""Seconds a stopped process gives the items it is storing to finish."""

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
    """Fetch ``items`` into the store of ``settings``, skipping what an earlier run of the shard
    stored. ``log_limit`` names the run's log.

    This is one process's work. The run around it — the shard's lock, completing what a killed
    run left half-stored, the processes — is :class:`~scrapeflow.fetch.FetchRun` (or
    :func:`~scrapeflow.fetch.run_fetch`): call this directly only if nothing else can run the
    same shard meanwhile.
    """
    report = FetchReport(items=len(items))
    async with BlobStore(
        settings.store, settings.program, storage_options=settings.storage_options
    ) as store:
        done_before = await logged_urls(store, settings.fetch_id, settings.offset, log_limit)
        todo = [item for item in items if item.url not in done_before]
        report.skipped = len(items) - len(todo)
        for _ in range(report.skipped):
            _progress(on_progress, "skipped")
        await fetch_share(
            store,
            settings,
            todo,
            log_limit=log_limit,
            report=report,
            on_progress=on_progress,
            http=http,
        )
    return report


async def fetch_share(
    store: BlobStore,
    settings: FetchSettings,
    todo: Sequence[FetchItem],
    *,
    log_limit: int,
    report: FetchReport,
    on_progress: ProgressCallback | None = None,
    http: HttpConfig | None = None,
) -> None:
    """Fetch every item of ``todo`` (none is skipped) into ``store``, counting in ``report``.

    Never more fetchers or writers than items: two URLs get two fetchers, whatever
    ``concurrent_fetches`` says.
    """
    if not todo:
        return
    shard = (settings.fetch_id, settings.offset, log_limit)
    fetchers = min(settings.concurrent_fetches, len(todo))
    writers = min(settings.concurrent_writers, len(todo))
    async with contextlib.AsyncExitStack() as stack:
        log = await stack.enter_async_context(FetchLog(store, *shard))
        journal = IndexJournal(store, *shard).open()
        stack.callback(journal.close)
        warc = await stack.enter_async_context(WarcWriter(store, *shard)) if settings.warc else None
        redis = await stack.enter_async_context(_redis(settings)) if settings.redis_url else None
        indexes = make_indexes(settings.indexes, store)
        config = http or HttpConfig(max_connections=fetchers, host=HostPolicy(concurrency=fetchers))
        client = await stack.enter_async_context(HttpClient(config))
        queue: asyncio.Queue[_Fetched | None] = asyncio.Queue(fetchers * 4)
        pending = iter(todo)
        sinks = _Sinks(store, indexes, log, journal, warc, redis)

        stopping = False
        storing: set[asyncio.Task[None] | None] = set()  # the writers inside an item

        async def fetch_all() -> None:
            async def fetcher() -> None:
                for item in pending:
                    await queue.put(await _fetch(client, item))

            await asyncio.gather(*(fetcher() for _ in range(fetchers)))
            for _ in range(writers):
                await queue.put(None)

        async def writer() -> None:
            me = asyncio.current_task()
            while not stopping and (fetched := await queue.get()) is not None:
                storing.add(me)
                try:
                    outcome = await _store(fetched, sinks, settings)
                finally:
                    storing.discard(me)
                _count(report, fetched, outcome)
                _progress(on_progress, outcome)

        tasks = [asyncio.create_task(fetch_all())]
        tasks += [asyncio.create_task(writer()) for _ in range(writers)]
        try:
            # asyncio.wait, not gather: cancelling this wait must not cancel a writer mid-item.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if (error := task.exception()) is not None:
                    raise error
        except BaseException:
            # Cancelled (Ctrl-C, SIGTERM) or failed: stop fetching and taking items, and give
            # the items being stored STOP_GRACE seconds to finish. An item cut after that is
            # completed by the next run (the journal); one fetched but not stored is fetched
            # again.
            stopping = True
            for task in tasks:
                if task not in storing:
                    task.cancel()
            await asyncio.wait(tasks, timeout=STOP_GRACE)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


@dataclass(frozen=True, slots=True)
class _Sinks:
    """Where a stored item goes."""

    store: BlobStore
    indexes: list[Index]
    log: FetchLog
    journal: IndexJournal
    warc: WarcWriter | None
    redis: Any


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


async def _store(fetched: _Fetched, sinks: _Sinks, settings: FetchSettings) -> str:
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
        await sinks.log.write(record(error=error))
        return "failed"
    stored = await sinks.store.put(response.body)
    done = record(checksum=stored.checksum, location=stored.location)
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
    # From the journal line to the log line, a crash is repaired by the next run: its index
    # lines and its log line end up written once each (see scrapeflow.storage's journal).
    line = done.to_json()  # the journal's record and the log's line: the same bytes
    sinks.journal.begin(line)
    for index in sinks.indexes:
        await index.add(entry)
    if sinks.warc is not None:
        await sinks.warc.write(
            item.url,
            status=response.status,
            headers=list(response.headers.items()),
            body=response.body,
            final_url=response.url,
            started=fetched.started,
        )
    if sinks.redis is not None:
        await sinks.redis.push(entry)
    await sinks.log.write(line)
    sinks.journal.end()
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


def redis_stream(settings: FetchSettings) -> str:
    """The Redis stream stored items are announced on."""
    return f"scrapeflow:{settings.program}:fetched"


def _progress(callback: ProgressCallback | None, outcome: str) -> None:
    if callback is not None:
        callback(outcome)


@contextlib.asynccontextmanager
async def _redis(settings: FetchSettings) -> AsyncIterator[Any]:
    from scrapeflow.fetch._redis import RedisPush

    push = RedisPush(settings.redis_url or "", stream=redis_stream(settings))
    try:
        await push.connect()
        yield push
    finally:
        await push.close()
