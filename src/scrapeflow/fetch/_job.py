"""The ``fetch`` job kind: a URL list sent to the service, fetched into the service's store.

The client gives URLs and how hard to go (within the service's limits); the store is the
service's (:attr:`~scrapeflow.config.Settings.jobs_store`, else the bulk fetcher's store, else
``{jobs_dir}/store``), never the client's. Each job is one shard of the bulk fetcher: fetch id
= the job's id, offset 0, limit = its URL count. So it holds the shard's lock, bodies land
unchanged under their SHA-384 with the configured indexes, a fetch log records every URL's
outcome (which is where a job's results are read from), and a job run again after a crash
completes what the killed run left half-stored and skips what it stored: content addressing
and the log make the rerun idempotent. Cancelled, it stops fetching at once; what it stored
stays, logged.

>>> jobs = FetchJobs.from_settings(Settings.load())  # doctest: +SKIP
>>> summary = await jobs.run(job_id, {"urls": ["https://example.com/"]}, print)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapeflow.errors import InputError, MissingSetting
from scrapeflow.fetch._input import FetchItem
from scrapeflow.fetch._pipeline import FetchReport, fetch_share
from scrapeflow.fetch._run import _check_redis, _push
from scrapeflow.fetch._settings import FetchSettings
from scrapeflow.http import EgressPolicy
from scrapeflow.jobs import JobContext, even_slices, part_ids, run_parts
from scrapeflow.storage import (
    BlobStore,
    FetchRecord,
    ShardLock,
    journal_dir,
    logged_urls,
    make_indexes,
    remove_journal,
    repair_shard,
    shard_records,
)
from scrapeflow.urllist import check_url

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = [
    "FETCH_KIND",
    "MAX_FETCH_JOB_CONCURRENCY",
    "MAX_FETCH_JOB_DELAY",
    "MAX_FETCH_JOB_PER_HOST",
    "MAX_FETCH_JOB_SHARDS",
    "MAX_FETCH_JOB_URLS",
    "MAX_JOB_URL_LENGTH",
    "FetchItemOutcome",
    "FetchJobParams",
    "FetchJobs",
]

FETCH_KIND = "fetch"
"""The job kind of :class:`FetchJobs`."""
MAX_FETCH_JOB_URLS = 10_000
"""URLs in one ``fetch`` job, at most (a bigger list is several jobs, or ``scrapeflow fetch``)."""
MAX_JOB_URL_LENGTH = 8_192
"""The longest URL a job takes (servers refuse longer request lines: nginx, Apache 8 KB)."""
MAX_FETCH_JOB_CONCURRENCY = 256
MAX_FETCH_JOB_PER_HOST = 64
MAX_FETCH_JOB_DELAY = 60.0
MAX_FETCH_JOB_SHARDS = 16
"""Shards one ``fetch`` job splits its list into, at most (each a job of its own, counted in
its API key's quota of active jobs beside the job)."""
_SHARD = "shard"  # the follow-up keys of a job's shards: shard-0, shard-1…

ProgressCallback = Callable[..., None]
"""Told a job's counters as they move: ``progress(done=10, total=300, failed=1)``."""


@dataclass(frozen=True, slots=True)
class FetchJobParams:
    """What a ``fetch`` job does, checked. Build with :meth:`from_params`.

    ``urls``: http(s) URLs, each once (a repeat is dropped); ``concurrency``: fetches in flight;
    ``per_host``: fetches in flight per host; ``delay``: seconds between two requests to one
    host; ``shards``: split the list into that many shards, each a ``fetch`` job of its own
    (any worker may take one). The counts are held within the service's own limits when the
    job runs.
    """

    urls: tuple[str, ...]
    concurrency: int = 16
    per_host: int = 8
    delay: float = 0.0
    shards: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FetchJobParams:
        """Check a job's params; :class:`InputError` names the first thing wrong."""
        if not isinstance(params, Mapping):
            raise InputError("a fetch job's params must be an object")
        unknown = sorted(set(params) - set(cls.__slots__))
        if unknown:
            raise InputError(f"unknown fetch job param(s): {', '.join(map(repr, unknown))}")
        urls = params.get("urls")
        if not isinstance(urls, list) or not 1 <= len(urls) <= MAX_FETCH_JOB_URLS:
            raise InputError(f"urls must be a list of 1 to {MAX_FETCH_JOB_URLS:,} URLs")
        for n, url in enumerate(urls):
            if (problem := _url_problem(url)) is not None:
                shown = repr(url) if len(repr(url)) <= 80 else repr(url)[:77] + "..."
                raise InputError(f"urls[{n}]: {problem}: {shown}")
        return cls(
            urls=tuple(dict.fromkeys(urls)),
            concurrency=_whole(
                "concurrency", params.get("concurrency", 16), MAX_FETCH_JOB_CONCURRENCY
            ),
            per_host=_whole("per_host", params.get("per_host", 8), MAX_FETCH_JOB_PER_HOST),
            delay=_delay(params.get("delay", 0.0)),
            shards=_whole("shards", params.get("shards", 1), MAX_FETCH_JOB_SHARDS),
        )

    def as_params(self) -> dict[str, Any]:
        """The params as a job keeps them."""
        return {
            "urls": list(self.urls),
            "concurrency": self.concurrency,
            "per_host": self.per_host,
            "delay": self.delay,
            **({"shards": self.shards} if self.shards > 1 else {}),
        }


def _url_problem(url: object) -> str | None:
    """Why a job cannot fetch ``url``, or None."""
    if not isinstance(url, str):
        return "a URL must be a string"
    if len(url) > MAX_JOB_URL_LENGTH:
        return f"URL longer than {MAX_JOB_URL_LENGTH:,} characters"
    return check_url(url)


def _whole(name: str, value: object, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InputError(f"{name} must be a whole number from 1 to {high:,}, got {value!r}")
    return value


def _delay(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_FETCH_JOB_DELAY
    ):
        raise InputError(f"delay must be 0 to {MAX_FETCH_JOB_DELAY:g} seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class FetchItemOutcome:
    """One URL of a fetch job: ``stored`` (``sha384`` and ``size`` of the body kept),
    ``failed`` (``status`` or ``error`` says why), ``pending`` (the job is still active) or
    ``not_fetched`` (the job ended before it: cancelled, or failed)."""

    index: int
    url: str
    outcome: str
    status: int | None = None
    sha384: str | None = None
    size: int | None = None
    final_url: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class FetchJobs:
    """The ``fetch`` job kind on a service's settings: the store and fetcher settings every
    job shares (``base``), and the HTTP limits a client's choices are held within."""

    base: FetchSettings
    max_concurrency: int = 100
    max_per_host: int = 16
    timeout: float = 30.0
    retries: int = 3
    identity: str = "browser"
    egress: EgressPolicy | None = None
    """Where the jobs' URLs (a client's) may lead, on every redirect hop; None: anywhere."""

    @classmethod
    def from_settings(cls, settings: Settings, environ: dict[str, str] | None = None) -> FetchJobs:
        """The store as ``scrapeflow fetch`` picks it (the ``[fetch]`` table and gofetch's
        variables), unless ``jobs_store`` names one; with neither, ``{jobs_dir}/store``.
        Raises :class:`~scrapeflow.errors.ConfigError` for a bad fetch setting."""
        flags: dict[str, Any] = {"fetch_id": "jobs"}  # each job's own id replaces it
        if settings.jobs_store:
            flags["store"] = settings.jobs_store
        try:
            base = FetchSettings.resolve(flags, environ, file_values=settings.fetch)
        except MissingSetting as exc:
            if exc.name != "--store":
                raise
            flags["store"] = str(settings.jobs_dir / "store")
            base = FetchSettings.resolve(flags, environ, file_values=settings.fetch)
        return cls(
            base=base,
            max_concurrency=settings.parallelism,
            max_per_host=settings.per_host,
            timeout=settings.timeout,
            retries=settings.retries,
            identity=settings.identity,
            egress=EgressPolicy.from_settings(settings, environ),
        )

    def shard(self, job_id: str, params: FetchJobParams) -> FetchSettings:
        """The fetcher's settings for job ``job_id``: its own shard of the shared store."""
        return dataclasses.replace(
            self.base,
            fetch_id=job_id,
            offset=0,
            limit=len(params.urls),
            concurrent_fetches=min(params.concurrency, self.max_concurrency),
            max_cpus=1,
        )

    async def run(
        self, job_id: str, params: Mapping[str, Any], progress: ProgressCallback
    ) -> dict[str, Any]:
        """Run job ``job_id``: fetch its URLs into the store; its counters go to ``progress``
        (``done``, ``total``, ``stored``, ``failed``); the summary is returned."""
        from scrapeflow.http import HostPolicy, HttpConfig, RetryPolicy

        checked = FetchJobParams.from_params(params)
        settings = self.shard(job_id, checked)
        items = [FetchItem(index=n, url=url) for n, url in enumerate(checked.urls)]
        shard = (settings.fetch_id, settings.offset, len(items))
        http = HttpConfig(
            max_connections=settings.concurrent_fetches,
            timeout=self.timeout,
            host=HostPolicy(
                concurrency=min(checked.per_host, self.max_per_host), delay=checked.delay
            ),
            retry=RetryPolicy(attempts=self.retries + 1),
            identities=self.identity,
            egress=self.egress,
        )
        counts = {"done": 0, "total": len(items), "stored": 0, "failed": 0}
        progress(**counts)

        def moved(outcome: str) -> None:
            counts["done"] += 1
            counts["failed" if outcome == "failed" else "stored"] += 1
            progress(**counts)

        async with BlobStore(
            settings.store, settings.program, storage_options=settings.storage_options
        ) as store:
            await store.check()
            if settings.redis_url:
                await _check_redis(settings)  # refused before anything is written
            lock = ShardLock(store, *shard).acquire()  # a second run of the job is refused
            try:
                indexes = make_indexes(settings.indexes, store)
                # A killed run of this job may have left an item between its index lines and
                # its log line: complete it (before reading the log) so nothing is doubled.
                completed = await repair_shard(store, *shard, indexes)
                if completed and settings.redis_url:
                    await _push(settings, completed)
                done = await logged_urls(store, *shard)
                todo = [item for item in items if item.url not in done]
                report = FetchReport(items=len(items), skipped=len(items) - len(todo))
                for _ in range(report.skipped):
                    moved("skipped")
                await fetch_share(
                    store,
                    settings,
                    todo,
                    log_limit=len(items),
                    report=report,
                    on_progress=moved,
                    http=http,
                )
                remove_journal(journal_dir(store, *shard))  # every item has its log line
            finally:
                lock.release(remove=True)
        return {
            "urls": report.items,
            "stored": report.stored,
            "duplicates": report.duplicates,
            "skipped": report.skipped,
            "failed": report.failed,
            "bytes": report.bytes,
            "errors": dict(report.errors),
        }

    async def run_shards(self, context: JobContext) -> dict[str, Any]:
        """Run a ``fetch`` job of several ``shards``: queue each shard as a ``fetch`` job of its
        own (a follow-up: run again, the job finds the same ones), wait for them, and sum what
        they did. A shard that failed fails the job, naming it."""
        checked = FetchJobParams.from_params(context.params)
        if checked.shards == 1:
            return await self.run(context.job.id, context.params, context.progress)
        urls = [u for u in context.params["urls"] if isinstance(u, str)]
        common = {k: v for k, v in checked.as_params().items() if k not in ("urls", "shards")}
        slices = even_slices(len(urls), checked.shards)
        parts = [common | {"urls": urls[s.start : s.stop]} for s in slices]
        ended = await run_parts(context, FETCH_KIND, parts, prefix=_SHARD)
        summary: dict[str, Any] = {"shards": [job.id for job in ended]}
        errors: dict[str, int] = {}
        for job in ended:
            result = job.result or {}
            for name in ("urls", "stored", "duplicates", "skipped", "failed", "bytes"):
                summary[name] = summary.get(name, 0) + int(result.get(name) or 0)
            for error, count in (result.get("errors") or {}).items():
                errors[error] = errors.get(error, 0) + int(count)
        summary["errors"] = errors
        context.progress(
            done=summary["urls"],
            total=summary["urls"],
            stored=summary["urls"] - summary["failed"],
            failed=summary["failed"],
        )
        return summary

    async def outcomes(
        self, job_id: str, params: Mapping[str, Any], *, active: bool, start: int, limit: int
    ) -> list[FetchItemOutcome]:
        """URLs ``start`` .. ``start + limit - 1`` of job ``job_id`` (in the order given), each
        with its outcome as logged so far — by its shard's job, for a job of several shards.
        ``active``: the job is queued or running (a URL with nothing logged is ``pending``,
        else ``not_fetched``)."""
        urls = [u for u in params.get("urls", []) if isinstance(u, str)]
        shards = params.get("shards", 1)
        if isinstance(shards, int) and shards > 1:
            return await self._shard_outcomes(job_id, urls, shards, active, start, limit)
        page = urls[start : start + limit]
        if not page:
            return []
        settings = dataclasses.replace(self.base, fetch_id=job_id, offset=0, limit=len(urls))
        async with BlobStore(
            settings.store, settings.program, storage_options=settings.storage_options
        ) as store:
            records = await shard_records(store, job_id, 0, len(urls))
            latest = _latest(records)
            found = []
            for n, url in enumerate(page, start=start):
                record = latest.get(url)
                if record is None:
                    found.append(FetchItemOutcome(n, url, "pending" if active else "not_fetched"))
                    continue
                found.append(
                    FetchItemOutcome(
                        index=n,
                        url=url,
                        outcome="stored" if record.stored else "failed",
                        status=record.status,
                        sha384=record.checksum if record.stored else None,
                        size=await _size(store, record.checksum) if record.stored else None,
                        final_url=record.final_url,
                        error=record.error,
                    )
                )
        return found

    async def _shard_outcomes(
        self, job_id: str, urls: list[str], shards: int, active: bool, start: int, limit: int
    ) -> list[FetchItemOutcome]:
        found: list[FetchItemOutcome] = []
        slices = even_slices(len(urls), shards)
        for part, shard in zip(part_ids(job_id, _SHARD, len(slices)), slices, strict=True):
            low, high = max(start, shard.start), min(start + limit, shard.stop)
            if low >= high:
                continue
            mine = await self.outcomes(
                part,
                {"urls": urls[shard.start : shard.stop]},
                active=active,
                start=low - shard.start,
                limit=high - low,
            )
            found += [dataclasses.replace(o, index=o.index + shard.start) for o in mine]
        return found


def _latest(records: Sequence[FetchRecord]) -> dict[str, FetchRecord]:
    """Each URL's record that counts: the one that stored it, else the last failure (a rerun
    tries a failed URL again)."""
    latest: dict[str, FetchRecord] = {}
    for record in records:
        known = latest.get(record.requested_url)
        if known is None or not known.stored:
            latest[record.requested_url] = record
    return latest


async def _size(store: BlobStore, checksum: str | None) -> int | None:
    """The stored body's size: a stat on local disk, the body's length elsewhere."""
    if checksum is None:
        return None
    location = store.location(checksum)
    if os.path.isabs(location):
        try:
            return os.stat(location).st_size
        except FileNotFoundError:
            return None
    return len(await store.get(checksum))
