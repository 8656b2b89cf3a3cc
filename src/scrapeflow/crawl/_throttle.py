"""An adaptive throttle that aims at a number of requests in flight per host (Scrapy's
AutoThrottle), on top of the HTTP layer's per-host slots.

After each answer, the host's delay moves halfway towards ``latency / target_concurrency``
(never under it): a host answering in 200 ms with a target of 2 gets a request every 100 ms,
about two in flight. A slower host is given more room at once; a faster one less. An error
answer never shortens the delay. Requests to a host start at least its delay apart.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from scrapeflow.errors import ConfigError

__all__ = ["AutoThrottle", "HostThrottle"]


@dataclass(frozen=True, slots=True)
class AutoThrottle:
    """Settings of the adaptive throttle (Scrapy's names: ``AUTOTHROTTLE_*``)."""

    target_concurrency: float = 2.0
    """Requests in flight to each host the throttle aims at."""
    start_delay: float = 0.5
    """Seconds between requests to a host before its first answer."""
    min_delay: float = 0.0
    max_delay: float = 30.0

    def __post_init__(self) -> None:
        if self.target_concurrency <= 0:
            raise ConfigError("the throttle's target concurrency must be positive")
        if not 0 <= self.min_delay <= self.max_delay or self.start_delay < 0:
            raise ConfigError("the throttle's delays must be 0 <= min_delay <= max_delay")


class HostThrottle:
    """Each host's delay, learnt from its latencies, and the start of its next request."""

    def __init__(self, settings: AutoThrottle) -> None:
        self.settings = settings
        self.delays: dict[str, float] = {}
        self._next: dict[str, float] = {}

    async def wait(self, host: str) -> None:
        """Wait for ``host``'s next start (its delay after the one before)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        delay = self.delays.get(host, self.settings.start_delay)
        start = max(now, self._next.get(host, now))
        self._next[host] = start + delay
        if start > now:
            await asyncio.sleep(start - now)

    def observe(self, host: str, latency: float, ok: bool) -> None:
        """Learn from an answer of ``host`` that took ``latency`` seconds."""
        s = self.settings
        old = self.delays.get(host, s.start_delay)
        target = latency / s.target_concurrency
        new = min(max(s.min_delay, max(target, (old + target) / 2.0)), s.max_delay)
        if not ok and new <= old:
            return
        self.delays[host] = new
