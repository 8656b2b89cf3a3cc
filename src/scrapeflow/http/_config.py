"""The HTTP layer's knobs, passed whole (frozen dataclasses), with their defaults."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scrapeflow.errors import ConfigError

if TYPE_CHECKING:
    from scrapeflow.config import Settings
    from scrapeflow.http._egress import EgressPolicy

__all__ = ["HostPolicy", "HttpConfig", "RetryPolicy"]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how often to try a request again.

    Retried: connection errors, timeouts, ``statuses`` (5xx and 429), bans and CAPTCHAs (after
    retiring the session). A request that is not idempotent (POST, PATCH) is retried only when
    marked ``safe=True``. Waits are exponential with full jitter — ``uniform(0, min(backoff_max,
    backoff * 2**n))`` — and never shorter than a ``Retry-After`` the server gave.
    """

    attempts: int = 4
    """Tries per request, the first included."""
    backoff: float = 0.2
    backoff_max: float = 20.0
    statuses: frozenset[int] = RETRY_STATUSES
    ban_retries: int = 3
    """Fresh sessions a request may burn through bans and CAPTCHAs before it gives up."""
    throttle_retries: int = 8
    """Extra tries for answers that say when to come back (a 429 or 503 with ``Retry-After``):
    the server did not process the request and named the wait, so waiting it out is not a
    failure and does not use up ``attempts``. Past these, a throttle counts as an attempt. With
    ``attempts=1`` nothing is retried, throttles included."""
    run_budget: int | None = None
    """Retries allowed for the client's lifetime (None: unbounded)."""
    retry_after_max: float = 120.0
    """The longest ``Retry-After`` a request waits out; a longer one is cut to this."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"retry attempts must be at least 1, got {self.attempts}")
        if min(self.backoff, self.backoff_max, self.ban_retries, self.throttle_retries) < 0:
            raise ConfigError(
                "retry backoff, backoff_max, ban_retries and throttle_retries must not be negative"
            )

    def wait(self, retry: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        ceiling = min(self.backoff_max, self.backoff * 2 ** (retry - 1))
        wait = rng.uniform(0, ceiling)
        if retry_after is None:
            return wait
        return max(wait, min(retry_after, self.retry_after_max))


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Per-host (per-slot) politeness. A slot's key is ``host:port`` unless overridden.

    ``delay`` paces the host's requests: they start on a grid ``delay`` apart, so the host gets
    ``1/delay`` requests a second on average (set it from the site's rate limit). ``jitter`` (a
    fraction of ``delay``) moves each start up to that much later than its place on the grid;
    two starts are at least ``delay * (1 - jitter)`` apart. ``burst``: a slot left idle may
    start up to this many requests at once when work comes back, using the places it missed
    (a site's token bucket saves them too); 1 (the default) saves none. Keep it under the
    site's own burst. With ``adaptive``, a 429, a 503 or a ban halves the host's
    concurrency and doubles its delay (at least ``min_backoff_delay``), and each success wins a
    little back (AIMD), never beyond the configured values. ``Retry-After`` holds the whole slot.
    """

    concurrency: int = 16
    delay: float = 0.0
    jitter: float = 0.25
    burst: int = 1
    adaptive: bool = True
    min_backoff_delay: float = 0.05
    max_delay: float = 30.0
    idle_seconds: float = 120.0
    """An idle slot with nothing learnt is freed after this long."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"per-host concurrency must be at least 1, got {self.concurrency}")
        if self.delay < 0 or not 0 <= self.jitter <= 1:
            raise ConfigError("per-host delay must be >= 0 and jitter between 0 and 1")
        if self.burst < 1:
            raise ConfigError(f"per-host burst must be at least 1, got {self.burst}")


@dataclass(frozen=True, slots=True)
class HttpConfig:
    """Everything the HTTP client needs to know, with the defaults the README lists."""

    max_connections: int = 100
    """Requests in flight at once, all hosts together."""
    timeout: float = 30.0
    """Seconds for one attempt (connect, send, read the whole body)."""
    host: HostPolicy = field(default_factory=HostPolicy)
    hosts: dict[str, HostPolicy] = field(default_factory=dict)
    """Policies for particular slot keys (``"example.com:443"``), overriding ``host``."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rotate_after: int = 3
    """Consecutive failures through a proxy before it is quarantined, and through a session's
    proxy before the session changes proxy (a session also moves off a quarantined proxy)."""
    proxy_concurrency: int = 16
    """Requests in flight through one proxy at once."""
    quarantine: float = 30.0
    """Seconds a failing proxy is set aside the first time; doubles each time, up to 30 min."""
    ban_statuses: frozenset[int] = frozenset({403})
    max_body_bytes: int = 64 * 1024 * 1024
    identities: str = "browser"
    """``"browser"``: each session a coherent real-browser header set; ``"none"``: aiohttp's."""
    seed: int | None = None
    """Seed for jitter, identities and proxy choice (None: random)."""
    egress: EgressPolicy | None = None
    """For URLs a client gave (the service's fetch and run jobs): connect only where this
    policy allows, through its proxy if it has one; refused addresses raise
    :class:`~scrapeflow.errors.EgressBlocked`, never retried. None: anywhere (the operator's
    own URLs: bank sites, ``scrapeflow run``)."""

    @classmethod
    def from_settings(
        cls, settings: Settings, *, max_connections: int, timeout: float = 30.0
    ) -> HttpConfig:
        """The process's HTTP settings (``per_host``, ``delay``, ``retries``, ``rotate_after``,
        ``identity``) for a client of ``max_connections`` requests in flight."""
        return cls(
            max_connections=max_connections,
            timeout=timeout,
            host=HostPolicy(concurrency=settings.per_host, delay=settings.delay),
            retry=RetryPolicy(attempts=settings.retries + 1),
            rotate_after=settings.rotate_after,
            identities=settings.identity,
        )

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ConfigError(f"max_connections must be at least 1, got {self.max_connections}")
        if self.timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {self.timeout}")
        if self.rotate_after < 1 or self.proxy_concurrency < 1:
            raise ConfigError("rotate_after and proxy_concurrency must be at least 1")
        if self.identities not in {"browser", "none"}:
            raise ConfigError(f"identities must be 'browser' or 'none', got {self.identities!r}")

    def replace(self, **changes: object) -> HttpConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
