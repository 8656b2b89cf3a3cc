"""What a crawl did, counted as it went, and said in a few lines at its end."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["CrawlSummary"]


@dataclass(slots=True)
class CrawlSummary:
    """Counts of one run of a crawl (a resumed crawl counts what this run did)."""

    pages: int = 0
    """Pages fetched and handled in this run."""
    resumed: int = 0
    """Pages done by an earlier run, not fetched again."""
    items: int = 0
    """Items that came out of the pipelines in this run."""
    items_dropped: int = 0
    items_invalid: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    """Failed pages by error type (``HTTPStatusError``, ``KeyError``…)."""
    robots_skipped: int = 0
    duplicates: int = 0
    """Links dropped because their URL was seen already."""
    offsite: int = 0
    too_deep: int = 0
    over_limit: int = 0
    """Links dropped because the crawl holds ``max_requests`` requests."""
    bad_links: int = 0
    """Links whose URL is not one a request can be made for (a port out of range…)."""
    sitemaps: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed: float = 0.0

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    def finish(self) -> CrawlSummary:
        self.elapsed = time.monotonic() - self.started
        return self

    def as_dict(self) -> dict[str, object]:
        return {
            "pages": self.pages,
            "resumed": self.resumed,
            "items": self.items,
            "items_dropped": self.items_dropped,
            "items_invalid": self.items_invalid,
            "errors": dict(self.errors),
            "robots_skipped": self.robots_skipped,
            "duplicates": self.duplicates,
            "offsite": self.offsite,
            "too_deep": self.too_deep,
            "over_limit": self.over_limit,
            "bad_links": self.bad_links,
            "sitemaps": self.sitemaps,
            "elapsed": round(self.elapsed, 3),
        }

    def __str__(self) -> str:
        rate = self.pages / self.elapsed if self.elapsed > 0 else 0.0
        lines = [
            f"{self.pages:,} pages in {self.elapsed:.1f} s ({rate:,.0f}/s), "
            f"{self.items:,} items; {self.resumed:,} pages done before"
        ]
        if self.errors:
            shown = ", ".join(f"{kind} {count:,}" for kind, count in self.errors.most_common())
            lines.append(f"failed pages: {shown}")
        dropped = [
            (self.duplicates, "duplicate links"),
            (self.robots_skipped, "pages robots.txt disallows"),
            (self.offsite, "links off the allowed domains"),
            (self.too_deep, "links past max_depth"),
            (self.over_limit, "links past max_requests"),
            (self.bad_links, "links that are not URLs of pages"),
            (self.items_dropped, "items dropped by pipelines"),
            (self.items_invalid, "items the model refused"),
        ]
        kept = [f"{n:,} {what}" for n, what in dropped if n]
        if kept:
            lines.append("skipped: " + ", ".join(kept))
        return "\n".join(lines)
