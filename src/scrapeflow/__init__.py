"""scrapeflow: fast, parallel, resumable web scraping.

The seed API lives in its modules, as documented::

    from scrapeflow.executor import execute_async, Context, taskify
    from scrapeflow.scrape import scrape, scrape_with_validation
    from scrapeflow.status import read_status, status_summary
    from scrapeflow.proxies import ProxyProviderFromList

The most used names are re-exported here too, loaded on first use: ``import scrapeflow`` (and so
``scrapeflow --help``) does not pay for aiohttp until a name that needs it is touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from scrapeflow.errors import ScrapeflowError

if TYPE_CHECKING:
    from scrapeflow.executor import Context, RunProgress, TaskOutcome, execute_async, taskify
    from scrapeflow.proxies import ProxyProvider, ProxyProviderFromDict, ProxyProviderFromList
    from scrapeflow.scrape import scrape, scrape_with_validation
    from scrapeflow.status import (
        JsonDirStore,
        StatusData,
        StatusStore,
        read_status,
        status_summary,
    )
    from scrapeflow.statusdb import SqlStatusStore

__version__ = "0.1.0"

_LAZY = {
    "Context": "scrapeflow.executor",
    "RunProgress": "scrapeflow.executor",
    "TaskOutcome": "scrapeflow.executor",
    "execute_async": "scrapeflow.executor",
    "taskify": "scrapeflow.executor",
    "ProxyProvider": "scrapeflow.proxies",
    "ProxyProviderFromDict": "scrapeflow.proxies",
    "ProxyProviderFromList": "scrapeflow.proxies",
    "scrape": "scrapeflow.scrape",
    "scrape_with_validation": "scrapeflow.scrape",
    "JsonDirStore": "scrapeflow.status",
    "StatusData": "scrapeflow.status",
    "StatusStore": "scrapeflow.status",
    "read_status": "scrapeflow.status",
    "status_summary": "scrapeflow.status",
    "SqlStatusStore": "scrapeflow.statusdb",
}

__all__ = [
    "Context",
    "JsonDirStore",
    "ProxyProvider",
    "ProxyProviderFromDict",
    "ProxyProviderFromList",
    "RunProgress",
    "ScrapeflowError",
    "SqlStatusStore",
    "StatusData",
    "StatusStore",
    "TaskOutcome",
    "__version__",
    "execute_async",
    "read_status",
    "scrape",
    "scrape_with_validation",
    "status_summary",
    "taskify",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'scrapeflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
