"""What the HTTP layer did, per host and per proxy: counts and latency percentiles."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Stats", "TrafficStats"]

_LATENCY_WINDOW = 2048


@dataclass
class TrafficStats:
    """Counters for one host or one proxy; latencies of the last 2,048 answers."""

    requests: int = 0
    ok: int = 0
    retries: int = 0
    bans: int = 0
    captchas: int = 0
    throttled: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))

    def percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0-1) of recent latencies, in seconds; ``None`` before any."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def snapshot(self) -> dict[str, Any]:
        def ms(q: float) -> float | None:
            value = self.percentile(q)
            return None if value is None else round(value * 1000, 1)

        return {
            "requests": self.requests,
            "ok": self.ok,
            "retries": self.retries,
            "bans": self.bans,
            "captchas": self.captchas,
            "throttled": self.throttled,
            "errors": dict(self.errors),
            "latency_ms": {"p50": ms(0.5), "p90": ms(0.9), "p99": ms(0.99)},
        }


@dataclass
class Stats:
    """Traffic by host (``host:port``) and by proxy (``host:port``, never credentials)."""

    hosts: dict[str, TrafficStats] = field(default_factory=dict)
    proxies: dict[str, TrafficStats] = field(default_factory=dict)

    def host(self, key: str) -> TrafficStats:
        stats = self.hosts.get(key)
        if stats is None:
            stats = self.hosts[key] = TrafficStats()
        return stats

    def proxy(self, key: str | None) -> TrafficStats | None:
        if key is None:
            return None
        stats = self.proxies.get(key)
        if stats is None:
            stats = self.proxies[key] = TrafficStats()
        return stats

    def snapshot(self) -> dict[str, Any]:
        return {
            "hosts": {k: v.snapshot() for k, v in sorted(self.hosts.items())},
            "proxies": {k: v.snapshot() for k, v in sorted(self.proxies.items())},
        }

    def totals(self) -> TrafficStats:
        total = TrafficStats()
        for s in self.hosts.values():
            total.requests += s.requests
            total.ok += s.ok
            total.retries += s.retries
            total.bans += s.bans
            total.captchas += s.captchas
            total.throttled += s.throttled
            total.errors.update(s.errors)
        return total
