"""A crawl's rules and politeness, in one frozen settings object."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from scrapeflow.crawl._links import STRATEGIES, LinkFilter, Pattern, Strategy, compile_patterns
from scrapeflow.crawl._throttle import AutoThrottle
from scrapeflow.errors import ConfigError

__all__ = ["CrawlConfig"]


@dataclass(frozen=True, slots=True)
class CrawlConfig:
    """How far a crawl goes and how politely.

    >>> CrawlConfig(max_depth=2, allowed_domains=("example.com",)).strategy
    'same-hostname'
    """

    max_depth: int | None = None
    """Links followed from a start URL at most (0: the start URLs only). None: no limit."""
    max_requests: int | None = None
    """Requests in the whole crawl at most (all runs together), start URLs included."""
    allowed_domains: tuple[str, ...] = ()
    """Followed links must be on these domains or their subdomains (Scrapy's rule)."""
    strategy: Strategy = "same-hostname"
    """``enqueue_links``' strategy when a call gives none."""
    include: tuple[Pattern, ...] = ()
    """``enqueue_links``' include patterns when a call gives none (globs or regexes)."""
    exclude: tuple[Pattern, ...] = ()
    """``enqueue_links``' exclude patterns when a call gives none."""
    concurrency: int = 32
    """Pages fetched and handled at once."""
    per_host: int = 8
    """Requests in flight to one host at most."""
    delay: float = 0.0
    """Seconds between two requests to a host at least."""
    timeout: float = 30.0
    """Seconds for one page: its fetch (with retries) and its handler."""
    retries: int = 2
    """Retries of a request (5xx, 429, timeouts, dropped connections)."""
    obey_robots: bool = True
    user_agent: str = "scrapeflow"
    """Sent as ``User-Agent``; robots.txt rules for this name (or ``*``) apply."""
    autothrottle: AutoThrottle | None = None
    """Adapt each host's delay to its latency (off by default, as in Scrapy)."""
    strict: bool = False
    """An exception in a handler stops the crawl (the engine's rule), instead of failing its
    page only."""
    sitemap_since: dt.datetime | None = None
    """Pages of a sitemap with an older ``lastmod`` are not crawled."""
    sitemap_label: str | None = None
    """The label of requests read from sitemaps."""
    extra_statuses: frozenset[int] = field(default_factory=frozenset)
    """Statuses besides 2xx given to handlers (others fail their page)."""

    def __post_init__(self) -> None:
        if self.max_depth is not None and self.max_depth < 0:
            raise ConfigError(f"max_depth must be >= 0, got {self.max_depth}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ConfigError(f"max_requests must be at least 1, got {self.max_requests}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}: one of {', '.join(STRATEGIES)}")
        if self.concurrency < 1 or self.per_host < 1:
            raise ConfigError("concurrency and per_host must be at least 1")
        if self.delay < 0 or self.timeout <= 0 or self.retries < 0:
            raise ConfigError("delay and retries must be >= 0, timeout positive")
        if isinstance(self.allowed_domains, str):  # type: ignore[unreachable]
            raise ConfigError("allowed_domains is a tuple of domains, not one string")
        object.__setattr__(
            self, "allowed_domains", tuple(d.lower().strip(".") for d in self.allowed_domains)
        )
        self.links()  # bad patterns fail here, not on the first page
        if self.sitemap_since is not None and self.sitemap_since.tzinfo is None:
            object.__setattr__(self, "sitemap_since", self.sitemap_since.replace(tzinfo=dt.UTC))

    def links(self) -> LinkFilter:
        """The link rules ``enqueue_links`` applies when a call gives none of its own."""
        return LinkFilter(
            self.strategy, compile_patterns(self.include), compile_patterns(self.exclude)
        )
