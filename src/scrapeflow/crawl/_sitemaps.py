"""Sitemaps: an index of sitemaps, or a list of pages with their last modification.

Read as the protocol (sitemaps.org) says, gzipped or not (by the body's magic bytes, not its
name), at most 50 MB uncompressed (the protocol's bound: a bigger one is cut there, not read
into memory whole). Parsed by lxml through parsel, which resolves no external entities.
"""

from __future__ import annotations

import datetime as dt
import zlib
from dataclasses import dataclass

from parsel import Selector

__all__ = ["Sitemap", "read_sitemap"]

_MAX_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Sitemap:
    """A read sitemap: child sitemaps (an index) and pages, each with its ``lastmod``."""

    sitemaps: list[tuple[str, dt.datetime | None]]
    pages: list[tuple[str, dt.datetime | None]]


def read_sitemap(body: bytes) -> Sitemap:
    """``body`` (XML, gzipped or not) as a :class:`Sitemap`.

    >>> read_sitemap(b'<urlset><url><loc> http://a.test/1 </loc></url></urlset>').pages
    [('http://a.test/1', None)]
    """
    if body[:2] == b"\x1f\x8b":
        body = zlib.decompressobj(wbits=31).decompress(body, _MAX_BYTES)
    selector = Selector(body=body[:_MAX_BYTES], type="xml")
    selector.remove_namespaces()

    def entries(path: str) -> list[tuple[str, dt.datetime | None]]:
        found = []
        for entry in selector.xpath(path):
            loc = (entry.xpath("loc/text()").get() or "").strip()
            if loc.startswith(("http://", "https://")):
                found.append((loc, _date(entry.xpath("lastmod/text()").get())))
        return found

    return Sitemap(entries("/sitemapindex/sitemap"), entries("/urlset/url"))


def _date(text: str | None) -> dt.datetime | None:
    """A W3C datetime (``2026-11-01``, ``2026-11-01T10:00:00+01:00``) in UTC; None if absent
    or unreadable."""
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)
