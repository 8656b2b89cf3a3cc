"""Each key's share of a ``serve`` process's time, while other keys ask too (docs/security.md,
"fair use").

An asyncio process cannot pre-empt a request: a key whose clients ask again the moment each
answer comes (four loops listing 500 jobs) keeps the process busy, whatever a request costs,
and every other key's request waits behind its work. So each key's requests are charged their
part of the process's time while they are in flight — the process's time shared equally
among the requests in flight at each moment (one request among 200 is charged a 200th of
the time it waits behind the others), at most :data:`CHARGE_CAP` a request (a long download
costs its client's patience, not the process) — from an account that fills at ``share``
seconds a second, up to ``burst``.

While another key's requests are in flight or came within the last :data:`BUSY_WINDOW`, a
request whose key is past its account (what its requests in flight have been charged so far
counted) **waits its turn**, and so does one that would put more than
:data:`MOST_IN_FLIGHT` of its key's requests in flight (the key's waiting requests in order,
one at a time). A key alone on the service is never held, however much it asks, and what it
used alone is not owed once another key comes: a request let in alone clears its key's debt,
as a fair scheduler starts a newcomer level with the others rather than charging the one
that ran alone for its past. A request that would wait more than :data:`LONGEST_WAIT` is
answered 429 ``too-many-requests`` with ``Retry-After`` instead: the wait is bounded, and so
is what a key can queue.

The accounts are this process's: with several ``serve`` processes, a key has a share of each.
Whether the service is shared is every process's question, though (:class:`Siblings`): the
kernel hands each connection to one process, and a UI's few keep-alive connections can all
land on one while a key's loops land on another; that process, seeing one key, would give it
the whole process, and its core, which the others' clients needed.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
import mmap
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from scrapeflow.server._problems import Problem

__all__ = [
    "BUSY_WINDOW",
    "CHARGE_CAP",
    "LONGEST_WAIT",
    "MOST_IN_FLIGHT",
    "Permit",
    "Siblings",
    "TimeShare",
    "map_siblings",
    "mapped_siblings",
]

BUSY_WINDOW = 1.0
"""Seconds after another key's request during which the process counts as shared."""
CHARGE_CAP = 1.0
"""The most one request is charged, in seconds."""
LONGEST_WAIT = 10.0
"""The longest a request waits its turn; one that would wait longer gets 429."""
MOST_IN_FLIGHT = 8
"""Requests of one key in flight at once while the process is shared (its first burst
included: a key's 200 requests at once would otherwise all go in before any was charged)."""
_SHORTEST_WAIT = 0.002
"""The shortest wait for a turn, in seconds (a wait of nothing comes back to the same sum)."""
_MAX_ACCOUNTS = 10_000
"""Accounts kept before idle, full ones are dropped."""


class Siblings:
    """The keys each ``serve`` process of a service saw last, and when, in memory the processes
    share (mapped before they are forked): whether another key asks anywhere in the service.

    Each process writes only its own place: its last two keys (hashed) and when it saw them.

    >>> board = Siblings(2)
    >>> board.post(("k1", 10.0), ("", -math.inf))
    >>> board.place = 1
    >>> board.other_key_since("k2", 9.5), board.other_key_since("k1", 9.5)
    (True, False)
    """

    _SLOT = struct.Struct("<qdqd")

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.place = 0
        """This process's place (0 … processes-1), set in each process once forked."""
        self._memory = mmap.mmap(-1, processes * self._SLOT.size)  # shared, anonymous
        for place in range(processes):
            self._SLOT.pack_into(self._memory, place * self._SLOT.size, 0, -math.inf, 0, -math.inf)

    def post(self, latest: tuple[str, float], before: tuple[str, float]) -> None:
        """This process's last two keys, and when it saw each."""
        self._SLOT.pack_into(
            self._memory,
            self.place * self._SLOT.size,
            _hashed(latest[0]),
            latest[1],
            _hashed(before[0]),
            before[1],
        )

    def other_key_since(self, key_id: str, since: float) -> bool:
        """Whether another process saw a key other than ``key_id`` at ``since`` or later."""
        mine = _hashed(key_id)
        for place in range(self.processes):
            if place == self.place:
                continue
            latest, latest_at, before, before_at = self._SLOT.unpack_from(
                self._memory, place * self._SLOT.size
            )
            if (latest != mine and latest_at >= since) or (before != mine and before_at >= since):
                return True
        return False


@functools.lru_cache(maxsize=_MAX_ACCOUNTS)
def _hashed(key_id: str) -> int:
    """A key id as 8 bytes, the same in every process (``hash`` of a str is not, by design)."""
    digest = hashlib.blake2b(key_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


_board: Siblings | None = None


def map_siblings(processes: int) -> Siblings | None:
    """Map the board of a service of ``processes`` processes: the supervisor does, before it
    forks them (each then sets its :attr:`Siblings.place`). None for a service of one."""
    global _board
    _board = Siblings(processes) if processes > 1 else None
    return _board


def mapped_siblings() -> Siblings | None:
    """The board the supervisor mapped before it forked this process; None in a service of
    one process."""
    return _board


@dataclass(slots=True)
class _Account:
    budget: float
    """Seconds the key may still be in flight before it waits (negative: owed)."""
    at: float
    """When :attr:`budget` was last filled."""
    typical: float = 0.0
    """The key's recent charge a request (a moving mean)."""
    waiting: int = 0
    in_flight: int = 0
    started_sum: float = 0.0
    """The sum of its requests in flight's :attr:`Permit.started`: what they have been charged
    so far is ``in_flight`` times the shared time now, less this."""
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(slots=True)
class Permit:
    """A request let in: its key, and the process's shared time when it went in."""

    key_id: str
    started: float
    """The process's shared time (:attr:`TimeShare.shared_time`) when it went in."""


class TimeShare:
    """Each key's share of this process's time, while it is shared.

    >>> share = TimeShare(share=0.5, burst=1.0)
    >>> permit = asyncio.run(share.admit("k1"))
    >>> share.done(permit)
    >>> share.in_flight
    0
    """

    def __init__(
        self,
        share: float = 0.5,
        burst: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        siblings: Siblings | None = None,
    ) -> None:
        self.share = share
        self.siblings = siblings
        """The service's other processes (None: this one is the service)."""
        self.burst = burst
        self.clock = clock
        self.sleep = sleep
        self.in_flight = 0
        """Requests let in and not yet done, every key together."""
        self._shared_time = 0.0
        self._shared_at = clock()
        self._accounts: dict[str, _Account] = {}
        # The two keys seen last (a request going in or ending), and when: whether a key other
        # than the asking one was here within BUSY_WINDOW, at a constant cost.
        self._latest: tuple[str, float] = ("", -math.inf)
        self._before: tuple[str, float] = ("", -math.inf)

    async def admit(self, key_id: str) -> Permit:
        """Let a request of ``key_id`` in: at once while its account holds time or the process
        is its own, else when its turn comes; 429 ``too-many-requests`` rather than a wait
        longer than :data:`LONGEST_WAIT`."""
        now = self.clock()
        account = self._account(key_id, now)
        shared = self.shared(key_id, now)
        if not shared:  # what it used alone was nobody's loss: not owed
            account.budget = max(account.budget, 0.0)
        if account.waiting or (shared and not self._may_go(account, now)):
            await self._wait_turn(key_id, account, now)
            now = self.clock()
        started = self.shared_time(now)
        account.in_flight += 1
        account.started_sum += started
        self.in_flight += 1
        self._seen(key_id, now)
        return Permit(key_id, started)

    def done(self, permit: Permit) -> None:
        """The request ``permit`` let in has ended: charge its time."""
        now = self.clock()
        spent = min(self.shared_time(now) - permit.started, CHARGE_CAP)
        self.in_flight -= 1
        self._seen(permit.key_id, now)
        account = self._accounts.get(permit.key_id)
        if account is None:  # dropped meanwhile (cannot happen while in flight)
            return
        account.in_flight -= 1
        account.started_sum -= permit.started
        account.budget -= spent
        account.typical += (spent - account.typical) / 8

    def shared_time(self, now: float) -> float:
        """The time each request in flight has had of the process so far: it grows by the
        seconds passed divided by the requests in flight (a request's charge is its growth
        while it was in flight)."""
        if self.in_flight:
            self._shared_time += (now - self._shared_at) / self.in_flight
        self._shared_at = now
        return self._shared_time

    def shared(self, key_id: str, now: float) -> bool:
        """Whether another key's requests are in flight, or came within :data:`BUSY_WINDOW`,
        here or in another process of the service."""
        account = self._accounts.get(key_id)
        if self.in_flight > (account.in_flight if account else 0):
            return True
        other = self._before if self._latest[0] == key_id else self._latest
        if now - other[1] < BUSY_WINDOW:
            return True
        return self.siblings is not None and self.siblings.other_key_since(
            key_id, now - BUSY_WINDOW
        )

    def _owed(self, account: _Account, now: float) -> float:
        """Seconds the key is past its account, counting what its requests in flight have
        been charged so far."""
        charging = account.in_flight * self.shared_time(now) - account.started_sum
        return min(charging, account.in_flight * CHARGE_CAP) - account.budget

    def _may_go(self, account: _Account, now: float) -> bool:
        """Whether a request of the key may go in now, the process being shared."""
        return account.in_flight < MOST_IN_FLIGHT and self._owed(account, now) <= 0

    async def _wait_turn(self, key_id: str, account: _Account, now: float) -> None:
        # The waits of the key's requests ahead, and this one's own.
        ahead = max(0.0, self._owed(account, now)) + account.waiting * account.typical
        if ahead / self.share > LONGEST_WAIT:
            raise Problem(
                429,
                "too-many-requests",
                "this key's requests hold more than their share of the service's time while "
                "others wait; slow down, or wait and retry",
                headers={"Retry-After": str(math.ceil(ahead / self.share - LONGEST_WAIT) + 1)},
            )
        account.waiting += 1
        try:
            async with account.turn:
                while True:
                    now = self.clock()
                    self._fill(account, now)
                    if not self.shared(key_id, now) or self._may_go(account, now):
                        break
                    owed = self._owed(account, now)
                    await self.sleep(max(owed / self.share, account.typical, _SHORTEST_WAIT))
        finally:
            account.waiting -= 1

    def _account(self, key_id: str, now: float) -> _Account:
        account = self._accounts.get(key_id)
        if account is None:
            if len(self._accounts) >= _MAX_ACCOUNTS:
                self._drop_idle(now)
            account = self._accounts[key_id] = _Account(self.burst, now)
        else:
            self._fill(account, now)
        return account

    def _fill(self, account: _Account, now: float) -> None:
        account.budget = min(self.burst, account.budget + (now - account.at) * self.share)
        account.at = now

    def _drop_idle(self, now: float) -> None:
        for key_id, account in list(self._accounts.items()):
            self._fill(account, now)
            if not account.in_flight and not account.waiting and account.budget >= self.burst:
                del self._accounts[key_id]

    def _seen(self, key_id: str, now: float) -> None:
        if self._latest[0] != key_id:
            self._before = self._latest
        self._latest = (key_id, now)
        if self.siblings is not None:
            self.siblings.post(self._latest, self._before)
