"""The plain site: a deterministic website of linked pages with a sitemap.

Routes::

    GET /                      home page, links to the first pages
    GET /page/{n}              page n (0 <= n < pages): a title, paragraphs, links to other pages
    GET /sitemap.xml           sitemap index; /sitemap-{i}.xml list the pages 10,000 at a time,
                               each with a lastmod (page n: 2026-01-01 plus n % 365 days)
    GET /sitemap.xml.gz        the same, gzipped (its chunks /sitemap-{i}.xml.gz, gzipped too)
    GET /robots.txt            points at the sitemap; ``disallow`` and ``crawl_delay`` add rules
    GET /status/{code}         answers with that status code
    ANY /echo                  the request's method, query, form or JSON body and headers, as JSON
    GET /delay/{ms}            answers after ms milliseconds
    GET /bytes/{n}             n deterministic bytes
    GET /redirect/{n}          302 to /page/{n}

Same seed, same pages. Pages are made on request from the seed and their number, so a site of a
million pages costs no memory. ``SiteConfig.latency_ms`` adds a delay per response.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import hashlib
import random
from collections import Counter
from dataclasses import dataclass
from html import escape

from aiohttp import web
from aiohttp.typedefs import Handler

__all__ = ["PlainSite", "SiteConfig"]

SITEMAP_CHUNK = 10_000
_MAX_BYTES = 64 * 1024 * 1024
_MAX_DELAY_MS = 600_000
_WORDS = (
    "river stone market lantern harbor meadow signal copper orchard velvet canyon ember glacier "
    "atlas beacon cedar delta falcon garnet horizon island juniper kettle lumen mosaic nectar "
    "opal prism quartz raven saffron tundra umber vessel willow zephyr"
).split()


@dataclass(frozen=True, slots=True)
class SiteConfig:
    """How the plain site behaves. ``latency_ms`` is a (low, high) range drawn per response."""

    pages: int = 1000
    seed: int = 0
    links_per_page: int = 8
    paragraphs: int = 4
    latency_ms: tuple[float, float] = (0.0, 0.0)
    disallow: tuple[str, ...] = ()
    """Paths robots.txt disallows to every user agent."""
    crawl_delay: float | None = None
    """robots.txt's ``Crawl-delay``, in seconds."""


class PlainSite:
    """The plain site's pages and app. ``hits`` counts requests per path (for tests)."""

    def __init__(self, config: SiteConfig | None = None) -> None:
        self.config = config or SiteConfig()
        self.hits: Counter[str] = Counter()
        rng = random.Random(f"plain-text:{self.config.seed}")
        self._words = [rng.choice(_WORDS) for _ in range(20_000)]

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/", self._home)
        app.router.add_get("/page/{n:\\d+}", self._page)
        app.router.add_get("/sitemap.xml", self._sitemap_index)
        app.router.add_get("/sitemap.xml.gz", self._sitemap_index)
        app.router.add_get("/sitemap-{i:\\d+}.xml", self._sitemap_chunk)
        app.router.add_get("/sitemap-{i:\\d+}.xml.gz", self._sitemap_chunk)
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/status/{code:\\d{3}}", self._status)
        app.router.add_route("*", "/echo", self._echo)
        app.router.add_get("/delay/{ms:\\d+}", self._delay)
        app.router.add_get("/bytes/{n:\\d+}", self._bytes)
        app.router.add_get("/redirect/{n:\\d+}", self._redirect)
        return app

    def page_title(self, n: int) -> str:
        h = _mix(self.config.seed, n, 1)
        words = [_WORDS[(h >> (16 * i)) % len(_WORDS)].capitalize() for i in range(3)]
        return " ".join(words) + f" #{n}"

    def page_lastmod(self, n: int) -> str:
        """The date the sitemap gives page ``n``."""
        return (datetime.date(2026, 1, 1) + datetime.timedelta(days=n % 365)).isoformat()

    def page_links(self, n: int) -> list[int]:
        pages = self.config.pages
        count = min(self.config.links_per_page, pages)
        return [_mix(self.config.seed, n, 100 + i) % pages for i in range(count)]

    def page_html(self, n: int) -> str:
        # Integer hashing, not a seeded Random per title and link: seeding costs ~10 us, and a
        # page has ten of them; a page now costs microseconds, so benchmarks measure the client.
        h = _mix(self.config.seed, n, 2)
        title = escape(self.page_title(n))
        words = self._words
        spans = []
        for i in range(self.config.paragraphs):
            start = (h >> (10 * i)) % (len(words) - 90)
            spans.append(words[start : start + 40 + (h >> (7 * i)) % 51])
        paragraphs = "\n".join("<p>" + " ".join(span) + ".</p>" for span in spans)
        links = "\n".join(
            f'<li><a href="/page/{m}">{escape(self.page_title(m))}</a></li>'
            for m in self.page_links(n)
        )
        return (
            f"<!doctype html><html><head><title>{title}</title></head><body>"
            f'<h1 id="title">{title}</h1><article data-page="{n}">{paragraphs}</article>'
            f'<ul class="links">{links}</ul></body></html>'
        )

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.hits[request.path] += 1
        low, high = self.config.latency_ms
        if high > 0:
            await asyncio.sleep(random.uniform(low, high) / 1000)
        response: web.StreamResponse = await handler(request)
        return response

    async def _home(self, request: web.Request) -> web.Response:
        links = "".join(
            f'<li><a href="/page/{n}">page {n}</a></li>' for n in range(min(20, self.config.pages))
        )
        return web.Response(
            text=f"<html><body><ul>{links}</ul></body></html>", content_type="text/html"
        )

    async def _page(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n >= self.config.pages:
            raise web.HTTPNotFound(text=f"no page {n}")
        return web.Response(text=self.page_html(n), content_type="text/html")

    async def _sitemap_index(self, request: web.Request) -> web.Response:
        base = f"{request.scheme}://{request.host}"
        chunks = range((self.config.pages + SITEMAP_CHUNK - 1) // SITEMAP_CHUNK)
        gz = ".gz" if request.path.endswith(".gz") else ""
        entries = "".join(
            f"<sitemap><loc>{base}/sitemap-{i}.xml{gz}</loc></sitemap>" for i in chunks
        )
        return _xml(f'<sitemapindex xmlns="{_SITEMAP_NS}">{entries}</sitemapindex>', gzipped=gz)

    async def _sitemap_chunk(self, request: web.Request) -> web.Response:
        i = int(request.match_info["i"])
        start = i * SITEMAP_CHUNK
        if start >= self.config.pages:
            raise web.HTTPNotFound(text=f"no sitemap chunk {i}")
        base = f"{request.scheme}://{request.host}"
        stop = min(start + SITEMAP_CHUNK, self.config.pages)
        entries = "".join(
            f"<url><loc>{base}/page/{n}</loc><lastmod>{self.page_lastmod(n)}</lastmod></url>"
            for n in range(start, stop)
        )
        gzipped = request.path.endswith(".gz")
        return _xml(f'<urlset xmlns="{_SITEMAP_NS}">{entries}</urlset>', gzipped=gzipped)

    async def _robots(self, request: web.Request) -> web.Response:
        base = f"{request.scheme}://{request.host}"
        rules = "".join(f"Disallow: {path}\n" for path in self.config.disallow)
        if self.config.crawl_delay is not None:
            rules += f"Crawl-delay: {self.config.crawl_delay}\n"
        return web.Response(text=f"User-agent: *\n{rules}Allow: /\nSitemap: {base}/sitemap.xml\n")

    async def _status(self, request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        if not 200 <= code <= 599:
            raise web.HTTPBadRequest(text="status codes from 200 to 599")
        return web.Response(status=code, text=f"status {code}")

    async def _echo(self, request: web.Request) -> web.Response:
        body: object
        if request.content_type == "application/json":
            body = await request.json()
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            body = dict(await request.post())
        else:
            body = (await request.read()).decode(errors="replace")
        return web.json_response(
            {
                "method": request.method,
                "query": dict(request.query),
                "body": body,
                "headers": dict(request.headers),
            }
        )

    async def _delay(self, request: web.Request) -> web.Response:
        ms = int(request.match_info["ms"])
        if ms > _MAX_DELAY_MS:
            raise web.HTTPBadRequest(text=f"at most {_MAX_DELAY_MS} ms")
        await asyncio.sleep(ms / 1000)
        return web.Response(text=f"waited {ms} ms")

    async def _bytes(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n > _MAX_BYTES:
            raise web.HTTPBadRequest(text=f"at most {_MAX_BYTES} bytes")
        block = hashlib.sha512(str(self.config.seed).encode()).digest()
        return web.Response(body=(block * (n // len(block) + 1))[:n])

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/page/{request.match_info['n']}")


def _mix(seed: int, n: int, salt: int) -> int:
    """A deterministic 64-bit hash of (seed, n, salt): splitmix64's finaliser."""
    x = (seed * 0x9E3779B97F4A7C15 + n * 0xBF58476D1CE4E5B9 + salt * 0x94D049BB133111EB) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


_MASK = (1 << 64) - 1
_SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def _xml(text: str, *, gzipped: object = False) -> web.Response:
    body = ('<?xml version="1.0" encoding="UTF-8"?>' + text).encode()
    if gzipped:
        return web.Response(body=gzip.compress(body), content_type="application/gzip")
    return web.Response(body=body, content_type="application/xml", charset="utf-8")
