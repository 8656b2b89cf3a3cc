"""A scraping session: one identity, one cookie jar and one proxy, kept together.

A bank login must not hop IPs, and a browser does not change its User-Agent between clicks: a
session keeps all three. It changes its proxy only after ``rotate_after`` consecutive failures
through it (Tesoralia's smart rotation), and is *retired* — new proxy, new cookies, new
identity — when the site bans it or shows it a CAPTCHA.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import aiohttp

from scrapeflow.http._identity import Identity, pick_identity
from scrapeflow.http._proxypool import proxy_label

if TYPE_CHECKING:
    from scrapeflow.http._client import HttpClient

__all__ = ["ScrapeSession"]

_ids = itertools.count(1)


class ScrapeSession:
    """Create through ``HttpClient.session()``; pass to ``HttpClient.request(session=...)``."""

    def __init__(self, client: HttpClient, *, country: str | None = None) -> None:
        self.id = next(_ids)
        self.country = country
        self.generation = 0
        self.failures = 0
        self.retired = 0
        self.last_failure = ""
        self._client = client
        self.identity: Identity | None = None
        self.proxy: str | None = None
        self.http: aiohttp.ClientSession = self._open(avoid_identity=None, avoid_proxy=None)

    def __repr__(self) -> str:
        name = self.identity.name if self.identity else "aiohttp"
        return f"<ScrapeSession #{self.id} {name} via {proxy_label(self.proxy) or 'direct'}>"

    @property
    def proxy_label(self) -> str | None:
        return proxy_label(self.proxy)

    def _open(
        self, *, avoid_identity: Identity | None, avoid_proxy: str | None
    ) -> aiohttp.ClientSession:
        client = self._client
        if client.config.identities == "browser":
            self.identity = pick_identity(client.rng, avoid=avoid_identity)
        pool = client.proxy_pool
        if pool is not None:
            self.proxy = pool.choose(self.country, avoid=avoid_proxy)
            pool.assign(self.proxy)
        return aiohttp.ClientSession(
            connector=client.connector,
            connector_owner=False,
            cookie_jar=aiohttp.CookieJar(unsafe=True),  # keep cookies of IP-address hosts too
            headers=dict(self.identity.headers) if self.identity else None,
            timeout=aiohttp.ClientTimeout(total=client.config.timeout),
            auto_decompress=True,
        )

    def rotate_proxy(self) -> None:
        """Move to another proxy, keeping identity and cookies (after repeated failures)."""
        pool = self._client.proxy_pool
        if pool is None or self.proxy is None:
            return
        old = self.proxy
        pool.unassign(old)
        self.proxy = pool.choose(self.country, avoid=old)
        pool.assign(self.proxy)
        self.failures = 0

    async def retire(self) -> None:
        """Start afresh after a ban: new identity, new cookies, new proxy."""
        old_http, old_proxy = self.http, self.proxy
        if self._client.proxy_pool is not None:
            self._client.proxy_pool.unassign(old_proxy)
        self.http = self._open(avoid_identity=self.identity, avoid_proxy=old_proxy)
        self.generation += 1
        self.retired += 1
        self.failures = 0
        await old_http.close()  # requests already in flight finish; the connector is shared

    async def close(self) -> None:
        if self._client.proxy_pool is not None:
            self._client.proxy_pool.unassign(self.proxy)
        await self.http.close()
