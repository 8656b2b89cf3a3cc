"""The Scrapy contender of ``bench/crawl.py``: a ``CrawlSpider`` crawling a site from one URL.

Runs in the bench's own environment (``bench/.venv-scrapy``, Scrapy 2.x), never in the project's::

    bench/.venv-scrapy/bin/python bench/_scrapy_crawl.py plain URL ITEMS.jsonl --concurrency 32
    bench/.venv-scrapy/bin/python bench/_scrapy_crawl.py docs URL ITEMS.jsonl --jobdir DIR

One ``Rule(LinkExtractor(...), callback="parse_page", follow=True)``, the start page parsed by
the same callback (``parse_start_url``) and its request filtered like any other (those of
``start_urls`` are not: a link back to the start page would fetch it again), so that every page
is fetched once and gives one item:

* ``plain``: the links of ``ul.links`` (``restrict_css``), item ``{"url", "title": h1 text}``;
* ``docs``: every ``a`` link whose URL, its fragment dropped, ends in ``.html``, on the start
  URL's host only (``allowed_domains``), item ``{"url", "title": title text}``.

Items go to a JSON-lines feed (``FEEDS``; appended to, Scrapy's default for a local file).
``--jobdir`` gives the crawl a ``JOBDIR`` (Scrapy's way to pause and resume a crawl). Prints one
JSON line: pages (responses of a 2xx status), items, the seconds from the spider's opening to
its closing (imports and reactor setup excluded) and some of Scrapy's stats.

Settings (the rest are Scrapy's defaults): ``CONCURRENT_REQUESTS`` and
``CONCURRENT_REQUESTS_PER_DOMAIN`` both the bench's concurrency; no download delay; robots.txt,
cookies and the telnet console off; retries on (``RETRY_TIMES`` 2, the default); ``LOG_LEVEL``
INFO (no line per request: those are DEBUG); Scrapy's asyncio reactor, set explicitly.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"


def _without_fragment(url: str) -> str:
    return url.partition("#")[0]


class _Timed(CrawlSpider):
    """A CrawlSpider that keeps the times it was opened and closed at."""

    title_css = ""

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url = start_url
        self.window: list[float] = []
        self.reason = ""

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> _Timed:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider._opened, signal=signals.spider_opened)
        crawler.signals.connect(spider._closed, signal=signals.spider_closed)
        return spider

    def _opened(self, spider: Any) -> None:
        self.window.append(time.perf_counter())

    def _closed(self, spider: Any, reason: str) -> None:
        self.window.append(time.perf_counter())
        self.reason = reason

    async def start(self) -> AsyncIterator[scrapy.Request]:  # Scrapy >= 2.13
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:  # Scrapy < 2.13
        # Filtered like any request (those of start_urls are not, dont_filter): a link back to
        # the start page is not fetched again, as in scrapeflow, where a request is its
        # fingerprint. Every page is fetched once, and gives one item.
        yield scrapy.Request(self.start_url)

    def parse_start_url(self, response: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return self.parse_page(response)

    def parse_page(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "title": response.css(self.title_css).get()}


class PlainSpider(_Timed):
    """The sandbox plain site: follow ``ul.links a``, keep each page's ``h1`` text."""

    name = "bench_crawl_plain"
    title_css = "h1::text"
    rules = (
        Rule(
            LinkExtractor(restrict_css="ul.links", tags=("a",), attrs=("href",)),
            callback="parse_page",
            follow=True,
        ),
    )


class DocsSpider(_Timed):
    """The Python docs: follow every ``a`` to a ``.html`` URL on the same host (fragments
    dropped), keep each page's ``<title>`` text."""

    name = "bench_crawl_docs"
    title_css = "title::text"
    rules = (
        Rule(
            LinkExtractor(
                allow=r"\.html$",
                tags=("a",),
                attrs=("href",),
                process_value=_without_fragment,
            ),
            callback="parse_page",
            follow=True,
        ),
    )

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        # Offsite requests are dropped: the start URL's host only, as scrapeflow's
        # same-hostname strategy (an IP address: no subdomains either way).
        self.allowed_domains = [urlsplit(start_url).hostname or ""]
        super().__init__(start_url, **kwargs)


SPIDERS: dict[str, type[_Timed]] = {"plain": PlainSpider, "docs": DocsSpider}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", choices=sorted(SPIDERS))
    parser.add_argument("start_url")
    parser.add_argument("feed", help="the JSON-lines file the items are appended to")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--jobdir", help="Scrapy's JOBDIR: the crawl's state, to resume it")
    args = parser.parse_args()
    settings: dict[str, Any] = {
        "TWISTED_REACTOR": REACTOR,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": True,
        "RETRY_TIMES": args.retries,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "FEEDS": {args.feed: {"format": "jsonlines"}},
        "FEED_EXPORT_ENCODING": "utf-8",  # as `scrapy startproject` sets it
    }
    if args.jobdir:
        settings["JOBDIR"] = args.jobdir
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SPIDERS[args.site])
    process.crawl(crawler, start_url=args.start_url)
    process.start()
    spider = crawler.spider
    if not isinstance(spider, _Timed):  # pragma: no cover - the crawler made one
        raise RuntimeError("the crawl made no spider")
    window = spider.window
    stats = crawler.stats.get_stats()
    print(
        json.dumps(
            {
                "contender": "scrapy",
                "scrapy": scrapy.__version__,
                "reactor": REACTOR,
                "seconds": window[-1] - window[0] if len(window) == 2 else None,
                # Pages given to the callback: responses less those of an error status,
                # which HttpErrorMiddleware drops (scrapeflow counts them as failed pages).
                "pages": stats.get("response_received_count", 0)
                - stats.get("httperror/response_ignored_count", 0),
                "responses": stats.get("response_received_count", 0),
                "items": stats.get("item_scraped_count", 0),
                "finish_reason": spider.reason,
                "stats": {
                    key: stats.get(key, 0)
                    for key in (
                        "downloader/request_count",
                        "downloader/response_count",
                        "downloader/exception_count",
                        "retry/count",
                        "dupefilter/filtered",
                        "offsite/filtered",
                        "httperror/response_ignored_count",
                        "scheduler/enqueued",
                        "scheduler/dequeued",
                        "log_count/ERROR",
                    )
                },
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
