"""Bulk fetching into a content-addressed store (gofetch), on local disk or S3.

>>> from scrapeflow.fetch import FetchSettings, read_items, run_fetch
>>> settings = FetchSettings.resolve({"store": "./store", "fetch_id": "48213"})  # doctest: +SKIP
>>> report = run_fetch(settings, read_items("urls.txt"))  # doctest: +SKIP

``scrapeflow fetch`` on the command line. Bodies land unchanged at
``{store}/{program}/sha384_content/{sha384}``, with the checksum index, the by-URL index, a
fetch log per run, optional WARC records and an optional push to a Redis stream.

One run of a shard (fetch id, offset, limit) at a time: a second is refused while the first, or
any of its worker processes, lives; workers die with their parent; a run killed at any moment
is completed exactly by the next (:class:`FetchRun`).

The service's ``fetch`` jobs (``POST /v1/jobs``) are :class:`FetchJobs`: a URL list into the
service's store, one shard per job. ``feed.page`` jobs (:class:`FeedChainJobs`) walk a cursor
feed as a chain of follow-up jobs, a page per job, on whichever workers run the queue.
"""

from typing import TYPE_CHECKING, Any

from scrapeflow.fetch._input import FetchItem, read_items
from scrapeflow.fetch._pipeline import FetchReport, fetch_items
from scrapeflow.fetch._run import GRACE_SECONDS, OUTCOMES, FetchRun, run_fetch
from scrapeflow.fetch._settings import (
    MAX_CONCURRENT_FETCHES,
    MAX_CONCURRENT_WRITERS,
    MAX_CPUS,
    FetchSettings,
)

if TYPE_CHECKING:
    from scrapeflow.fetch._feedchain import (
        FEED_PAGE_KIND,
        FeedChainJobs,
        FeedPageParams,
        chain_posts,
    )
    from scrapeflow.fetch._job import (
        FETCH_KIND,
        MAX_FETCH_JOB_CONCURRENCY,
        MAX_FETCH_JOB_DELAY,
        MAX_FETCH_JOB_PER_HOST,
        MAX_FETCH_JOB_SHARDS,
        MAX_FETCH_JOB_URLS,
        MAX_JOB_URL_LENGTH,
        FetchItemOutcome,
        FetchJobParams,
        FetchJobs,
    )

# The job kinds are loaded when first named: they bring the job machinery (SQLAlchemy, the
# queue), a third of a second of imports that `scrapeflow fetch` and its workers never use.
_LAZY = {
    "scrapeflow.fetch._feedchain": (
        "FEED_PAGE_KIND",
        "FeedChainJobs",
        "FeedPageParams",
        "chain_posts",
    ),
    "scrapeflow.fetch._job": (
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
    ),
}
_LAZY_FROM = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY_FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "FEED_PAGE_KIND",
    "FETCH_KIND",
    "GRACE_SECONDS",
    "MAX_CONCURRENT_FETCHES",
    "MAX_CONCURRENT_WRITERS",
    "MAX_CPUS",
    "MAX_FETCH_JOB_CONCURRENCY",
    "MAX_FETCH_JOB_DELAY",
    "MAX_FETCH_JOB_PER_HOST",
    "MAX_FETCH_JOB_SHARDS",
    "MAX_FETCH_JOB_URLS",
    "MAX_JOB_URL_LENGTH",
    "OUTCOMES",
    "FeedChainJobs",
    "FeedPageParams",
    "FetchItem",
    "FetchItemOutcome",
    "FetchJobParams",
    "FetchJobs",
    "FetchReport",
    "FetchRun",
    "FetchSettings",
    "chain_posts",
    "fetch_items",
    "read_items",
    "run_fetch",
]
