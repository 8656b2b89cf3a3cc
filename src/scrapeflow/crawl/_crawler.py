"""The crawler: requests become engine tasks, pages go to handlers, items to the exports.

Each request is a task of :func:`~scrapeflow.executor.execute_async`, keyed by its
fingerprint, in the crawl's directory (or another status store): the frontier is the tasks
not finished yet, so a crawl killed at any instant resumes where it was. A page's task runs
the executor ``crawl``: robots.txt, the fetch, the handler, the pipelines; then the page's
links are added as follow-up tasks, its items appended to the exports, and its status (with
its items) saved. A page counts only once all of that is done: if its handler fails, none of
its items or links are kept, its status records the error, and the next run tries it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from scrapeflow._taskify import Context, error_text, now_text, taskify
from scrapeflow._util.atomic import make_private_dirs
from scrapeflow.crawl._config import CrawlConfig
from scrapeflow.crawl._exports import Export, ItemExporter
from scrapeflow.crawl._items import ItemFlow, Pipeline
from scrapeflow.crawl._links import domain_allowed
from scrapeflow.crawl._request import Request, fingerprint
from scrapeflow.crawl._response import Response
from scrapeflow.crawl._robots import RobotsRules
from scrapeflow.crawl._router import Handler, Router, results_of
from scrapeflow.crawl._sitemaps import read_sitemap
from scrapeflow.crawl._summary import CrawlSummary
from scrapeflow.crawl._throttle import HostThrottle
from scrapeflow.errors import (
    ConfigError,
    CrawlInProgress,
    HTTPStatusError,
    ScrapeError,
    TaskConflict,
)
from scrapeflow.status import ERROR_PREFIX, SKIPPED, SUCCESS, JsonDirStore, StatusStore

if TYPE_CHECKING:
    from pydantic import BaseModel

    from scrapeflow.executor import RunProgress
    from scrapeflow.http import HttpClient, HttpConfig
    from scrapeflow.statusdata import StatusData

__all__ = ["Crawler", "StartRequest", "is_sitemap_key"]

log = logging.getLogger("scrapeflow.crawl")

StartRequest = str | Request
_SITEMAP_PREFIX = "sitemap-"
_EXPORTS_DIR = "exports"
_LOCK_FILE = "crawl.lock"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10


class Crawler:
    """A crawl: its handlers, its directory (the frontier and the pages' statuses), its rules.

    ``handlers`` is a :class:`Router` or one handler function (the default handler).
    ``exports`` are files (``"items.jsonl"``, ``"items.csv"``, ``"items.parquet"``) or
    :class:`Export` objects; ``pipelines`` functions ``(item, response) -> item | None``;
    ``item_model`` a pydantic model every item must fit. ``store`` keeps the statuses
    elsewhere than JSON files in ``directory`` (``SqlStatusStore``); ``http`` replaces the
    HTTP settings made from ``config``.
    """

    def __init__(
        self,
        handlers: Router | Handler,
        directory: Path | str,
        *,
        config: CrawlConfig | None = None,
        exports: Sequence[Export | str | os.PathLike[str]] = (),
        pipelines: Sequence[Pipeline] = (),
        item_model: type[BaseModel] | None = None,
        store: StatusStore | None = None,
        http: HttpConfig | None = None,
    ) -> None:
        self.router = Router.of(handlers)
        self.directory = Path(directory)
        self.config = config or CrawlConfig()
        self.exports = [Export.of(e) for e in exports]
        paths = [e.path.resolve() for e in self.exports]
        if len(set(paths)) != len(paths):
            raise ConfigError("two exports write to the same file: give each its own")
        self.flow = ItemFlow(pipelines, model=item_model)
        self.store = store or JsonDirStore(self.directory)
        self._http_config = http
        self.summary = CrawlSummary()
        self._exporters: list[ItemExporter] = []
        self._robots: RobotsRules | None = None
        self._throttle = (
            HostThrottle(self.config.autothrottle) if self.config.autothrottle else None
        )
        self._links = self.config.links()
        self._seen_urls: set[str] = set()
        self._added: set[str] = set()
        self._requests = 0

    # -- the run ----------------------------------------------------------------------------

    async def run(
        self,
        start: Iterable[StartRequest] = (),
        *,
        sitemaps: Iterable[str] = (),
        sitemaps_from_robots: bool = False,
        on_progress: Callable[[RunProgress], None] | None = None,
    ) -> CrawlSummary:
        """Crawl from ``start`` (URLs or :class:`Request` objects) and the pages of
        ``sitemaps`` (and of the sitemaps the start URLs' robots.txt lists, with
        ``sitemaps_from_robots``), until no request is left; run it again to resume. Returns
        this run's :class:`CrawlSummary`."""
        starts = [Request(s) if isinstance(s, str) else s.at_depth(0) for s in start]
        sitemap_urls = list(sitemaps)
        if not starts and not sitemap_urls:
            raise ConfigError("a crawl needs start URLs or sitemaps")
        self.summary = CrawlSummary()
        self._seen_urls, self._added = set(), set()
        self.flow.dropped = self.flow.invalid = 0
        self.flow.first_invalid = None
        with _directory_lock(self.directory):
            return await self._run(starts, sitemap_urls, sitemaps_from_robots, on_progress)

    async def _run(
        self,
        starts: list[Request],
        sitemap_urls: list[str],
        sitemaps_from_robots: bool,
        on_progress: Callable[[RunProgress], None] | None,
    ) -> CrawlSummary:
        from scrapeflow.executor import execute_async
        from scrapeflow.http import HttpClient

        await self.store.prepare()
        known = list(await self.store.keys())
        self._requests = sum(1 for k in known if not k.startswith(_SITEMAP_PREFIX))
        async with HttpClient(self._http()) as http:
            self._robots = RobotsRules(http, self.config.user_agent)
            if sitemaps_from_robots:
                for request in starts:
                    sitemap_urls += await self._robots.sitemaps(request.url)
            tasks = await self._first_tasks(starts, dict.fromkeys(sitemap_urls), set(known))
            self._open_exports()
            try:
                await self._export_stored(set(known))
                await execute_async(
                    [self._executor()],
                    self.directory,
                    tasks,
                    timeout=self.config.timeout,
                    max_parallelism=self.config.concurrency,
                    store=self.store,
                    http=http,
                    on_progress=self._progress(on_progress),
                )
            finally:
                self._close_exports()
        self.summary.items_dropped = self.flow.dropped
        self.summary.items_invalid = self.flow.invalid
        if self.flow.first_invalid:
            log.warning("items refused by the model, the first: %s", self.flow.first_invalid)
        return self.summary.finish()

    def _http(self) -> HttpConfig:
        from scrapeflow.http import HostPolicy, HttpConfig, RetryPolicy

        if self._http_config is not None:
            return self._http_config
        c = self.config
        return HttpConfig(
            max_connections=c.concurrency,
            timeout=c.timeout,
            host=HostPolicy(concurrency=c.per_host, delay=c.delay),
            retry=RetryPolicy(attempts=c.retries + 1),
            identities="none",
        )

    async def _first_tasks(
        self, starts: list[Request], sitemaps: dict[str, None], known: set[str]
    ) -> list[str | tuple[str, dict[str, Any]]]:
        """The run's input: a known task by its key alone (its stored params stand, whatever
        depth it was found at), a new one with its params."""
        tasks: list[str | tuple[str, dict[str, Any]]] = []
        chosen: set[str] = set()
        for url in sitemaps:
            key = _SITEMAP_PREFIX + fingerprint(url)
            if key not in chosen:
                chosen.add(key)
                tasks.append(key if key in known else (key, {"url": url, "sitemap": True}))
        for request in starts:
            key = request.key
            if key in chosen:
                continue
            chosen.add(key)
            self._added.add(key)
            self._seen_urls.add(request.url)
            if key in known:
                tasks.append(key)
            else:
                self._requests += 1
                tasks.append((key, request.params()))
        return tasks

    def _progress(
        self, user: Callable[[RunProgress], None] | None
    ) -> Callable[[RunProgress], None]:
        summary = self.summary

        def count(progress: RunProgress) -> None:
            last = progress.last
            if last is not None:
                if last.skipped:
                    summary.resumed += 1
                else:
                    text = last.statuses.get("crawl", "")
                    if text.startswith(ERROR_PREFIX):
                        summary.errors[text[len(ERROR_PREFIX) :].partition("::")[0]] += 1
            if user is not None:
                user(progress)

        return count

    # -- exports ----------------------------------------------------------------------------

    def _open_exports(self) -> None:
        journal_dir = self.directory / _EXPORTS_DIR
        self._exporters = [ItemExporter(e, journal_dir) for e in self.exports]

    def _close_exports(self) -> None:
        exporters, self._exporters = self._exporters, []
        failed: BaseException | None = None
        for exporter in exporters:  # every one closed, whatever one of them raised
            try:
                exporter.close()
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    async def _export_stored(self, known: set[str]) -> None:
        """Pages done in an earlier run whose items an export lacks (a new export file, one
        deleted since): exported from their stored statuses."""
        for exporter in self._exporters:
            for key in known - exporter.exported:
                if key.startswith(_SITEMAP_PREFIX):
                    continue
                status = await self.store.load(key)
                if status is None or status.get("crawl_status") not in (SUCCESS, SKIPPED):
                    continue
                items = (status.get("crawl") or {}).get("items")
                if isinstance(items, list):
                    exporter.write(key, items)

    # -- a page -----------------------------------------------------------------------------

    def _executor(self) -> Any:
        crawler = self

        async def crawl(context: Context, key: str, status: StatusData) -> Any:
            params = status["params"]
            if params.get("sitemap"):
                return await crawler._read_sitemap(context, params["url"])
            return await crawler._page(context, key, status, Request.from_params(params))

        return taskify(crawl)

    async def _page(self, context: Context, key: str, status: StatusData, request: Request) -> Any:
        http = context.http
        if http is None:  # pragma: no cover - execute_async always gives one
            raise ConfigError("the crawl runs inside execute_async")
        robots = self._robots
        if self.config.obey_robots and robots is not None and not await robots.allows(request.url):
            self.summary.robots_skipped += 1
            return {"url": request.url, "skipped": "robots.txt"}
        answer = await self._fetch(http, request)
        if isinstance(answer, dict):  # a redirect to a page robots.txt disallows, or one seen
            return answer
        if not (200 <= answer.status < 300 or answer.status in self.config.extra_statuses):
            raise HTTPStatusError(answer.status, request.url)
        response = Response(request, answer, links=self._links, seen=self._seen_urls)
        try:
            results = await results_of(self.router.route(request.label), response)
            items, requests = _split(results)
            items = await self.flow.process(items, response)
        except Exception as exc:
            if self.config.strict:
                raise
            log.error("handler failed on %s", request.url, exc_info=True)
            status["crawl"] = {"url": response.url, "status": answer.status}
            status["crawl_status"] = error_text(exc)
            status["crawl_last_run"] = now_text()
            return status, False
        links = await self._enqueue(context, [*requests, *response.enqueued])
        self.summary.duplicates += response.seen_links
        for exporter in self._exporters:
            exporter.write(key, items)
        self.summary.pages += 1
        self.summary.items += len(items)
        return {
            "url": response.url,
            "status": answer.status,
            "depth": request.depth,
            "links": links,
            "items": items,
        }

    async def _fetch(self, http: HttpClient, request: Request) -> Any:
        """The page's answer, redirects followed here, hop by hop, as new requests of the
        crawl: each one's target is judged by robots.txt and de-duplicated like a link (a
        redirect to a page the crawl has already is not fetched again). The page's output
        instead of an answer when a redirect ends there."""
        headers = {"User-Agent": self.config.user_agent} if self.config.user_agent else {}
        headers.update(request.headers or {})
        url, method, body = request.url, request.method, request.body
        hops = 0
        while True:
            answer = await self._fetch_one(http, method, url, body, headers)
            location = answer.headers.get("Location")
            if answer.status not in _REDIRECTS or not location:
                return answer
            if hops == _MAX_REDIRECTS:
                raise ScrapeError(f"more than {_MAX_REDIRECTS} redirects from {request.url}")
            hops += 1
            target = urljoin(url, location.strip()).partition("#")[0]
            if not target.startswith(("http://", "https://")):
                raise ScrapeError(f"{url} redirects to {target[:80]!r}, not an http(s) URL")
            if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
                method, body = "GET", None  # as browsers do
            robots = self._robots
            if self.config.obey_robots and robots is not None and not await robots.allows(target):
                self.summary.robots_skipped += 1
                return {"url": request.url, "redirected_to": target, "skipped": "robots.txt"}
            try:
                key = fingerprint(target, method, body)
            except ValueError as exc:
                raise ScrapeError(f"{url} redirects to a URL that is not one: {exc}") from None
            if key != request.key and (key in self._added or await self.store.exists(key)):
                self.summary.duplicates += 1
                return {"url": request.url, "redirected_to": target, "skipped": "duplicate"}
            self._added.add(key)
            if method == "GET" and body is None:
                self._seen_urls.add(target)
            url = target

    async def _fetch_one(
        self, http: HttpClient, method: str, url: str, body: str | None, headers: dict[str, str]
    ) -> Any:
        throttle = self._throttle
        host = urlsplit(url).netloc
        if throttle is not None:
            await throttle.wait(host)
        answer = await http.request(
            method, url, data=body, headers=headers, retry_statuses=None, allow_redirects=False
        )
        if throttle is not None:
            throttle.observe(host, answer.elapsed, 200 <= answer.status < 300)
        return answer

    async def _enqueue(self, context: Context, requests: list[Request]) -> int:
        """Add the page's requests that the crawl's rules keep; how many were new."""
        c, summary, added = self.config, self.summary, 0
        for request in requests:
            if c.max_depth is not None and request.depth > c.max_depth:
                summary.too_deep += 1
                continue
            plain = request.method == "GET" and request.body is None
            if plain and request.url in self._seen_urls:
                summary.duplicates += 1
                continue
            if c.allowed_domains:
                host = urlsplit(request.url).hostname or ""
                if not domain_allowed(host, c.allowed_domains):
                    summary.offsite += 1
                    continue
            try:
                key = request.key
            except ValueError:  # a port out of range, a host w3lib cannot encode: not a page
                summary.bad_links += 1
                continue
            if plain:
                self._seen_urls.add(request.url)
            if key in self._added:
                summary.duplicates += 1
                continue
            if c.max_requests is not None and self._requests >= c.max_requests:
                summary.over_limit += 1
                continue
            self._added.add(key)
            try:
                new = await context.add_task(key, request.params())
            except TaskConflict:
                # Found by an earlier run at another depth or with another label: that one
                # stands, and is scheduled if it has not run (a run killed between saving it
                # and saving the page that found it left it listed by no page).
                new = False
                stored = await self.store.load(key)
                if stored is not None:
                    await context.add_task(key, stored["params"])
            if new:
                self._requests += 1
                added += 1
            else:
                summary.duplicates += 1
        return added

    async def _read_sitemap(self, context: Context, url: str) -> dict[str, Any]:
        http = context.http
        if http is None:  # pragma: no cover
            raise ConfigError("the crawl runs inside execute_async")
        answer = await http.request("GET", url)
        if answer.status != 200:
            raise HTTPStatusError(answer.status, url)
        try:
            sitemap = read_sitemap(answer.body)
        except (ValueError, zlib.error) as exc:  # empty, not XML, a corrupt gzip stream
            raise ScrapeError(f"{url} is not a readable sitemap: {exc}") from None
        since = self.config.sitemap_since
        host = urlsplit(url).hostname
        for child, _ in sitemap.sitemaps:
            if urlsplit(child).hostname != host:  # the protocol's rule: a sitemap lists its host's
                self.summary.offsite += 1
                continue
            await context.add_task(
                _SITEMAP_PREFIX + fingerprint(child), {"url": child, "sitemap": True}
            )
        pages = [
            Request(loc, label=self.config.sitemap_label)
            for loc, lastmod in sitemap.pages
            if since is None or lastmod is None or lastmod >= since
        ]
        added = await self._enqueue(context, pages)
        self.summary.sitemaps += 1
        return {
            "url": url,
            "sitemaps": len(sitemap.sitemaps),
            "pages": len(sitemap.pages),
            "added": added,
        }


def is_sitemap_key(key: str) -> bool:
    """Whether a task of a crawl is a sitemap's (not a page's)."""
    return key.startswith(_SITEMAP_PREFIX)


def _split(results: list[Any]) -> tuple[list[Any], list[Request]]:
    items: list[Any] = []
    requests: list[Request] = []
    for result in results:
        (requests if isinstance(result, Request) else items).append(result)
    return items, requests


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s crawl lock (``crawl.lock``, an advisory lock the kernel drops when
    the process dies, ``kill -9`` included); :class:`CrawlInProgress` if another process holds
    it."""
    make_private_dirs(directory)
    fd = os.open(directory / _LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CrawlInProgress(
                f"another crawl is running in {directory}: wait for it to end, or give "
                "another directory"
            ) from None
        yield
    finally:
        os.close(fd)
