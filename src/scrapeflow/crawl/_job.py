"""The ``crawl`` job kind: a crawl without code (:class:`~scrapeflow.crawl.CrawlSpec`) as a job
of the service or of ``scrapeflow worker``.

A client names start URLs, the links to follow and the fields of the items, within bounds;
it never sends code. Every request the crawl makes (pages, redirects, robots.txt, sitemaps)
goes through the service's egress policy. The crawl's state is kept where the service keeps
run jobs' (``{jobs_dir}/crawl/{job id}``, or the service's database on the distributed
backend: a crawl job run again on another machine resumes where it stopped). Its items stay
with their pages and are read through ``GET /v1/jobs/{id}/results``.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapeflow._util.atomic import make_private_dirs
from scrapeflow.crawl._config import CrawlConfig
from scrapeflow.crawl._crawler import Crawler, is_sitemap_key
from scrapeflow.crawl._links import STRATEGIES
from scrapeflow.crawl._nocode import CrawlSpec
from scrapeflow.errors import InputError
from scrapeflow.status import ERROR_PREFIX, SKIPPED, SUCCESS, JsonDirStore, StatusStore, check_key
from scrapeflow.urllist import check_url

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from scrapeflow.config import Settings
    from scrapeflow.executor import RunProgress
    from scrapeflow.http import EgressPolicy

__all__ = [
    "CRAWL_KIND",
    "MAX_CRAWL_CONCURRENCY",
    "MAX_CRAWL_DELAY",
    "MAX_CRAWL_DEPTH",
    "MAX_CRAWL_PATTERNS",
    "MAX_CRAWL_PER_HOST",
    "MAX_CRAWL_REQUESTS",
    "MAX_CRAWL_SELECTORS",
    "MAX_CRAWL_START_URLS",
    "CrawlJobParams",
    "CrawlJobs",
    "CrawlPage",
]

CRAWL_KIND = "crawl"
MAX_CRAWL_START_URLS = 100
MAX_CRAWL_REQUESTS = 100_000
"""Requests one crawl job may make at most (its ``max_requests``)."""
MAX_CRAWL_DEPTH = 50
MAX_CRAWL_SELECTORS = 20
MAX_CRAWL_PATTERNS = 20
MAX_CRAWL_CONCURRENCY = 256
MAX_CRAWL_PER_HOST = 64
MAX_CRAWL_DELAY = 60.0
MAX_GLOB_WILDCARDS = 4
"""Wildcards in one include or exclude glob of a job, at most."""
MAX_ITEM_BYTES = 64 * 1024
"""One item of a crawl job as JSON, at most: a page whose item is bigger fails (its results
are read through the API, a page at a time)."""


@dataclass(frozen=True, slots=True)
class CrawlJobParams:
    """A crawl job's params, checked: :meth:`from_params` raises
    :class:`~scrapeflow.errors.InputError` naming what is wrong."""

    start_urls: tuple[str, ...]
    follow: tuple[str, ...] = ()
    items: tuple[str, ...] = ()
    max_depth: int | None = 2
    max_requests: int = 1_000
    strategy: str = "same-hostname"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    concurrency: int = 16
    per_host: int = 8
    delay: float = 0.0
    obey_robots: bool = True

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> CrawlJobParams:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(params) - known)
        if unknown:
            raise InputError(f"unknown crawl param(s): {', '.join(unknown)}")
        starts = _strings("start_urls", params.get("start_urls"), 1, MAX_CRAWL_START_URLS)
        for url in starts:
            problem = check_url(url) if len(url) <= 8_192 else "longer than 8,192 characters"
            if problem is not None:
                raise InputError(f"start_urls: {problem}: {url[:80]!r}")
        checked = cls(
            start_urls=starts,
            follow=_strings("follow", params.get("follow", []), 0, MAX_CRAWL_SELECTORS),
            items=_strings("items", params.get("items", []), 0, 50),
            max_depth=_depth(params.get("max_depth", 2)),
            max_requests=_whole(
                "max_requests", params.get("max_requests", 1_000), 1, MAX_CRAWL_REQUESTS
            ),
            strategy=_strategy(params.get("strategy", "same-hostname")),
            include=_strings("include", params.get("include", []), 0, MAX_CRAWL_PATTERNS),
            exclude=_strings("exclude", params.get("exclude", []), 0, MAX_CRAWL_PATTERNS),
            concurrency=_whole(
                "concurrency", params.get("concurrency", 16), 1, MAX_CRAWL_CONCURRENCY
            ),
            per_host=_whole("per_host", params.get("per_host", 8), 1, MAX_CRAWL_PER_HOST),
            delay=_delay(params.get("delay", 0.0)),
            obey_robots=_flag("obey_robots", params.get("obey_robots", True)),
        )
        for field_text in checked.items:
            if "xpath:" in field_text.partition("=")[2][:10]:
                raise InputError(
                    f"items: {field_text[:60]!r}: XPath fields are for crawls with code; a job "
                    "takes CSS selectors (its cost is bounded; XPath's, with regular "
                    "expressions, is not)"
                )
        for name in ("include", "exclude"):
            for glob in getattr(checked, name):
                stars = glob.replace("**", "*").count("*") + glob.count("?")
                if stars > MAX_GLOB_WILDCARDS:
                    raise InputError(
                        f"{name}: {glob[:60]!r} has {stars} wildcards, at most "
                        f"{MAX_GLOB_WILDCARDS} (matching many against a long URL costs "
                        "seconds)"
                    )
        checked.spec()  # selectors and fields compile, or InputError
        return checked

    def spec(self) -> CrawlSpec:
        return CrawlSpec.parse(self.follow, self.items)

    def as_params(self) -> dict[str, Any]:
        return {
            "start_urls": list(self.start_urls),
            "follow": list(self.follow),
            "items": list(self.items),
            "max_depth": self.max_depth,
            "max_requests": self.max_requests,
            "strategy": self.strategy,
            "include": list(self.include),
            "exclude": list(self.exclude),
            "concurrency": self.concurrency,
            "per_host": self.per_host,
            "delay": self.delay,
            "obey_robots": self.obey_robots,
        }


def _strings(name: str, value: object, low: int, high: int) -> tuple[str, ...]:
    if not isinstance(value, list) or not low <= len(value) <= high:
        raise InputError(f"{name} must be a list of {low} to {high} strings")
    for item in value:
        if not isinstance(item, str) or not item or len(item) > 2_000:
            raise InputError(f"{name}: each is a non-empty string of at most 2,000 characters")
    return tuple(value)


def _whole(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(f"{name} must be a whole number from {low} to {high:,}, got {value!r}")
    return value


def _depth(value: object) -> int | None:
    return None if value is None else _whole("max_depth", value, 0, MAX_CRAWL_DEPTH)


def _strategy(value: object) -> str:
    if value not in STRATEGIES:
        raise InputError(f"strategy must be one of {', '.join(STRATEGIES)}, got {value!r}")
    return str(value)


def _delay(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"delay must be a number of seconds, got {value!r}")
    if not 0 <= value <= MAX_CRAWL_DELAY:
        raise InputError(f"delay must be from 0 to {MAX_CRAWL_DELAY:g} seconds, got {value!r}")
    return float(value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{name} must be true or false, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class CrawlPage:
    """One page of a crawl job as its results show it."""

    index: int
    url: str
    state: str
    """``succeeded``, ``failed``, ``pending`` (the job is still active) or ``not_run``."""
    depth: int | None
    status: int | None
    items: list[dict[str, Any]]
    error: str | None


@dataclass(frozen=True)
class CrawlJobs:
    """The ``crawl`` job kind on a service's settings."""

    root: Path
    max_concurrency: int = 100
    max_per_host: int = 16
    timeout: float = 30.0
    retries: int = 3
    egress: EgressPolicy | None = None
    status_db: str | None = field(default=None, repr=False)
    engine: AsyncEngine | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_settings(cls, settings: Settings, *, engine: AsyncEngine | None = None) -> CrawlJobs:
        from scrapeflow.http import EgressPolicy

        distributed = settings.jobs_backend == "procrastinate"
        return cls(
            root=settings.jobs_dir / "crawl",
            max_concurrency=settings.parallelism,
            max_per_host=settings.per_host,
            timeout=settings.timeout,
            retries=settings.retries,
            egress=EgressPolicy.from_settings(settings),
            status_db=settings.db_url if distributed else None,
            engine=engine if distributed else None,
        )

    def directory(self, job_id: str) -> Path:
        return self.root / check_key(job_id)

    @asynccontextmanager
    async def status_store(self, job_id: str) -> AsyncIterator[StatusStore]:
        if self.status_db is None:
            yield JsonDirStore(self.directory(job_id))
            return
        from scrapeflow.statusdb import SqlStatusStore

        async with SqlStatusStore(
            self.engine or self.status_db, namespace=check_key(job_id)
        ) as store:
            yield store

    async def run(
        self, job_id: str, params: Mapping[str, Any], progress: Callable[..., None]
    ) -> dict[str, Any]:
        """Run (or resume) crawl job ``job_id``; its counters go to ``progress``."""
        from scrapeflow.http import HostPolicy, HttpConfig, RetryPolicy

        checked = CrawlJobParams.from_params(params)
        concurrency = min(checked.concurrency, self.max_concurrency)
        config = CrawlConfig(
            max_depth=checked.max_depth,
            max_requests=checked.max_requests,
            strategy=checked.strategy,  # type: ignore[arg-type]
            include=checked.include,
            exclude=checked.exclude,
            concurrency=concurrency,
            per_host=min(checked.per_host, self.max_per_host),
            delay=checked.delay,
            timeout=self.timeout,
            retries=self.retries,
            obey_robots=checked.obey_robots,
        )
        http = HttpConfig(
            max_connections=concurrency,
            timeout=self.timeout,
            host=HostPolicy(concurrency=config.per_host, delay=config.delay),
            retry=RetryPolicy(attempts=self.retries + 1),
            identities="none",
            egress=self.egress,
        )
        counts = {"done": 0, "failed": 0}

        def moved(run: RunProgress) -> None:
            counts.update(done=run.done, failed=run.failed)
            progress(done=run.done, total=run.total, failed=run.failed)

        def bounded(item: dict[str, Any], response: Any) -> dict[str, Any]:
            size = len(json.dumps(item, ensure_ascii=False).encode())
            if size > MAX_ITEM_BYTES:
                raise InputError(f"an item of {size:,} bytes, more than {MAX_ITEM_BYTES:,}")
            return item

        async with self.status_store(job_id) as store:
            if not isinstance(store, JsonDirStore):
                make_private_dirs(self.directory(job_id))  # the engine's working directory
            crawler = Crawler(
                checked.spec().router(),
                self.directory(job_id),
                config=config,
                store=store,
                http=http,
                pipelines=[bounded],
            )
            summary = await crawler.run(list(checked.start_urls), on_progress=moved)
        return summary.as_dict()

    async def pages(self, job_id: str, *, active: bool, start: int, limit: int) -> list[CrawlPage]:
        """Pages ``start`` .. ``start + limit - 1`` of job ``job_id``, in the order of their
        keys (stable: while the job runs, new pages may appear between those listed)."""
        async with self.status_store(job_id) as store:
            await store.prepare()
            keys = sorted(k for k in await store.keys() if not is_sitemap_key(k))
            chosen = keys[start : start + limit]
            loader = getattr(store, "load_many", None)
            if loader is not None:
                found = await loader(chosen)
            else:
                found = {k: await store.load(k) for k in chosen}
        return [_page(start + n, found.get(k), active) for n, k in enumerate(chosen)]


def _page(index: int, status: Any, active: bool) -> CrawlPage:
    if not isinstance(status, dict):
        return CrawlPage(index, "", "unreadable", None, None, [], None)
    params = status.get("params") or {}
    output = status.get("crawl") or {}
    text = str(status.get("crawl_status", ""))
    if text in (SUCCESS, SKIPPED):
        state, error = "succeeded", None
    elif text.startswith(ERROR_PREFIX):
        state, error = "failed", text[len(ERROR_PREFIX) :].split("::", 1)[0]
    else:
        state, error = ("pending" if active else "not_run"), None
    found = output.get("items")
    items: list[dict[str, Any]] = found if isinstance(found, list) else []
    return CrawlPage(
        index=index,
        url=str(output.get("url") or params.get("url") or ""),
        state=state,
        depth=params.get("depth"),
        status=output.get("status"),
        items=items,
        error=error,
    )
