"""The Scrapy contender of ``bench/fetch.py``: fetch a URL list, store each body under its SHA-384.

Runs in the bench's own environment (``bench/.venv-scrapy``, Scrapy 2.x), never in the project's::

    bench/.venv-scrapy/bin/python bench/_scrapy_fetch.py URLS_FILE DIR --concurrency 50

A spider reads the URL list (one URL a line, lazily) and yields one item per 2xx response; an
item pipeline writes the body to ``DIR/<sha384 hex>`` unless that file exists, as the bare loop
does. Prints one JSON line: the URLs, the bodies stored, the failures and the seconds from the
engine's start to the spider's close (imports and reactor setup excluded).

Settings (the rest are Scrapy's defaults): ``CONCURRENT_REQUESTS`` and
``CONCURRENT_REQUESTS_PER_DOMAIN`` both the bench's concurrency (the per-domain default of 8
would cap the single loopback host); no download delay; robots.txt, cookies, retries, telnet
console and the per-request log lines off; Scrapy's own asyncio reactor (its default since
2.13, set explicitly here so that older 2.x behave the same).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess

REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"


class StoreBodies:
    """Item pipeline: the body to ``<directory>/<sha384>``, if no file has that name yet."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.stored = 0

    @classmethod
    def from_crawler(cls, crawler: Any) -> StoreBodies:
        return cls(crawler.settings["BENCH_DIR"])

    def process_item(self, item: dict[str, Any], spider: Any = None) -> dict[str, Any]:
        body = item["body"]
        path = os.path.join(self.directory, hashlib.sha384(body).hexdigest())
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(body)
            self.stored += 1
        return {}  # nothing further down holds on to the body


class ListSpider(scrapy.Spider):
    """GET every URL of the list; a 2xx response becomes an item carrying its body."""

    name = "bench_fetch"

    def __init__(self, urls_file: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls_file = urls_file
        self.failed = 0
        self.window: list[float] = []

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> ListSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider._opened, signal=signals.spider_opened)
        crawler.signals.connect(spider._closed, signal=signals.spider_closed)
        return spider

    def _opened(self, spider: Any) -> None:
        self.window.append(time.perf_counter())

    def _closed(self, spider: Any, reason: str) -> None:
        self.window.append(time.perf_counter())

    def _requests(self) -> Iterator[scrapy.Request]:
        with open(self.urls_file, encoding="utf-8") as f:
            for line in f:
                url = line.strip()
                if url:
                    # dont_filter, as Scrapy's own start() does for start_urls: the list holds
                    # distinct URLs, so the duplicate filter would only cost time.
                    yield scrapy.Request(url, dont_filter=True, errback=self._failed)

    async def start(self) -> AsyncIterator[scrapy.Request]:  # Scrapy >= 2.13
        for request in self._requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:  # Scrapy < 2.13
        return self._requests()

    def parse(self, response: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        if 200 <= response.status < 300:
            yield {"body": response.body}
        else:
            self.failed += 1

    def _failed(self, failure: Any) -> None:
        self.failed += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls_file")
    parser.add_argument("dir")
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    settings = {
        "TWISTED_REACTOR": REACTOR,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "ITEM_PIPELINES": {f"{__name__}.StoreBodies": 100},
        "BENCH_DIR": args.dir,
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(ListSpider)
    process.crawl(crawler, urls_file=args.urls_file)
    process.start()
    spider = crawler.spider
    pipeline = next(
        (p for p in crawler.engine.scraper.itemproc.middlewares if isinstance(p, StoreBodies)),
        None,
    )
    window = spider.window
    stats = crawler.stats.get_stats()
    print(
        json.dumps(
            {
                "contender": "scrapy",
                "scrapy": scrapy.__version__,
                "reactor": REACTOR,
                "seconds": window[-1] - window[0] if len(window) == 2 else None,
                "stored": pipeline.stored if pipeline else None,
                "failed": spider.failed,
                "responses": stats.get("downloader/response_count", 0),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
