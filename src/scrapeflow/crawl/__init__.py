"""Crawling on the resumable engine: what Scrapy and Crawlee users expect.

>>> from scrapeflow.crawl import Crawler, Router
>>> router = Router()
>>> @router.default_handler
... async def page(response):
...     response.enqueue_links("nav a")
...     yield {"url": response.url, "title": response.css("h1::text").get()}
>>> crawler = Crawler(router, "crawl", exports=["items.jsonl"])
>>> await crawler.run(["http://127.0.0.1:8080/"])  # doctest: +SKIP

Every request is an engine task keyed by its fingerprint; a crawl killed at any instant
resumes where it was, fetches nothing twice, and exports every item once (docs/crawling.md).
"""

from scrapeflow.crawl._config import CrawlConfig
from scrapeflow.crawl._crawler import Crawler, StartRequest
from scrapeflow.crawl._exports import Export, ExportFormat
from scrapeflow.crawl._items import Item, Pipeline, plain_item
from scrapeflow.crawl._job import (
    CRAWL_KIND,
    MAX_CRAWL_CONCURRENCY,
    MAX_CRAWL_DELAY,
    MAX_CRAWL_DEPTH,
    MAX_CRAWL_PATTERNS,
    MAX_CRAWL_PER_HOST,
    MAX_CRAWL_REQUESTS,
    MAX_CRAWL_SELECTORS,
    MAX_CRAWL_START_URLS,
    CrawlJobParams,
    CrawlJobs,
    CrawlPage,
)
from scrapeflow.crawl._links import STRATEGIES, Strategy
from scrapeflow.crawl._nocode import CrawlSpec, Field
from scrapeflow.crawl._request import Request, canonical_url, fingerprint
from scrapeflow.crawl._response import Response
from scrapeflow.crawl._router import Handler, NoHandler, Router
from scrapeflow.crawl._sitemaps import Sitemap, read_sitemap
from scrapeflow.crawl._summary import CrawlSummary
from scrapeflow.crawl._throttle import AutoThrottle

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
    "STRATEGIES",
    "AutoThrottle",
    "CrawlConfig",
    "CrawlJobParams",
    "CrawlJobs",
    "CrawlPage",
    "CrawlSpec",
    "CrawlSummary",
    "Crawler",
    "Export",
    "ExportFormat",
    "Field",
    "Handler",
    "Item",
    "NoHandler",
    "Pipeline",
    "Request",
    "Response",
    "Router",
    "Sitemap",
    "StartRequest",
    "Strategy",
    "canonical_url",
    "fingerprint",
    "plain_item",
    "read_sitemap",
]
