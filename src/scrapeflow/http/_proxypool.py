"""Which proxy a session goes through: spread, capped, and failing ones set aside.

Wraps any ``ProxyProvider`` unchanged. A session gets the least-used good proxy (by sessions
assigned). A proxy is quarantined after ``rotate_after`` failures in a row through it (any
session's; a CAPTCHA is the site judging a session, relayed by a working proxy, and is not held
against it), or at once when it refuses the connection or gets banned; for ``quarantine``
seconds the first time, doubling each time it fails again after coming back (up to 30 min). It is
re-admitted when its time is up, on probation: its next use is its re-check, and one failure
sends it back. A success clears its record. ``proxy_concurrency`` caps the requests in flight
through one proxy. Bulk work goes to the proxy with the least in progress (``least_loaded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Protocol, TypeVar

import yarl

from scrapeflow.proxies import ProxyProvider

__all__ = ["PlacedSession", "ProxyPool", "proxy_label"]


class PlacedSession(Protocol):
    """What the pool reads of a session it spreads work over (a ``ScrapeSession`` is one)."""

    @property
    def proxy(self) -> str | None: ...
    @property
    def pending(self) -> int: ...
    @property
    def country(self) -> str | None: ...
    def rotate_proxy(self) -> None: ...


Session = TypeVar("Session", bound=PlacedSession)

_MAX_QUARANTINE = 1800.0


def proxy_label(proxy: str | None) -> str | None:
    """``host:port`` of a proxy URL: how stats and logs name it (never its credentials)."""
    if proxy is None:
        return None
    url = yarl.URL(proxy)
    return f"{url.host}:{url.port}"


class ProxyPool:
    """The proxies of one ``HttpClient``: which is assigned how often, which are set aside."""

    def __init__(
        self,
        provider: ProxyProvider,
        *,
        quarantine: float,
        concurrency: int,
        rng: random.Random,
        rotate_after: int = 3,
    ) -> None:
        self.provider = provider
        self.quarantine_seconds = quarantine
        self.concurrency = concurrency
        self.rotate_after = rotate_after
        self.assigned: Counter[str] = Counter()
        self.assigned_for: Counter[tuple[str, str]] = Counter()
        """Sessions on each proxy by the site they said they are for, ``(site, proxy)``."""
        self.strikes: Counter[str] = Counter()
        """Quarantines since the proxy last worked (0: in good standing)."""
        self.streak: Counter[str] = Counter()
        """Failures in a row through the proxy since it last worked or came back."""
        self.quarantined_until: dict[str, float] = {}
        self.worked_at: dict[str, float] = {}
        """When a success through the proxy last came back (loop time)."""
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._rng = rng

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def is_quarantined(self, proxy: str) -> bool:
        until = self.quarantined_until.get(proxy)
        if until is None:
            return False
        if until <= self._now():
            del self.quarantined_until[proxy]  # its time is up: its next use re-checks it
            return False
        return True

    def choose(
        self, country: str | None = None, *, avoid: str | None = None, site: str | None = None
    ) -> str | None:
        """The least-assigned good proxy (random among equals), or ``None`` if none is left.

        ``site``: the one the session is for; the proxy with the fewest sessions for it comes
        first. A site limits each IP apart: 200 bank logins spread by their total count alone
        gave one IP 281 of the API bank's requests and another 104, and the busiest IP's share
        at 10 a second was the batch's length."""
        candidates = [p for p in self.provider.candidates(country) if not self.is_quarantined(p)]
        if len(candidates) > 1 and avoid in candidates:
            candidates.remove(avoid)
        if not candidates:
            return None

        def load(proxy: str) -> tuple[int, int]:
            for_site = self.assigned_for[site, proxy] if site is not None else 0
            return for_site, self.assigned[proxy]

        fewest = min(load(p) for p in candidates)
        return self._rng.choice([p for p in candidates if load(p) == fewest])

    def least_loaded(self, sessions: Sequence[Session]) -> Session:
        """Of ``sessions``, the one to give the next piece of bulk work: on the good proxy with
        the fewest requests in progress over all its sessions, the least busy of them (the
        first among equals).

        By proxy, not by session: CAPTCHAs move sessions about, so one proxy may hold one
        session while another holds five; shared by session, the first got a sixth of the work
        and its IP's rate went unused while the other's queued.
        """
        self._fill_empty(sessions)
        load: Counter[str | None] = Counter()
        for session in sessions:
            load[session.proxy] += session.pending

        def busy(session: Session) -> tuple[bool, int, int]:
            set_aside = session.proxy is None or self.is_quarantined(session.proxy)
            return set_aside, load[session.proxy], session.pending

        return min(sessions, key=busy)

    def _fill_empty(self, sessions: Sequence[PlacedSession]) -> None:
        """A good proxy that no session uses gets one: the least busy session of the proxy
        with the most moves there (as a session moves after repeated failures, identity and
        cookies kept). Sessions leave a proxy when a CAPTCHA retires them; one left with none
        got no work until another session happened to retire onto it, its IP unused."""
        if len(sessions) < 2:
            return
        country = sessions[0].country
        if not any(
            self.assigned[p] == 0 and not self.is_quarantined(p)
            for p in self.provider.candidates(country)
        ):
            return
        crowded, count = Counter(s.proxy for s in sessions).most_common(1)[0]
        if count > 1:
            mover = min((s for s in sessions if s.proxy == crowded), key=lambda s: s.pending)
            mover.rotate_proxy()  # to the least-assigned good proxy: an empty one

    def assign(self, proxy: str | None, site: str | None = None) -> None:
        if proxy is not None:
            self.assigned[proxy] += 1
            if site is not None:
                self.assigned_for[site, proxy] += 1

    def unassign(self, proxy: str | None, site: str | None = None) -> None:
        if proxy is not None and self.assigned[proxy] > 0:
            self.assigned[proxy] -= 1
            if site is not None and self.assigned_for[site, proxy] > 0:
                self.assigned_for[site, proxy] -= 1

    def failed(
        self, proxy: str, *, hard: bool = False, sent_at: float | None = None
    ) -> float | None:
        """A failure through ``proxy``. Quarantines it when ``hard`` (refused, banned), after
        ``rotate_after`` in a row, or at once while on probation; returns the seconds then.

        Failures of requests that were in flight when it was set aside are not held against
        it again: one bad moment is one strike, not one per request it caught. Nor is the
        failure of a request sent (``sent_at``, loop time) before the proxy's last success
        came back: that success shows it working since, so the two are not "in a row". With
        several requests in flight a proxy's answers interleave, and a slow answer timing
        out after newer ones succeeded made a chance streak that set a working proxy aside.
        """
        if proxy in self.quarantined_until and self.is_quarantined(proxy):
            return None
        if not hard and sent_at is not None and sent_at < self.worked_at.get(proxy, -math.inf):
            return None
        self.streak[proxy] += 1
        if hard or self.strikes[proxy] > 0 or self.streak[proxy] >= self.rotate_after:
            return self.set_aside(proxy)
        return None

    def set_aside(self, proxy: str) -> float:
        """Quarantine ``proxy`` (unless it already is); returns for how many seconds."""
        now = self._now()
        if self.is_quarantined(proxy):
            return self.quarantined_until[proxy] - now
        self.strikes[proxy] += 1
        self.streak.pop(proxy, None)
        seconds = min(_MAX_QUARANTINE, self.quarantine_seconds * 2.0 ** (self.strikes[proxy] - 1))
        self.quarantined_until[proxy] = now + seconds
        return seconds

    def recovered(self, proxy: str | None) -> None:
        """A success through ``proxy``: its next failure starts the backoff afresh."""
        if proxy is not None:
            self.worked_at[proxy] = self._now()
            self.strikes.pop(proxy, None)
            self.streak.pop(proxy, None)

    @contextlib.asynccontextmanager
    async def slot(self, proxy: str | None) -> AsyncIterator[None]:
        if proxy is None:
            yield
            return
        limit = self._limits.get(proxy)
        if limit is None:
            limit = self._limits[proxy] = asyncio.Semaphore(self.concurrency)
        async with limit:
            yield
