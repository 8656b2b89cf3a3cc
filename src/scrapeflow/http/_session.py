"""A scraping session: one identity, one cookie jar and one proxy, kept together.

A bank login must not hop IPs, and a browser does not change its User-Agent between clicks: a
session keeps all three. It changes its proxy only after ``rotate_after`` consecutive failures
through it (Tesoralia's smart rotation) or when the proxy was quarantined, and is *retired* —
new proxy, new cookies, new identity — when the site bans it or shows it a CAPTCHA. A retired
session's old aiohttp session is closed once the requests still in flight on it are done.
"""

from __future__ import annotations

import itertools
import random
from typing import Protocol

import aiohttp

from scrapeflow.http._config import HttpConfig
from scrapeflow.http._identity import Identity, pick_identity
from scrapeflow.http._proxypool import ProxyPool, proxy_label

__all__ = ["ScrapeSession", "SessionOwner"]


class SessionOwner(Protocol):
    """What a session needs of the client that made it (an ``HttpClient`` is one): its
    settings, its proxies, its connectors; told when the session closes."""

    config: HttpConfig
    rng: random.Random
    proxy_pool: ProxyPool | None

    @property
    def connector(self) -> aiohttp.TCPConnector: ...
    @property
    def fresh_connector(self) -> aiohttp.TCPConnector: ...
    @property
    def session_traces(self) -> list[aiohttp.TraceConfig] | None: ...
    def forget(self, session: ScrapeSession) -> None: ...


_ids = itertools.count(1)


class ScrapeSession:
    """Create through ``HttpClient.session()``; pass to ``HttpClient.request(session=...)``."""

    def __init__(
        self, client: SessionOwner, *, country: str | None = None, site: str | None = None
    ) -> None:
        self.id = next(_ids)
        self.country = country
        self.site = site
        """The ``host:port`` the session is for, if one: proxies are spread per site."""
        self.generation = 0
        self.failures = 0
        self.retired = 0
        self.pending = 0
        """Requests in progress through this session (waiting for a place, sent, retrying)."""
        self.last_failure = ""
        self._client = client
        self.identity: Identity | None = None
        self.proxy: str | None = None
        self.http: aiohttp.ClientSession = self._open(avoid_identity=None, avoid_proxy=None)
        self._fresh: aiohttp.ClientSession | None = None
        """The same identity and cookies on connections used once (see ``checkout``)."""
        # Requests using each aiohttp session: a retired one is closed when its last ends.
        self._users: dict[aiohttp.ClientSession, int] = {}

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
            self.proxy = pool.choose(self.country, avoid=avoid_proxy, site=self.site)
            pool.assign(self.proxy, self.site)
        return aiohttp.ClientSession(
            connector=client.connector,
            connector_owner=False,
            cookie_jar=aiohttp.CookieJar(unsafe=True),  # keep cookies of IP-address hosts too
            headers=dict(self.identity.headers) if self.identity else None,
            timeout=aiohttp.ClientTimeout(total=client.config.timeout),
            auto_decompress=True,
            # Through proxies, which may close every connection after an answer (tinyproxy):
            # the trace tells a request sent on one of those (see _stale).
            trace_configs=client.session_traces,
        )

    def checkout(self, *, fresh: bool = False) -> aiohttp.ClientSession:
        """The aiohttp session to send one request with; give it back with ``checkin``.
        ``fresh``: one with the same identity and cookies whose connections serve one request
        each (the client's ``fresh_connector``)."""
        http = self._fresh_http() if fresh else self.http
        self._users[http] = self._users.get(http, 0) + 1
        return http

    def _fresh_http(self) -> aiohttp.ClientSession:
        if self._fresh is None:
            pooled = self.http
            self._fresh = aiohttp.ClientSession(
                connector=self._client.fresh_connector,
                connector_owner=False,
                cookie_jar=pooled.cookie_jar,
                headers=dict(pooled.headers),
                timeout=pooled.timeout,
                auto_decompress=True,
                trace_configs=pooled.trace_configs,
            )
        return self._fresh

    async def checkin(self, http: aiohttp.ClientSession) -> None:
        left = self._users.get(http, 1) - 1
        if left > 0:
            self._users[http] = left
            return
        self._users.pop(http, None)
        if http is not self.http and http is not self._fresh:
            await http.close()  # retired while this request was in flight

    def rotate_proxy(self) -> None:
        """Move to another proxy, keeping identity and cookies (after repeated failures).

        Also how a session left without a proxy (all were set aside) gets one back.
        """
        pool = self._client.proxy_pool
        if pool is None:
            return
        old = self.proxy
        pool.unassign(old, self.site)
        self.proxy = pool.choose(self.country, avoid=old, site=self.site)
        pool.assign(self.proxy, self.site)
        self.failures = 0

    async def retire(self) -> None:
        """Start afresh after a ban: new identity, new cookies, new proxy."""
        old_proxy = self.proxy
        old = [http for http in (self.http, self._fresh) if http is not None]
        if self._client.proxy_pool is not None:
            self._client.proxy_pool.unassign(old_proxy, self.site)
        self.http = self._open(avoid_identity=self.identity, avoid_proxy=old_proxy)
        self._fresh = None
        self.generation += 1
        self.retired += 1
        self.failures = 0
        for old_http in old:
            if old_http not in self._users:
                await old_http.close()
        # else: requests still in flight on it (its cookies, its headers) close it when done;
        # closing it under them would break them (the connector is shared, not theirs).

    async def close(self) -> None:
        if self._client.proxy_pool is not None:
            self._client.proxy_pool.unassign(self.proxy, self.site)
        for http in {self.http, *self._users, *([self._fresh] if self._fresh else [])}:
            await http.close()
        self._users.clear()
        self._fresh = None
        self._client.forget(self)
