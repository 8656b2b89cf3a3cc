"""Crawls without code: which links to follow and which fields make an item, as text.

This is what ``scrapeflow crawl URL --follow SEL --item NAME=EXPR`` and the jobs API's
``crawl`` kind take. A field's expression is:

* a CSS selector, its first match (``h1::text``, ``a.next::attr(href)``);
* ``all:`` and a CSS selector: every match, as a list;
* ``xpath:`` (or ``all:xpath:``) and an XPath expression;
* ``@url`` (the page's URL after redirects), ``@status``, ``@depth``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parsel import Selector

from scrapeflow.crawl._response import Response
from scrapeflow.crawl._router import Router
from scrapeflow.errors import InputError

__all__ = ["CrawlSpec", "Field"]

_SPECIAL = {
    "@url": lambda r: r.url,
    "@status": lambda r: r.status,
    "@depth": lambda r: r.request.depth,
}


@dataclass(frozen=True, slots=True)
class Field:
    """One field of the items: its name and expression."""

    name: str
    expression: str

    @classmethod
    def parse(cls, text: str) -> Field:
        """``NAME=EXPR``; :class:`~scrapeflow.errors.InputError` naming what is wrong.

        >>> Field.parse("title=h1::text")
        Field(name='title', expression='h1::text')
        """
        name, sep, expression = text.partition("=")
        name, expression = name.strip(), expression.strip()
        if not sep or not name.isidentifier() or not expression:
            raise InputError(f"an item field is NAME=EXPRESSION (title='h1::text'), got {text!r}")
        field = cls(name, expression)
        field.check()
        return field

    def check(self) -> None:
        """Compile the expression once, so that a typo fails before the crawl, not on each
        page."""
        if self.expression.startswith("@"):
            if self.expression not in _SPECIAL:
                raise InputError(
                    f"field {self.name}: unknown {self.expression!r} (@url, @status or @depth)"
                )
            return
        query, kind, _ = self._query()
        try:
            probe = Selector(text="<html></html>")
            probe.xpath(query) if kind == "xpath" else probe.css(query)
        except Exception as exc:  # cssselect and lxml raise several types
            raise InputError(f"field {self.name}: invalid {kind} {query!r}: {exc}") from None

    def _query(self) -> tuple[str, str, bool]:
        text, every = self.expression, False
        if text.startswith("all:"):
            text, every = text[4:], True
        if text.startswith("xpath:"):
            return text[6:], "xpath", every
        return text, "CSS", every

    def value(self, response: Response) -> Any:
        special = _SPECIAL.get(self.expression)
        if special is not None:
            return special(response)
        query, kind, every = self._query()
        found = response.xpath(query) if kind == "xpath" else response.css(query)
        if every:
            return [v.strip() for v in found.getall()]
        first = found.get()
        return first.strip() if isinstance(first, str) else first


@dataclass(frozen=True, slots=True)
class CrawlSpec:
    """Links to follow (CSS selectors) and the fields of one item per page (none: no items)."""

    follow: tuple[str, ...] = ()
    fields: tuple[Field, ...] = ()

    @classmethod
    def parse(cls, follow: Sequence[str], items: Sequence[str]) -> CrawlSpec:
        for selector in follow:
            try:
                Selector(text="<html></html>").css(selector)
            except Exception as exc:
                raise InputError(f"--follow: invalid CSS {selector!r}: {exc}") from None
        fields = tuple(Field.parse(i) for i in items)
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise InputError(f"an item field is named twice: {', '.join(names)}")
        return cls(tuple(follow), fields)

    def router(self) -> Router:
        router = Router()
        spec = self

        @router.default_handler
        def page(response: Response) -> list[dict[str, Any]]:
            for selector in spec.follow:
                response.enqueue_links(selector)
            if not spec.fields:
                return []
            return [{f.name: f.value(response) for f in spec.fields}]

        return router
