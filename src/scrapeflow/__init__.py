"""scrapeflow: fast, parallel, resumable web scraping.

The seed API lives in its modules, as documented::

    from scrapeflow.executor import execute_async, Context, taskify
    from scrapeflow.scrape import scrape, scrape_with_validation
    from scrapeflow.status import read_status, status_summary
    from scrapeflow.proxies import ProxyProviderFromList

The most used names are re-exported here too.
"""

from scrapeflow.errors import ScrapeflowError
from scrapeflow.executor import Context, RunProgress, TaskOutcome, execute_async, taskify
from scrapeflow.proxies import ProxyProvider, ProxyProviderFromDict, ProxyProviderFromList
from scrapeflow.scrape import scrape, scrape_with_validation
from scrapeflow.status import JsonDirStore, StatusData, StatusStore, read_status, status_summary

__version__ = "0.1.0"

__all__ = [
    "Context",
    "JsonDirStore",
    "ProxyProvider",
    "ProxyProviderFromDict",
    "ProxyProviderFromList",
    "RunProgress",
    "ScrapeflowError",
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
