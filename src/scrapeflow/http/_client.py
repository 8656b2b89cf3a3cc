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
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import aiohttp
import yarl

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.errors import (
    EgressBlocked,
    FetchError,
    NoProxyAvailable,
    RetryBudgetExhausted,
)
from scrapeflow.http._config import IDEMPOTENT_METHODS, HttpConfig
from scrapeflow.http._egress import EgressPolicy, egress_refusal, judge_target, redirect_judge
from scrapeflow.http._exchange import exchange
from scrapeflow.http._hosts import HostLimiter, HostSlot
from scrapeflow.http._outcome import (
    Outcome,
    count_failure,
    describe,
    error_text,
    final_error,
    judge,
    never_sent,
)
from scrapeflow.http._proxypool import ProxyPool, proxy_label
from scrapeflow.http._response import BanCheck, Response, Validator
from scrapeflow.http._session import ScrapeSession
from scrapeflow.http._stale import Sending, trace_reuse
from scrapeflow.http._stale import stale as is_stale
from scrapeflow.http._stats import Stats
from scrapeflow.proxies import ProxyProvider

__all__ = ["HttpClient", "Response"]

_log = get_logger(__name__)
_PROXY_FAILURES = (aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError)
_STALE_RESENDS = 3
"""Requests sent again at once, per request, after a write to a pooled connection that its
peer had closed: aiohttp may hand out several such connections in a row."""
_NOT_THE_PROXYS = frozenset({"throttle", "captcha", "stale"})
"""Failures a proxy relayed or had no part in, not held against it."""
_POOL_SCAN = 16  # pooled sessions compared in full up to this many


class HttpClient:
    """Per-host slots, retries, sessions with smart proxy rotation, ban detection, stats."""

    def __init__(
        self,
        config: HttpConfig | None = None,
        *,
        proxy_provider: ProxyProvider | None = None,
        is_ban: BanCheck | None = None,
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
        self._global: asyncio.Semaphore | None = None
        self._sessions: set[ScrapeSession] = set()
        """Sessions open: closed ones leave (a client shared by a service's jobs for days makes
        thousands; each kept its identity, cookies and aiohttp session)."""
        self._pools: dict[str | None, list[ScrapeSession]] = {}
        self._pool_next = 0
        self._retries_spent = 0
        self._default: ScrapeSession | None = None
        self._plain: aiohttp.ClientSession | None = None
        self._egress: EgressPolicy | None = None
        self.trace_configs = [trace_reuse()]
        """Given to the aiohttp session of every session through a proxy: what
        :class:`Sending` records."""

    async def __aenter__(self) -> HttpClient:
        self._global = asyncio.Semaphore(self.config.max_connections)
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
            # are judged before each request (see _egress_check).
            proxies = self.proxy_provider.all_proxies() if self.proxy_provider else []
            self._egress = egress.trusting(proxies)
            connect = self._egress.connector
        self._connector = connect(limit=0, limit_per_host=0, ttl_dns_cache=300)
        self._fresh = connect(limit=0, limit_per_host=0, ttl_dns_cache=300, force_close=True)
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
        attempt = bans = waited_out = resent = 0
        while True:
            attempt += 1
            outcome = await self._attempt(
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

    async def _attempt(
        self,
        method: str,
        url: yarl.URL,
        host: str,
        session: ScrapeSession,
        slot_key: str | None,
        validate: Validator | None,
        retry_statuses: frozenset[int],
        attempt: int,
        kwargs: dict[str, Any],
        *,
        resend_stale: bool,
        idempotent: bool,
    ) -> Response | Outcome:
        """One try: its response, or why it failed, charged to the proxy, session and host
        slot it concerns. ``resend_stale``: a request nobody read (see ``_stale``; for an
        ``idempotent`` one, more cases) is kind ``stale``, charged to nobody, its place on the
        host's grid given back; else it is a connection failure like any other."""
        if self._global is None:
            raise RuntimeError("use the HttpClient inside 'async with'")
        pool = self.proxy_pool
        host_stats = self.stats.host(host)
        proxy, generation, host_slot, place = await self._take_place(session, host, slot_key, url)
        label = proxy_label(proxy)
        proxy_stats = self.stats.proxy(label)
        sent_at = asyncio.get_running_loop().time()
        started = time.monotonic()
        outcome: Response | Outcome
        stale = False
        sending = Sending()
        try:
            async with self._global, pool.slot(proxy) if pool else contextlib.nullcontext():
                host_stats.requests += 1
                if proxy_stats:
                    proxy_stats.requests += 1
                # Not idempotent, through a proxy: on a new connection (see _stale).
                fresh = proxy is not None and not idempotent
                response = await self._send(
                    method, url, session, proxy, attempt, sending, kwargs, fresh=fresh
                )
        except _PROXY_FAILURES as exc:
            outcome = Outcome("proxy", error=exc)
        except TimeoutError as exc:
            outcome = Outcome("timeout", error=exc)
        except FetchError:
            raise
        except aiohttp.ClientError as exc:
            refusal = egress_refusal(exc)
            if refusal is not None:  # the policy refused the address: final, never retried
                raise EgressBlocked(
                    refusal.address_class, url=redact(str(url)), attempts=attempt
                ) from None
            unread = is_stale(exc, sending, idempotent=idempotent)
            stale = unread and resend_stale
            outcome = Outcome("stale" if stale else "connection", error=exc, unread=unread)
        else:
            outcome = judge(
                response,
                validate,
                retry_statuses,
                ban_statuses=self.config.ban_statuses,
                is_ban=self.is_ban,
            )
        finally:
            host_slot.release(unused=place if stale else None)
        elapsed = time.monotonic() - started
        if isinstance(outcome, Response):
            host_slot.on_success()
            session.failures = 0
            if pool is not None:
                pool.recovered(proxy)
            host_stats.ok += 1
            host_stats.timed(elapsed)
            if proxy_stats:
                proxy_stats.ok += 1
                proxy_stats.timed(elapsed)
            return outcome
        outcome.proxy, outcome.generation = label, generation
        count_failure(outcome, host_stats, proxy_stats)
        session.last_failure = describe(outcome)
        if outcome.kind == "throttle" or (outcome.kind == "ban" and proxy is None):
            # Not a CAPTCHA: sites serve them at random, to a fingerprint, to a cookie; it
            # burns the session (retired and retried), it does not say "slower". Cutting the
            # rate on each would keep an IP at half speed on a site that shows them to 5%.
            # Nor a ban through a proxy: the IP is set aside, and when it comes back its next
            # request is its re-check; a slot slowed by each ban held the requests queued for
            # that IP for minutes.
            status = outcome.response.status if outcome.response else None
            doubtful = status == 503 and outcome.retry_after is None
            host_slot.on_throttle(outcome.retry_after, sent_at=sent_at, doubtful=doubtful)
        if pool is not None and proxy is not None and outcome.kind not in _NOT_THE_PROXYS:
            # A throttle is the site pacing this IP, a CAPTCHA the site judging the session
            # (the session is retired): the proxy relayed both. At 5% CAPTCHAs, counting them
            # set a working proxy aside for 30 s about once a run. A ban burns the IP. A
            # stale connection is nobody's failure: counted, tinyproxy (closing after every
            # answer) was set aside after three in a row, and a launch could lose every IP.
            hard = outcome.kind in ("proxy", "ban")
            seconds = pool.failed(proxy, hard=hard, sent_at=sent_at)
            if seconds is not None:
                _log.info("http.proxy_quarantined", proxy=label, seconds=round(seconds, 3))
        if outcome.kind in ("proxy", "timeout", "connection", "status"):
            session.failures += 1
            still_there = session.proxy == proxy and session.generation == generation
            if pool is not None and proxy is not None and still_there:
                quarantined = pool.is_quarantined(proxy)
                if quarantined or session.failures >= self.config.rotate_after:
                    session.rotate_proxy()
        _log.debug(
            "http.attempt_failed",
            host=host,
            proxy=label,
            attempt=attempt,
            kind=outcome.kind,
            status=outcome.response.status if outcome.response else None,
            error=None if outcome.error is None else error_text(outcome.error),
            seconds=round(elapsed, 3),
        )
        return outcome

    async def _take_place(
        self, session: ScrapeSession, host: str, slot_key: str | None, url: yarl.URL
    ) -> tuple[str | None, int, HostSlot, float | None]:
        """The session's proxy and generation, and a place taken in the slot of the host as
        seen through that proxy (its exit IP is paced apart), with its start on the grid."""
        pool = self.proxy_pool
        while True:
            if pool is not None and (session.proxy is None or pool.is_quarantined(session.proxy)):
                # Its proxy was set aside (by this session's failures or another's), or none
                # was left when it last chose: choose again; never send directly.
                session.rotate_proxy()
                if session.proxy is None:
                    raise NoProxyAvailable(
                        "no good proxy left: every proxy is quarantined or bad"
                        + (
                            f" (last failure: {session.last_failure})"
                            if session.last_failure
                            else ""
                        ),
                        url=redact(str(url)),
                    )
            proxy, generation = session.proxy, session.generation
            label = proxy_label(proxy)
            host_slot = self.hosts.slot(slot_key or (host if label is None else f"{host}@{label}"))
            place = await host_slot.acquire()
            if pool is None or proxy is None or not pool.is_quarantined(proxy):
                return proxy, generation, host_slot, place
            # Set aside while this request waited for its place (a ban seen by another one):
            # go through another IP now rather than send to a known-bad one, and give the
            # place back, since the site never sees it.
            host_slot.release(unused=place)

    async def _send(
        self,
        method: str,
        url: yarl.URL,
        session: ScrapeSession,
        proxy: str | None,
        attempt: int,
        sending: Sending,
        kwargs: dict[str, Any],
        *,
        fresh: bool,
    ) -> Response:
        started = time.monotonic()
        if self._egress is not None:
            proxy = proxy or self._egress.proxy_for(url)
            if proxy is not None:
                # A proxy dials, not us: the target is judged here first (a lookup of its
                # own), and so is every redirect hop (see session_traces).
                await judge_target(self._egress, url)
        http = session.checkout(fresh=fresh)
        try:
            return await exchange(
                http,
                method,
                url,
                proxy,
                attempt,
                started,
                sending,
                kwargs,
                max_body_bytes=self.config.max_body_bytes,
            )
        finally:
            await session.checkin(http)

    def _give_up(self, outcome: Outcome, url: str, attempts: int) -> Response:
        if outcome.response is not None and outcome.kind in ("status", "throttle"):
            return outcome.response  # a final answer: the caller judges its status
        raise self._final_error(outcome, url, attempts)

    def _final_error(self, outcome: Outcome, url: str, attempts: int) -> FetchError:
        return final_error(outcome, url, attempts, timeout=self.config.timeout)
