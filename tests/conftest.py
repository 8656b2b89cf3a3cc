"""Shared fixtures: real servers on loopback, isolated directories and environment."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from scrapeflow.sandbox import PlainSite, SiteConfig, serve_in_thread

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
_SERVICE_VARS = ("WEBSHARE_API_KEY", "IPROYAL_API_KEY", "IPROYAL_ORDER_ID")


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or scrapeflow settings leak in from the machine running the tests."""
    for name in list(os.environ):
        if name.upper() in _PROXY_VARS or name in _SERVICE_VARS or name.startswith("SCRAPEFLOW_"):
            monkeypatch.delenv(name)


@dataclass
class RunningSite:
    site: PlainSite
    url: str

    def page_url(self, n: int) -> str:
        return f"{self.url}/page/{n}"

    def hits(self, path: str) -> int:
        return self.site.hits[path]


@pytest.fixture
def plain_site() -> Iterator[RunningSite]:
    """The sandbox plain site (1,000 pages, no latency), served from its own thread."""
    site = PlainSite(SiteConfig(pages=1000))
    with serve_in_thread(site.app) as url:
        yield RunningSite(site, url)


@pytest.fixture
def slow_site() -> Iterator[RunningSite]:
    """The plain site with 20-60 ms per response, so a run can be stopped halfway."""
    site = PlainSite(SiteConfig(pages=1000, latency_ms=(20.0, 60.0)))
    with serve_in_thread(site.app) as url:
        yield RunningSite(site, url)
