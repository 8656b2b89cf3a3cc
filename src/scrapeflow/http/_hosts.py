"""Per-host slots: each host (or explicit key) gets its own concurrency and pacing.

A slot admits at most ``limit`` requests at once and paces their starts on a grid ``delay``
apart: start k is due at ``delay`` after start k-1 was due, however late that one went, so the
slot keeps ``1/delay`` requests a second on average (a site's token bucket refills at a steady
rate too). Jitter moves a start later than its place on the grid, never earlier, and never moves
the grid, so it costs no rate. A slot left idle keeps up to ``burst - 1`` missed places to use
at once when work comes back (1: none; the site's own bucket saved those tokens too).

Throttle signals (429, a 503 that names its wait, bans) halve the limit and double the delay;
successes win them back slowly (AIMD); ``Retry-After`` holds the whole slot and forfeits any
saved places. A 503 that names no wait is often one server error among successes: it slows the
slot only when it follows another refusal with no success between. Slots idle for a while with
nothing learnt are freed, so a crawl over a million hosts does not keep a million slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections import deque

from scrapeflow.http._config import HostPolicy, HttpConfig

__all__ = ["HostLimiter", "HostSlot"]

_SWEEP_EVERY = 1024


class HostSlot:
    """One host's admission and pacing. ``acquire`` before a request, ``release`` after."""

    def __init__(self, key: str, policy: HostPolicy, rng: random.Random) -> None:
        self.key = key
        self.policy = policy
        self.limit = float(policy.concurrency)
        self.delay = policy.delay
        self.in_flight = 0
        self.taken = 0
        """Places taken since the slot was made (requests sent, and places given back)."""
        self.next_start = 0.0
        """When the next start is due on the grid (loop time)."""
        self.refusals = 0
        """Throttle answers (429, 503, bans) since the last success."""
        self.hold_until = 0.0
        self.last_used = 0.0
        self.cut_at = float("-inf")
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._rng = rng

    @property
    def learnt(self) -> bool:
        """Whether the slot holds state worth keeping (a slowed rate, a hold)."""
        return self.limit < self.policy.concurrency or self.delay > self.policy.delay

    async def acquire(self) -> float | None:
        """Wait for a place and its start on the grid; that start (None without a delay), to
        give to :meth:`release` if no request goes out on the place."""
        loop = asyncio.get_running_loop()
        while self.in_flight >= max(1, int(self.limit)):
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if not waiter.cancelled() and waiter.done():
                    self._wake_one()  # we were woken but will not take the place: pass it on
                else:
                    # A release may already have dropped our cancelled waiter from the queue.
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
        self.in_flight += 1
        self.taken += 1
        now = loop.time()
        start = max(now, self.hold_until)
        due: float | None = None
        if self.delay > 0:
            # Places missed while idle are kept up to the burst, but not across a hold: the
            # site has just said it counts us as too fast.
            saved_from = max(now - (self.policy.burst - 1) * self.delay, self.hold_until)
            due = max(self.next_start, saved_from)
            self.next_start = due + self.delay
            start = max(start, due + self.delay * self._rng.uniform(0, self.policy.jitter))
        if start > now:
            try:
                await asyncio.sleep(start - now)
            except BaseException:
                self.release()
                raise
        return due

    def release(self, *, unused: float | None = None) -> None:
        """Give the place back. ``unused``: the start :meth:`acquire` gave, when no request
        went out on the place (the site never saw it): the grid takes that start back, unless
        a later one was handed out since (two starts would share an instant) or the grid moved
        (a throttle, a new delay)."""
        if unused is not None and self.next_start == unused + self.delay:
            self.next_start = unused
        self.in_flight -= 1
        self.last_used = asyncio.get_running_loop().time()
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def on_success(self) -> None:
        self.refusals = 0
        if not self.policy.adaptive or not self.learnt:
            return
        self.limit = min(float(self.policy.concurrency), self.limit + 1.0 / self.limit)
        if self.delay > self.policy.delay:
            # Additive increase of the rate: 1/delay grows by a tenth of a request a second.
            rate = 1.0 / self.delay + 0.1
            self.delay = 1.0 / rate
            if self.delay < max(self.policy.delay, self.policy.min_backoff_delay):
                self.delay = self.policy.delay
        self._wake_all_that_fit()

    def on_throttle(
        self,
        retry_after: float | None = None,
        *,
        sent_at: float | None = None,
        doubtful: bool = False,
    ) -> None:
        """The host asked us to slow down (429, 503, a ban).

        ``sent_at`` (loop time) is when the refused request started: answers to requests sent
        before the last cut describe the old rate and do not cut again, so a burst of refusals
        halves the rate once (as TCP does once per round trip), instead of collapsing it.
        ``doubtful`` (a 503 naming no wait) cuts only after another refusal with no success
        between: sites answer a share of requests with random 5xx, and halving a paced slot on
        each one kept it well under the rate the site allows (it wins back 0.1 request/s per
        success).
        """
        now = asyncio.get_running_loop().time()
        self.refusals += 1
        if doubtful and self.refusals < 2:
            return
        # Saved places are forfeit: whatever the site counted, we were at its limit or past it.
        self.next_start = max(self.next_start, now)
        if self.policy.adaptive and (sent_at is None or sent_at >= self.cut_at):
            self.cut_at = now
            self.limit = max(1.0, self.limit / 2)
            self.delay = min(
                self.policy.max_delay, max(self.delay * 2, self.policy.min_backoff_delay)
            )
        if retry_after is not None and retry_after > 0:
            self.hold_until = max(self.hold_until, now + min(retry_after, self.policy.max_delay))

    def _wake_all_that_fit(self) -> None:
        free = max(1, int(self.limit)) - self.in_flight
        for _ in range(max(0, free)):
            self._wake_one()


class HostLimiter:
    """The slots of every host, under one global cap on requests in flight."""

    def __init__(self, config: HttpConfig, rng: random.Random) -> None:
        self.config = config
        self.slots: dict[str, HostSlot] = {}
        self._rng = rng
        self._created = 0
        self._paced: dict[str, HostPolicy] = {}

    def pace(self, key: str, per_second: float, *, burst: int = 1) -> None:
        """A site's own limit, when known (a scraper declares it): the slots of ``key``
        (``host:port``, and each exit IP's through a proxy) start ``per_second`` requests a
        second, up to ``burst`` at once after a pause, instead of finding the limit by its
        refusals. One request of the burst is kept in hand: starts on the grid reach the site
        a little early or late, and at the exact limit with the whole burst spent one in about
        a hundred came before its token (a 429). A site with no burst is paced a tenth under
        its rate instead. The settings win: a host they name, or a slower delay, stays as set;
        slots already made keep their policy."""
        if key in self.config.hosts or per_second <= 0:
            return
        delay = 1.0 / per_second if burst > 1 else 1.1 / per_second
        default = self.config.host
        self._paced[key] = dataclasses.replace(
            default, delay=max(default.delay, delay), burst=max(1, burst - 1)
        )

    def policy_for(self, key: str) -> HostPolicy:
        """The policy of slot ``key`` (``host:port``, or ``host:port@proxy`` through a proxy:
        each exit IP is paced apart under its site's policy): the settings' for it or its
        host, else the pace its site declared (:meth:`pace`), else the settings' default."""
        hosts, host = self.config.hosts, key.partition("@")[0]
        policy = hosts.get(key) or hosts.get(host) or self._paced.get(host)
        return policy or self.config.host

    def slot(self, key: str) -> HostSlot:
        slot = self.slots.get(key)
        if slot is None:
            self._created += 1
            if self._created % _SWEEP_EVERY == 0:
                self._sweep()
            slot = self.slots[key] = HostSlot(key, self.policy_for(key), self._rng)
        return slot

    def _sweep(self) -> None:
        now = asyncio.get_running_loop().time()
        for key, slot in list(self.slots.items()):
            idle = now - slot.last_used > slot.policy.idle_seconds
            if idle and slot.in_flight == 0 and not slot._waiters and not slot.learnt:
                del self.slots[key]
