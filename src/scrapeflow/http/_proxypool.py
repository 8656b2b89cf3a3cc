"""Which proxy a session goes through: spread, capped, and failing ones set aside.

Wraps any ``ProxyProvider`` unchanged. A session gets the least-used good proxy (by sessions
assigned); a proxy that fails is quarantined for ``quarantine`` seconds, doubling each time it
fails again after coming back (up to 30 minutes), and re-admitted when its time is up: its next
use is its re-check. ``proxy_concurrency`` caps the requests in flight through one proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import AsyncIterator

import yarl

from scrapeflow.proxies import ProxyProvider

__all__ = ["ProxyPool", "proxy_label"]

_MAX_QUARANTINE = 1800.0


def proxy_label(proxy: str | None) -> str | None:
    """``host:port`` of a proxy URL: how stats and logs name it (never its credentials)."""
    if proxy is None:
        return None
    url = yarl.URL(proxy)
    return f"{url.host}:{url.port}"


class ProxyPool:
    def __init__(
        self,
        provider: ProxyProvider,
        *,
        quarantine: float,
        concurrency: int,
        rng: random.Random,
    ) -> None:
        self.provider = provider
        self.quarantine_seconds = quarantine
        self.concurrency = concurrency
        self.assigned: Counter[str] = Counter()
        self.strikes: Counter[str] = Counter()
        self.quarantined_until: dict[str, float] = {}
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

    def choose(self, country: str | None = None, *, avoid: str | None = None) -> str | None:
        """The least-assigned good proxy (random among equals), or ``None`` if none is left."""
        candidates = [p for p in self.provider.candidates(country) if not self.is_quarantined(p)]
        if len(candidates) > 1 and avoid in candidates:
            candidates.remove(avoid)
        if not candidates:
            return None
        fewest = min(self.assigned[p] for p in candidates)
        return self._rng.choice([p for p in candidates if self.assigned[p] == fewest])

    def assign(self, proxy: str | None) -> None:
        if proxy is not None:
            self.assigned[proxy] += 1

    def unassign(self, proxy: str | None) -> None:
        if proxy is not None and self.assigned[proxy] > 0:
            self.assigned[proxy] -= 1

    def set_aside(self, proxy: str) -> float:
        """Quarantine ``proxy``; returns for how many seconds."""
        self.strikes[proxy] += 1
        seconds = min(_MAX_QUARANTINE, self.quarantine_seconds * 2.0 ** (self.strikes[proxy] - 1))
        self.quarantined_until[proxy] = self._now() + seconds
        return seconds

    def recovered(self, proxy: str | None) -> None:
        """A success through ``proxy``: its next failure starts the backoff afresh."""
        if proxy is not None and proxy in self.strikes:
            del self.strikes[proxy]

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
