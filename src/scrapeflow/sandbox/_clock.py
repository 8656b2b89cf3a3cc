"""The sandbox clock: sandbox time stands still until a test (or the admin API) moves it.

Every site of one sandbox shares one clock, so advancing it makes new movements appear at every
bank at once. Tokens, sessions and bans expire on real time instead: a scraper's session
must not expire because a test jumped a week ahead.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["DEFAULT_EPOCH", "SandboxClock"]

DEFAULT_EPOCH = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
"""Sandbox time when a sandbox starts, unless told otherwise: a Monday morning."""


class SandboxClock:
    """A settable UTC clock. Thread-safe: tests may advance it while servers run elsewhere."""

    def __init__(self, start: datetime = DEFAULT_EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("the sandbox clock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Sandbox time, UTC."""
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move sandbox time forward by ``delta`` (never backwards); returns the new time."""
        if delta < timedelta(0):
            raise ValueError("the sandbox clock only moves forward")
        with self._lock:
            self._now += delta
            return self._now

    def set(self, when: datetime) -> datetime:
        """Jump to ``when`` (not before the current time)."""
        when = when.astimezone(UTC)
        with self._lock:
            if when < self._now:
                raise ValueError("the sandbox clock only moves forward")
            self._now = when
            return self._now
