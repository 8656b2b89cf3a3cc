"""The HTTP client every scrapeflow scraper goes through.

>>> async with HttpClient(HttpConfig(), proxy_provider=provider) as http:  # doctest: +SKIP
...     session = http.session()                       # identity + cookies + proxy, kept together
...     response = await http.request("GET", url, session=session, validate=looks_real)

One attempt after another, ``request``:

1. takes a place in the host's slot (per ``host:port``, and per proxy: a site judges each exit
   IP apart), under the global cap and the proxy's own cap;
2. sends the request through the session's proxy and reads the whole body (capped);
3. classifies the answer: success; a ban (``ban_statuses`` or ``is_ban``) or a CAPTCHA
   (``validate`` raised) — the session is retired and the request retried, a banned proxy is
   quarantined and the host (through that IP) slows down; a throttle (429, 503) — the host
   slows down and ``Retry-After`` is honoured; another retryable failure (5xx, connection
   error, timeout) — retried with exponential backoff and jitter, and after ``rotate_after``
   consecutive failures the session moves to another proxy, the failing one being quarantined;
4. returns the :class:`Response` — any final status, 404 included; the caller judges it — or
   raises a :class:`~scrapeflow.errors.FetchError` once the retries are spent.

Requests that are not idempotent (POST, PATCH) are sent once unless marked ``safe=True`` — or
unless nobody read the attempt (no connection; a pooled connection the other side had closed,
see ``_stale``), which is sent again; through a proxy they go out on a new connection.

Steps 1 to 3, one try, are :class:`~scrapeflow.http._attempt.Attempts`; this module holds the
client's resources, its sessions and the retry loop around the tries.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from types import TracebackType
from typing import Any

import aiohttp
import yarl

from scrapeflow._util.redact import redact
from scrapeflow.errors import FetchError, RetryBudgetExhausted
from scrapeflow.http._attempt import Attempts
from scrapeflow.http._config import IDEMPOTENT_METHODS, HttpConfig
from scrapeflow.http._egress import EgressPolicy, redirect_judge
from scrapeflow.http._exchange import Observer, Wire
from scrapeflow.http._hosts import HostLimiter
from scrapeflow.http._outcome import Outcome, final_error, never_sent
from scrapeflow.http._proxypool import ProxyPool
from scrapeflow.http._response import BanCheck, Response, Validator
from scrapeflow.http._session import ScrapeSession
from scrapeflow.http._stale import trace_reuse
from scrapeflow.http._stats import Stats
from scrapeflow.proxies import ProxyProvider

__all__ = ["HttpClient", "Response"]

_STALE_RESENDS = 3
"""Requests sent again at once, per request, after a write to a pooled connection that its
peer had closed: aiohttp may hand out several such connections in a row."""
_POOL_SCAN = 16  # pooled sessions compared in full up to this many


class HttpClient:
    """Per-host slots, retries, sessions with smart proxy rotation, ban detection, stats."""

    def __init__(
        self,
        config: HttpConfig | None = None,
        *,
        proxy_provider: ProxyProvider | None = None,
        is_ban: BanCheck | None = None,
        wire: Wire | None = None,
    ) -> None:
        self.config = config or HttpConfig()
        self.rng = random.Random(self.config.seed)
        self.proxy_provider = proxy_provider
        self.is_ban = is_ban
        self.stats = Stats()
        self.hosts = HostLimiter(self.config, self.rng)
        self.proxy_pool: ProxyPool | None = None
        self._connector: aiohttp.TCPConnector | None = None
        self._fresh: aiohttp.TCPConnector | None = None
        self._attempts: Attempts | None = None
        """Each try of a request (set on entry, with the global cap and the proxies)."""
        self._sessions: set[ScrapeSession] = set()
        """Sessions open: closed ones leave (a client shared by a service's jobs for days makes
        thousands; each kept its identity, cookies and aiohttp session)."""
        self._pools: dict[str | None, list[ScrapeSession]] = {}
        self._pool_next = 0
        self._retries_spent = 0
        self._default: ScrapeSession | None = None
        self._plain: aiohttp.ClientSession | None = None
        self._egress: EgressPolicy | None = None
        self.wire = wire
        """What sends each try (None: the network); see :data:`~scrapeflow.http.Wire`."""
        self.observers: list[Observer] = []
        """Called with every :class:`~scrapeflow.http.Exchange` as its answer is read (a
        recorder, a request log): each try, retries included."""
        self.trace_configs = [trace_reuse()]
        """Given to the aiohttp session of every session through a proxy: what
        :class:`Sending` records."""

    async def __aenter__(self) -> HttpClient:
        connections = asyncio.Semaphore(self.config.max_connections)
        if self.proxy_provider is not None:
            await self.proxy_provider.load()
            self.proxy_pool = ProxyPool(
                self.proxy_provider,
                quarantine=self.config.quarantine,
                concurrency=self.config.proxy_concurrency,
                rng=self.rng,
                rotate_after=self.config.rotate_after,
            )
        egress = self.config.egress
        connect: Callable[..., aiohttp.TCPConnector] = aiohttp.TCPConnector
        if egress is not None:
            # The operator's proxies are reached whatever their address; the sites behind them
            # are judged before each request (see _attempt).
            proxies = self.proxy_provider.all_proxies() if self.proxy_provider else []
            self._egress = egress.trusting(proxies)
            connect = self._egress.connector
        self._connector = connect(limit=0, limit_per_host=0, ttl_dns_cache=300)
        self._fresh = connect(limit=0, limit_per_host=0, ttl_dns_cache=300, force_close=True)
        self._attempts = Attempts(
            self.config,
            connections=connections,
            hosts=self.hosts,
            stats=self.stats,
            pool=self.proxy_pool,
            egress=self._egress,
            is_ban=self.is_ban,
            wire=self.wire,
            observers=self.observers,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for session in list(self._sessions):
            await session.close()
        self._sessions.clear()
        if self._plain is not None:
            await self._plain.close()
            self._plain = None
        for connector in (self._connector, self._fresh):
            if connector is not None:
                await connector.close()
        self._connector = self._fresh = None

    @property
    def session_traces(self) -> list[aiohttp.TraceConfig] | None:
        """The traces of the aiohttp session of every :class:`ScrapeSession`: through a proxy,
        what :class:`Sending` records (direct requests do without its cost, a few
        microseconds each, about 3% of a bulk page's CPU); through an egress proxy, the
        policy's judgement of each redirect hop (a direct one is judged as it is dialled)."""
        traces = list(self.trace_configs) if self.proxy_provider is not None else []
        if self._egress is not None and (self._egress.proxy or self.proxy_provider):
            traces.append(redirect_judge(self._egress))
        return traces or None

    @property
    def connector(self) -> aiohttp.TCPConnector:
        if self._connector is None:
            raise RuntimeError("use the HttpClient inside 'async with'")
        return self._connector

    @property
    def fresh_connector(self) -> aiohttp.TCPConnector:
        """Connections used once: a POST through a proxy goes out on a new connection, which
        nobody can have closed before it is written (see ``_stale``)."""
        if self._fresh is None:
            raise RuntimeError("use the HttpClient inside 'async with'")
        return self._fresh

    # -- sessions ---------------------------------------------------------------------------

    def forget(self, session: ScrapeSession) -> None:
        """``session`` closed: it no longer counts among the client's."""
        self._sessions.discard(session)

    def session(self, *, country: str | None = None, site: str | None = None) -> ScrapeSession:
        """A new session: its own identity, cookies and (with a provider) proxy. ``site``
        (``host:port``): the one it is for, if one; its proxy is the good one with the fewest
        sessions for that site (a site limits each IP apart), then the fewest in all."""
        session = ScrapeSession(self, country=country, site=site)
        self._sessions.add(session)
        return session

    @property
    def default_session(self) -> ScrapeSession:
        """The session of requests that name none (created on first use)."""
        if self._default is None:
            self._default = self.session()
        return self._default

    @property
    def aiohttp_session(self) -> aiohttp.ClientSession:
        """A plain aiohttp session on the client's connection pool, for code that wants one
        (the seed's ``context.session``): no retries, identity or proxy list are applied to it.
        Under an egress policy it dials only where the policy allows, and goes through the
        policy's proxy (each redirect hop judged first) when it has one."""
        if self._plain is None:
            egress = self._egress
            proxied = egress is not None and egress.proxy is not None
            self._plain = aiohttp.ClientSession(
                connector=self.connector,
                connector_owner=False,
                cookie_jar=aiohttp.CookieJar(unsafe=True),
                timeout=aiohttp.ClientTimeout(total=self.config.timeout),
                proxy=egress.proxy if egress is not None else None,
                trace_configs=[redirect_judge(egress)] if egress is not None and proxied else None,
            )
        return self._plain

    def pooled_session(self, *, country: str | None = None) -> ScrapeSession:
        """One of a pool of sessions (two per proxy; one without proxies): the least busy.

        For bulk work where requests need no common cookies: load spreads over the proxies by
        the requests each session has in progress (in turn among equals), so a proxy that is
        slow, held by a ``Retry-After`` or being rotated away from gets less, and the rest of
        the run does not queue up behind it. Two sessions a proxy keep every proxy in use when
        a retired session moves to another one (a CAPTCHA or a ban moves it).
        """
        pool = self._pools.get(country)
        if pool is None:
            size = 2 * len(self.proxy_provider.all_proxies()) if self.proxy_provider else 1
            pool = self._pools[country] = [
                self.session(country=country) for _ in range(max(1, size))
            ]
        if len(pool) == 1:  # no proxies: nothing to choose
            return pool[0]
        self._pool_next += 1
        start, size = self._pool_next, len(pool)
        if size <= _POOL_SCAN:
            candidates = [pool[(start + i) % size] for i in range(size)]
            if self.proxy_pool is not None:
                return self.proxy_pool.least_loaded(candidates)
        else:  # the better of two picked at random: near the best, at a constant cost
            candidates = self.rng.sample(pool, 2)
        return min(candidates, key=lambda session: session.pending)

    # -- requests ---------------------------------------------------------------------------

    async def get(self, url: str, **kwargs: Any) -> Response:
        return await self.request("GET", url, **kwargs)

    async def request(
        self,
        method: str,
        url: str,
        *,
        session: ScrapeSession | None = None,
        validate: Validator | None = None,
        safe: bool = False,
        slot: str | None = None,
        retry_statuses: frozenset[int] | None = None,
        **kwargs: Any,
    ) -> Response:
        """Send ``method url`` until it succeeds or the retry policy gives up.

        ``validate(body)`` raises (``RuntimeError`` like the seed's callbacks) when the content
        is not real (a CAPTCHA); ``safe`` allows retrying a non-idempotent request; ``slot``
        overrides the host slot's key; other keyword arguments go to aiohttp (``data``,
        ``json``, ``headers``, ``params``, ``allow_redirects``).
        """
        method = method.upper()
        session = session or self.default_session
        session.pending += 1
        try:
            return await self._request(
                method, url, session, validate, safe, slot, retry_statuses, kwargs
            )
        finally:
            session.pending -= 1

    async def _request(
        self,
        method: str,
        url: str,
        session: ScrapeSession,
        validate: Validator | None,
        safe: bool,
        slot: str | None,
        retry_statuses: frozenset[int] | None,
        kwargs: dict[str, Any],
    ) -> Response:
        policy = self.config.retry
        retry_statuses = policy.statuses if retry_statuses is None else retry_statuses
        retryable_method = safe or method in IDEMPOTENT_METHODS
        target = yarl.URL(url)
        host = f"{target.host}:{target.port}"
        attempts = self._attempts
        if attempts is None:
            raise RuntimeError("use the HttpClient inside 'async with'")
        attempt = bans = waited_out = resent = 0
        while True:
            attempt += 1
            outcome = await attempts.try_once(
                method,
                target,
                host,
                session,
                slot,
                validate,
                retry_statuses,
                attempt,
                kwargs,
                resend_stale=resent < _STALE_RESENDS,
                idempotent=retryable_method,
            )
            if isinstance(outcome, Response):
                return outcome
            if outcome.kind == "stale":
                # Nobody read it and nobody is to blame: sent again at once, on another
                # connection, as no failed attempt. Bounded: a peer that takes connections and
                # drops every request is a failure (kind "connection") after that.
                resent += 1
                continue
            if outcome.kind in ("ban", "captcha"):
                bans += 1
                if session.generation == outcome.generation:
                    # Once per burnt session, however many of its requests saw it burn.
                    await session.retire()
                if not retryable_method or bans > policy.ban_retries:
                    raise self._final_error(outcome, url, attempt)
            elif (
                retryable_method
                and policy.attempts > 1
                and outcome.kind == "throttle"
                and outcome.retry_after is not None
                and waited_out < policy.throttle_retries
            ):
                waited_out += 1  # told when to come back: not a failed attempt
            elif (
                not (retryable_method or never_sent(outcome))
                or attempt - waited_out - resent >= policy.attempts
            ):
                return self._give_up(outcome, url, attempt)
            if policy.run_budget is not None and self._retries_spent >= policy.run_budget:
                raise RetryBudgetExhausted(
                    f"retry budget of {policy.run_budget} spent; last: {outcome.kind}",
                    url=redact(url),
                    attempts=attempt,
                )
            self._retries_spent += 1
            self.stats.host(host).retries += 1
            proxy_stats = self.stats.proxy(outcome.proxy)
            if proxy_stats is not None:
                proxy_stats.retries += 1
            # Waits grow with the failed attempts; a throttle waited out adds only its wait.
            failed = max(1, attempt - waited_out - resent)
            await asyncio.sleep(policy.wait(failed, self.rng, outcome.retry_after))

    def _give_up(self, outcome: Outcome, url: str, attempts: int) -> Response:
        if outcome.response is not None and outcome.kind in ("status", "throttle"):
            return outcome.response  # a final answer: the caller judges its status
        raise self._final_error(outcome, url, attempts)

    def _final_error(self, outcome: Outcome, url: str, attempts: int) -> FetchError:
        return final_error(outcome, url, attempts, timeout=self.config.timeout)
