"""What the service holds while it runs, opened in the app's lifespan and reached by routes
through dependencies (never module globals)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from scrapeflow.banking import Reads
from scrapeflow.config import Settings
from scrapeflow.db import QuickReads
from scrapeflow.http import EgressPolicy
from scrapeflow.jobs import JobQueue, Scheduler
from scrapeflow.server._events import EventLog
from scrapeflow.server._fairuse import JobQuota, StreamSlots
from scrapeflow.server._keyring import KeyRing
from scrapeflow.server._timeshare import TimeShare
from scrapeflow.server._webhooks import Webhooks

__all__ = ["BUSY_FAILURES", "AuthFailures", "ServiceState"]

BUSY_FAILURES = 50
"""Failed attempts in the last second, from every address together, past which failures are
answered slowly (see :mod:`scrapeflow.server._auth`)."""


class AuthFailures:
    """Failed authentications per client address, to slow down guessing: past ``allowed``
    failures within ``window`` seconds, an address's further *failed* attempts get 429 until
    its oldest failure leaves the window. A valid key is never refused for them (a proxy's
    clients, or the service's own webhooks, share an address with whoever fails).

    Bounded: an address keeps at most ``allowed`` times (a ring), addresses quiet for a window
    are dropped when met, and past ``max_addresses`` the least recently failing one goes; each
    failure costs O(1), whatever the number of addresses.
    """

    def __init__(
        self, *, allowed: int = 10, window: float = 60.0, max_addresses: int = 10_000
    ) -> None:
        self.allowed = allowed
        self.window = window
        self.max_addresses = max_addresses
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._recent: deque[float] = deque(maxlen=BUSY_FAILURES + 1)  # every address's

    def __len__(self) -> int:
        return len(self._seen)

    def retry_after(self, address: str) -> float:
        """Seconds the address's failed attempts must wait, 0 when it may fail again."""
        seen = self._seen.get(address)
        if not seen:
            return 0.0
        now = time.monotonic()
        while seen and seen[0] <= now - self.window:
            seen.popleft()
        if not seen:
            del self._seen[address]
            return 0.0
        if len(seen) < self.allowed:
            return 0.0
        return max(seen[0] + self.window - now, 0.1)

    def failed(self, address: str) -> None:
        """Count a failed attempt from ``address``."""
        seen = self._seen.get(address)
        if seen is None:
            seen = self._seen[address] = deque(maxlen=self.allowed)
            while len(self._seen) > self.max_addresses:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(address)
        now = time.monotonic()
        seen.append(now)
        self._recent.append(now)

    def busy(self) -> bool:
        """Whether more than :data:`BUSY_FAILURES` attempts failed in the last second, from
        every address together."""
        recent = self._recent
        return len(recent) > BUSY_FAILURES and recent[0] > time.monotonic() - 1.0


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
    streams: StreamSlots = field(default_factory=lambda: StreamSlots(per_key=20, total=2_000))
    """Open event streams per key and in all (``max_streams_per_key``, ``max_streams``)."""
    time_share: TimeShare = field(default_factory=TimeShare)
    """Each key's share of this process's time while others ask too (``key_time_share``)."""
    job_quota: JobQuota = field(default_factory=lambda: JobQuota(100))
    """Active fetch and run jobs per key (``max_jobs_per_key``)."""
    quick: QuickReads | None = None
    """Reads of the routes a UI calls all the time (status, accounts, movement pages) without
    the engine's cost per statement; None: through sessions."""
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the service starts to stop (SIGTERM, Ctrl-C): event streams end, and no new
    job starts; running ones get their grace from that moment."""

    @property
    def reads(self) -> Reads:
        """Where the routes' reads of customers' data go: the quick reads when there are."""
        return self.sessions if self.quick is None else self.quick

    @property
    def reads_wait(self) -> bool:
        """Whether a read waits for a database server (PostgreSQL): then a route's reads that
        do not depend on each other go at once. A quick read of SQLite answers in the calling
        thread, and two of them side by side cost two turns of the event loop more."""
        return self.engine.dialect.name == "postgresql"

    def begin_shutdown(self) -> None:
        """The first step of a stop, at the signal: streams end, the queue takes no new job."""
        if self.closing.is_set():
            return
        self.closing.set()
        stop_taking = getattr(self.queue, "stop_taking", None)
        if stop_taking is not None:
            stop_taking()
