"""A fetched page as a crawl handler sees it: status, headers, text, selectors, links.

Selectors are parsel's, the library behind Scrapy's ``response.css`` and ``response.xpath``:
the same queries, ``::text`` and ``::attr(name)`` pseudo-elements, ``.get()`` and
``.getall()``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from parsel import Selector, SelectorList
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
        "_selector",
        "_text",
        "body",
        "enqueued",
        "headers",
        "request",
        "status",
        "url",
    )

    def __init__(
        self,
        request: Request,
        answer: HttpResponse,
        *,
        links: LinkFilter | None = None,
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
            kind = "xml" if "xml" in self.headers.get("Content-Type", "") else "html"
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
        ``src``, or attribute and text values), in page order, without repeats."""
        seen: dict[str, None] = {}
        for found in self.css(selector):
            href = _href(found)
            if href is None:
                continue
            href = strip_html5_whitespace(href)
            if followable(href):
                url = self.urljoin(href).partition("#")[0]
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
        passed these rules (the crawl's own rules and de-duplication come after)."""
        default = self._links
        rules = LinkFilter(
            strategy or default.strategy,
            default.include if include is None else compile_patterns(include),
            default.exclude if exclude is None else compile_patterns(exclude),
        )
        kept = [url for url in self.links(selector) if rules.keeps(url, self.url)]
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
