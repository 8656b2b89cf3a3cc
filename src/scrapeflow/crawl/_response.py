"""A fetched page as a crawl handler sees it: status, headers, text, selectors, links.

Selectors are parsel's, the library behind Scrapy's ``response.css`` and ``response.xpath``:
the same queries, ``::text`` and ``::attr(name)`` pseudo-elements, ``.get()`` and
``.getall()``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from parsel import Selector, SelectorList
from parsel.csstranslator import css2xpath
from w3lib.html import strip_html5_whitespace

from scrapeflow.crawl._links import LinkFilter, Pattern, Strategy, compile_patterns, followable
from scrapeflow.crawl._request import Request
from scrapeflow.errors import InputError

if TYPE_CHECKING:
    from multidict import CIMultiDictProxy

    from scrapeflow.http import Response as HttpResponse

__all__ = ["Response"]

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


class Response:
    """A page fetched for ``request``: what a handler is given.

    ``url`` is the URL after redirects; ``text`` the body decoded strictly (the
    ``Content-Type`` charset, else a ``<meta charset>`` in the first 2 KiB, else UTF-8; a byte
    that does not decode raises :class:`~scrapeflow.errors.UndecodableBody`).
    """

    __slots__ = (
        "_answer",
        "_base",
        "_links",
        "_seen",
        "_selector",
        "_text",
        "body",
        "enqueued",
        "headers",
        "request",
        "seen_links",
        "status",
        "url",
    )

    def __init__(
        self,
        request: Request,
        answer: HttpResponse,
        *,
        links: LinkFilter | None = None,
        seen: Container[str] = frozenset(),
    ) -> None:
        self.request = request
        self.url: str = answer.url
        self.status: int = answer.status
        self.headers: CIMultiDictProxy[str] = answer.headers
        self.body: bytes = answer.body
        self.enqueued: list[Request] = []
        """Requests the handler asked for with :meth:`enqueue_links` (the crawler adds them
        when the handler has finished)."""
        self._links = links or LinkFilter()
        self._seen = seen
        self.seen_links = 0
        """Links :meth:`enqueue_links` skipped because the crawl has seen their URLs."""
        self._answer = answer
        self._text: str | None = None
        self._selector: Selector | None = None
        self._base: str | None = None

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.url}>"

    # -- content ---------------------------------------------------------------------------

    @property
    def text(self) -> str:
        if self._text is None:
            encoding = None
            if "charset" not in self.headers.get("Content-Type", "").lower():
                found = _META_CHARSET.search(self.body[:2048])
                encoding = found.group(1).decode("ascii") if found else None
            self._text = self._answer.text(encoding)
        return self._text

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)

    @property
    def selector(self) -> Selector:
        if self._selector is None:
            content_type = self.headers.get("Content-Type", "").lower()
            kind = "xml" if "xml" in content_type and "html" not in content_type else "html"
            self._selector = Selector(text=self.text, type=kind, base_url=self.url)
        return self._selector

    def css(self, query: str) -> SelectorList[Selector]:
        """``response.css("h1::text").get()``, as in Scrapy."""
        return self.selector.css(query)

    def xpath(self, query: str, **variables: Any) -> SelectorList[Selector]:
        """``response.xpath("//h1/text()").get()``, as in Scrapy."""
        return self.selector.xpath(query, **variables)

    # -- links ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What relative links are resolved against: the page's ``<base href>``, else its URL."""
        if self._base is None:
            base = None
            if b"<base" in self.body or b"<BASE" in self.body:
                base = self.xpath("//base/@href").get()
            self._base = urljoin(self.url, strip_html5_whitespace(base)) if base else self.url
        return self._base

    def urljoin(self, url: str) -> str:
        """``url`` made absolute against the page (its ``<base href>`` when it has one)."""
        return urljoin(self.base_url, strip_html5_whitespace(url))

    def follow(
        self,
        url: str | Selector,
        *,
        label: str | None = None,
        user_data: dict[str, Any] | None = None,
        method: str = "GET",
        body: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Request:
        """A request for ``url`` (relative to the page, or a link's selector), one level
        deeper: ``yield response.follow(href, label="detail")``. It is subject to the crawl's
        rules (allowed domains, depth, robots.txt), not to a link strategy."""
        href = _href(url) if isinstance(url, Selector) else url
        if href is None:
            raise InputError(f"{url!r} is not a link (no href or src)")
        return Request(
            self.urljoin(href),
            label=label,
            method=method,
            body=body,
            headers=headers,
            user_data=user_data or {},
            depth=self.request.depth + 1,
        )

    def links(self, selector: str = "a") -> list[str]:
        """The absolute URLs of the links ``selector`` selects (elements with ``href`` or
        ``src``, or attribute and text values), in page order, without repeats or fragments."""
        try:
            query = css2xpath(selector)
        except Exception as exc:  # cssselect's parse errors, as parsel's css() raises them
            raise InputError(f"invalid CSS selector {selector!r}: {exc}") from None
        base = self.base_url
        join = _Joiner(base)
        seen: dict[str, None] = {}
        # lxml's own nodes, not parsel's Selector objects: a page's links cost microseconds;
        # and a bare tag name walks the tree (lxml's iter) rather than evaluating XPath.
        root = self.selector.root
        found_all = root.iter(selector.lower()) if selector.isalpha() else root.xpath(query)
        for found in found_all:
            href = found if isinstance(found, str) else found.get("href") or found.get("src")
            if not href:
                continue
            href = strip_html5_whitespace(href)
            if not followable(href):
                continue
            url = join(href).partition("#")[0]
            if url.startswith(("http://", "https://")):
                seen.setdefault(url, None)
        return list(seen)

    def enqueue_links(
        self,
        selector: str = "a",
        *,
        strategy: Strategy | None = None,
        include: Sequence[Pattern] | None = None,
        exclude: Sequence[Pattern] | None = None,
        label: str | None = None,
        user_data: dict[str, Any] | None = None,
    ) -> int:
        """Follow the links ``selector`` selects that the rules keep: ``strategy``,
        ``include`` and ``exclude`` globs or regexes (each, when not given, the crawl's:
        ``CrawlConfig.strategy``, ``include``, ``exclude``). They are crawled with ``label``'s
        handler once this handler has finished (if it fails, none are). Returns how many links
        not seen before in this crawl passed these rules (the crawl's own rules and
        de-duplication come after)."""
        rules = self._links
        if strategy is not None or include is not None or exclude is not None:
            rules = LinkFilter(
                strategy or rules.strategy,
                rules.include if include is None else compile_patterns(include),
                rules.exclude if exclude is None else compile_patterns(exclude),
            )
        seen, page, kept = self._seen, self.url, []
        for url in self.links(selector):
            if url in seen:  # a duplicate whatever the rules say: no need to judge it
                self.seen_links += 1
            elif rules.keeps(url, page):
                kept.append(url)
        depth = self.request.depth + 1
        self.enqueued.extend(
            Request(url, label=label, user_data=dict(user_data or {}), depth=depth) for url in kept
        )
        return len(kept)

    def follow_all(
        self, urls: Iterable[str] | None = None, *, css: str | None = None, label: str | None = None
    ) -> list[Request]:
        """Requests for several links: ``urls``, or the links ``css`` selects."""
        found = list(urls) if urls is not None else self.links(css or "a")
        return [self.follow(u, label=label) for u in found]


def _href(found: Selector) -> str | None:
    root = found.root
    if isinstance(root, str):  # ::attr(href), ::text
        return root
    attrib = found.attrib
    return attrib.get("href") or attrib.get("src")


class _Joiner:
    """``urljoin(base, href)`` for the links of one page, the common cases without urllib:
    absolute URLs, paths from the root and paths relative to the page (with ``.`` and ``..``
    segments removed as RFC 3986 says). Anything else (``//host``, ``?query``, a scheme) goes
    to urllib. A page of the Python docs has up to thousands of links; urllib's join was a
    sixth of the crawler's time there."""

    __slots__ = ("base", "directory", "origin")

    def __init__(self, base: str) -> None:
        self.base = base
        start = base.find("//") + 2
        # The authority ends at the first "/", "?" or "#" (a base may have no path).
        end = next((i for i in range(start, len(base)) if base[i] in "/?#"), len(base))
        self.origin = base[:end]
        path = base[end:].partition("?")[0].partition("#")[0] if base[end : end + 1] == "/" else "/"
        self.directory = path[: path.rfind("/") + 1]
        if start < 2:  # not an absolute URL: urllib decides
            self.origin, self.directory = "", ""

    def __call__(self, href: str) -> str:
        if href.startswith(("http://", "https://")):
            return href
        if not self.origin or href.endswith("?") or "?#" in href:  # urllib drops an empty query
            return urljoin(self.base, href)
        first = href[:1]
        if first == "/":
            if href[1:2] == "/":
                return urljoin(self.base, href)
            path = href
        elif first in ("?", "#", "") or ":" in href.partition("/")[0]:
            return urljoin(self.base, href)
        else:
            path = self.directory + href
        if "." in path:
            path, mark, rest = _split_query(path)
            if "/." in path:
                path = _remove_dot_segments(path)
            path += mark + rest
        return self.origin + path


def _split_query(path: str) -> tuple[str, str, str]:
    query, fragment = path.find("?"), path.find("#")
    cut = query if fragment < 0 or 0 <= query < fragment else fragment
    if cut < 0:
        return path, "", ""
    return path[:cut], path[cut], path[cut + 1 :]


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if len(out) > 1:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if path.endswith(("/.", "/..")):
        out.append("")
    return "/".join(out)
