"""One try of a request: a place in its host's slot, the send, the answer judged, and the
outcome charged to the proxy, session and slot it concerns.

:class:`~scrapeflow.http.HttpClient` decides whether to try again and how long to wait; this
module holds what one try does, so the retry loop reads on its own and the bookkeeping of a
single try (slots, quarantines, rotation, stats) reads in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
import yarl

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.errors import EgressBlocked, FetchError, NoProxyAvailable
from scrapeflow.http._config import HttpConfig
from scrapeflow.http._egress import EgressPolicy, egress_refusal, judge_target
from scrapeflow.http._exchange import Observer, Wire, exchange
from scrapeflow.http._hosts import HostLimiter, HostSlot
from scrapeflow.http._outcome import Outcome, count_failure, describe, error_text, judge
from scrapeflow.http._proxypool import ProxyPool, proxy_label
from scrapeflow.http._response import BanCheck, Response, Validator
from scrapeflow.http._session import ScrapeSession
from scrapeflow.http._stale import Sending
from scrapeflow.http._stale import stale as is_stale
from scrapeflow.http._stats import Stats

__all__ = ["Attempts"]

_log = get_logger("scrapeflow.http._client")  # the client's log, as before the split
_PROXY_FAILURES = (aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError)
_NOT_THE_PROXYS = frozenset({"throttle", "captcha", "stale"})
"""Failures a proxy relayed or had no part in, not held against it."""


class Attempts:
    """The tries of an open client's requests, under its global cap, host slots and proxies."""

    def __init__(
        self,
        config: HttpConfig,
        *,
        connections: asyncio.Semaphore,
        hosts: HostLimiter,
        stats: Stats,
        pool: ProxyPool | None,
        egress: EgressPolicy | None,
        is_ban: BanCheck | None,
        wire: Wire | None = None,
        observers: list[Observer] | None = None,
    ) -> None:
        self._config = config
        self._wire: Wire = wire or exchange
        self._observers = observers if observers is not None else []
        """Told of every exchange (the client's list: observers added later are told too)."""
        self._connections = connections
        """The global cap (``max_connections``)."""
        self._hosts = hosts
        self._stats = stats
        self._pool = pool
        self._egress = egress
        self._is_ban = is_ban

    async def try_once(
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
        pool = self._pool
        host_stats = self._stats.host(host)
        proxy, generation, host_slot, place = await self._take_place(session, host, slot_key, url)
        label = proxy_label(proxy)
        proxy_stats = self._stats.proxy(label)
        sent_at = asyncio.get_running_loop().time()
        started = time.monotonic()
        outcome: Response | Outcome
        stale = False
        sending = Sending()
        try:
            async with self._connections, pool.slot(proxy) if pool else contextlib.nullcontext():
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
                ban_statuses=self._config.ban_statuses,
                is_ban=self._is_ban,
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
                if quarantined or session.failures >= self._config.rotate_after:
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
        pool = self._pool
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
            host_slot = self._hosts.slot(slot_key or (host if label is None else f"{host}@{label}"))
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
            done = await self._wire(
                http,
                method,
                url,
                proxy,
                attempt,
                started,
                sending,
                kwargs,
                max_body_bytes=self._config.max_body_bytes,
            )
        finally:
            await session.checkin(http)
        for observer in self._observers:
            observer(done)
        return done.response
