"""The sandbox: sites on loopback to scrape, test and benchmark against, knowing nothing of us.

>>> from scrapeflow.sandbox import PlainSite, SiteConfig, serve
>>> site = PlainSite(SiteConfig(pages=500))
>>> async with serve(site.app()) as base_url:  # doctest: +SKIP
...     ...  # scrape f"{base_url}/page/0" ... f"{base_url}/page/499"
"""

from scrapeflow.sandbox._plainsite import SITEMAP_CHUNK, PlainSite, SiteConfig
from scrapeflow.sandbox._server import serve, serve_in_thread

__all__ = ["SITEMAP_CHUNK", "PlainSite", "SiteConfig", "serve", "serve_in_thread"]
