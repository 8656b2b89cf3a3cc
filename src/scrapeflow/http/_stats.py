"""What the HTTP layer did, per host and per proxy: counts and latency percentiles.

Each :class:`HttpClient` keeps its own :class:`Stats`; :func:`process_traffic` adds up, per
host, every client of this process since it started (the ones still open and the ones gone),
for a service's metrics: read-only, nothing to register or reset. The clients gone are kept
for a few hundred hosts at most, the busiest; the others are summed as ``other``.
"""

from __future__ import annotations

import weakref
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HostTraffic", "Stats", "TrafficStats", "process_traffic"]

_LATENCY_WINDOW = 2048
_MAX_RETIRED = 400
"""Hosts of the clients gone that are kept by name; past it, the least busy are folded."""
_KEPT_ON_FOLD = 300
"""Hosts kept by name after a fold: a fold sorts, so it happens once per 100 new hosts, not at
each client that goes."""
_OTHER_HOSTS = "other"
"""The host of the traffic summed over hosts not kept by name (no ``host:port`` is this)."""


@dataclass
class TrafficStats:
    """Counters for one host or one proxy; latencies of the last 2,048 answers."""

    requests: int = 0
    ok: int = 0
    retries: int = 0
    resent: int = 0
    """Attempts that nobody read (a pooled connection its peer had closed), sent again at
    once: neither a failure nor a retry."""
    bans: int = 0
    captchas: int = 0
    throttled: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    latency_total: float = 0.0
    """Seconds summed over every timed answer (``ok`` of them), not only the recent ones."""

    def timed(self, seconds: float) -> None:
        """Count the latency of one answer."""
        self.latencies.append(seconds)
        self.latency_total += seconds

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
            "resent": self.resent,
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

    def __post_init__(self) -> None:
        _open[id(self)] = self
        # When the stats go (their client with them), their counts join the process's past.
        weakref.finalize(self, _retire, self.hosts)

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
            total.resent += s.resent
            total.bans += s.bans
            total.captchas += s.captchas
            total.throttled += s.throttled
            total.errors.update(s.errors)
        return total


@dataclass(frozen=True, slots=True)
class HostTraffic:
    """One host's traffic, summed over the HTTP clients of this process since it started."""

    requests: int = 0
    """Attempts sent (a retried request counts each time)."""
    ok: int = 0
    retries: int = 0
    bans: int = 0
    captchas: int = 0
    throttled: int = 0
    errors: int = 0
    """Attempts that failed otherwise: connection, timeout, proxy, a retryable status."""
    latency_total: float = 0.0
    """Seconds summed over the ``ok`` answers."""

    @classmethod
    def of(cls, stats: TrafficStats) -> HostTraffic:
        return cls(
            requests=stats.requests,
            ok=stats.ok,
            retries=stats.retries,
            bans=stats.bans,
            captchas=stats.captchas,
            throttled=stats.throttled,
            errors=sum(stats.errors.values()),
            latency_total=stats.latency_total,
        )

    def __add__(self, other: HostTraffic) -> HostTraffic:
        return HostTraffic(
            requests=self.requests + other.requests,
            ok=self.ok + other.ok,
            retries=self.retries + other.retries,
            bans=self.bans + other.bans,
            captchas=self.captchas + other.captchas,
            throttled=self.throttled + other.throttled,
            errors=self.errors + other.errors,
            latency_total=self.latency_total + other.latency_total,
        )


_open: weakref.WeakValueDictionary[int, Stats] = weakref.WeakValueDictionary()
"""The stats alive, by identity (a dataclass that compares by value is not hashable)."""
_retired: dict[str, HostTraffic] = {}
"""What the clients gone did, per host: at most ``_MAX_RETIRED`` hosts and ``other``."""


def _retire(hosts: dict[str, TrafficStats]) -> None:
    for host, traffic in hosts.items():
        _retired[host] = _retired.get(host, HostTraffic()) + HostTraffic.of(traffic)
    if len(_retired) > _MAX_RETIRED:
        _fold()


def _fold() -> None:
    """Sum the least busy retired hosts into ``other``, keeping ``_KEPT_ON_FOLD`` by name."""
    # A copy first, then one host at a time: a client retiring meanwhile (a finalizer run by
    # the garbage collector) adds to its host's entry, and that entry, popped later or kept,
    # loses nothing.
    named = sorted(
        (item for item in list(_retired.items()) if item[0] != _OTHER_HOSTS),
        key=lambda item: (-item[1].requests, item[0]),
    )
    for host, _ in named[_KEPT_ON_FOLD:]:
        gone = _retired.pop(host, None)
        if gone is not None:
            _retired[_OTHER_HOSTS] = _retired.get(_OTHER_HOSTS, HostTraffic()) + gone


def process_traffic() -> dict[str, HostTraffic]:
    """Per host (``host:port``), what every HTTP client of this process did since it started;
    the clients gone count for a few hundred hosts at most, the rest under ``other``.

    >>> process_traffic().get("127.0.0.1:8080")  # doctest: +SKIP
    HostTraffic(requests=12, ok=12, retries=0, bans=0, ...)
    """
    # The open stats first, held: none of them can retire while they are added up, and one that
    # retired before is in the past already.
    alive = list(_open.values())
    totals = dict(_retired)
    for stats in alive:
        for host, traffic in list(stats.hosts.items()):
            totals[host] = totals.get(host, HostTraffic()) + HostTraffic.of(traffic)
    return totals
