"""The sandbox's plain site: deterministic pages, links that resolve, a complete sitemap."""

from __future__ import annotations

import re

import aiohttp

from scrapeflow.cli._demo import sitemap_urls
from scrapeflow.sandbox import PlainSite, SiteConfig, serve


async def test_same_seed_same_pages_other_seed_other_pages() -> None:
    a, b, c = (
        PlainSite(SiteConfig(seed=1)),
        PlainSite(SiteConfig(seed=1)),
        PlainSite(SiteConfig(seed=2)),
    )
    assert a.page_html(42) == b.page_html(42)
    assert a.page_html(42) != c.page_html(42)


async def test_sitemap_lists_every_page_and_links_resolve() -> None:
    site = PlainSite(SiteConfig(pages=12_345))  # more than one sitemap chunk
    async with serve(site.app()) as base, aiohttp.ClientSession() as session:
        urls = await sitemap_urls(base, limit=10**6)
        assert len(urls) == 12_345
        assert urls[0] == f"{base}/page/0" and urls[-1] == f"{base}/page/12344"
        async with session.get(urls[77]) as response:
            html = await response.text()
        links = re.findall(r'href="(/page/\d+)"', html)
        assert len(links) == 8
        for link in links:
            async with session.get(base + link) as response:
                assert response.status == 200
        async with session.get(f"{base}/page/12345") as response:
            assert response.status == 404
        async with session.get(f"{base}/robots.txt") as response:
            assert f"Sitemap: {base}/sitemap.xml" in await response.text()


async def test_latency_is_added_per_response() -> None:
    site = PlainSite(SiteConfig(pages=10, latency_ms=(150.0, 150.0)))
    async with serve(site.app()) as base, aiohttp.ClientSession() as session:
        loop = __import__("asyncio").get_running_loop()
        started = loop.time()
        async with session.get(f"{base}/page/1") as response:
            await response.read()
        assert loop.time() - started >= 0.15
