"""What the service holds while it runs, opened in the app's lifespan and reached by routes
through dependencies (never module globals)."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow.config import Settings
from scrapeflow.http import EgressPolicy
from scrapeflow.jobs import JobQueue, Scheduler
from scrapeflow.server._events import EventLog
from scrapeflow.server._keyring import KeyRing
from scrapeflow.server._webhooks import Webhooks

__all__ = ["AuthFailures", "ServiceState"]


class AuthFailures:
    """Failed authentications per client address: past ``allowed`` in ``window`` seconds, the
    address is refused (429) until its oldest failure leaves the window."""

    def __init__(self, *, allowed: int = 10, window: float = 60.0) -> None:
        self.allowed = allowed
        self.window = window
        self._seen: defaultdict[str, deque[float]] = defaultdict(deque)

    def retry_after(self, address: str) -> float:
        """Seconds the address must wait, 0 when it may try."""
        seen = self._seen.get(address)
        if not seen:
            return 0.0
        now = time.monotonic()
        while seen and seen[0] <= now - self.window:
            seen.popleft()
        if len(seen) < self.allowed:
            return 0.0
        return max(seen[0] + self.window - now, 0.1)

    def failed(self, address: str) -> None:
        self._seen[address].append(time.monotonic())
        if len(self._seen) > 100_000:  # a flood of addresses: forget the quiet ones
            for quiet in [a for a, s in self._seen.items() if not s][:50_000]:
                del self._seen[quiet]


@dataclass
class ServiceState:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    queue: JobQueue
    events: EventLog
    webhooks: Webhooks
    keys: KeyRing
    """API keys as this process knows them: authentication's cache, and
    ``keys.revoked_signal(key_id)``, set within a second of a revocation or expiry."""
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    """Where client-given URLs may lead (webhooks, fetch and run jobs): checked at submission."""
    scheduler: Scheduler | None = None
    """The daily refresh of every customer (None when the ``schedule`` setting is off)."""
    failures: AuthFailures = field(default_factory=AuthFailures)
