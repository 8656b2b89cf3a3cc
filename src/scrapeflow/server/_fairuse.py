"""Fair use: what one API key may hold at once, so that no key can take the service from the
others (docs/security.md, "limits").

* :class:`StreamSlots`: open event streams, per key (``max_streams_per_key``) and in all
  (``max_streams``). A stream takes its slot before its answer starts and gives it back when it
  ends; past either bound the request is refused, 429 ``too-many-streams`` with
  ``Retry-After``. The count is this process's: with several ``serve`` processes each holds
  its own (a key may hold N times its bound over N processes). A key that keeps asking past
  its bound (more refusals within :data:`_ASKING_WINDOW` seconds than its bound) has its
  further refusals held one to two ``Retry-After`` before they are sent (:class:`Tarpit`),
  twice as long for each further window it keeps it up, up to :data:`_LONGEST_HOLD` (one to
  two times): a flood asks again less and less often, a client that calms down is answered
  at once again after one quiet window.
* :class:`Tarpit`: answers held back, costing a timer each instead of the CPU of a client
  asking again at once. A flood's connections wait for their answers; an asyncio server
  otherwise answers every one of them, hundreds a second, on the core honest clients share,
  and they queue behind the flood. Bounded: past :data:`_MAX_HELD` held answers, the next
  ones go out at once.
* :class:`JobQuota`: queued and running fetch and run jobs per key (``max_jobs_per_key``),
  counted in the database (every process sees the same), a job with parts counting its parts
  too; past it, 429 ``too-many-jobs`` with ``Retry-After``. Submissions of one key take turns
  in a process, so two at once cannot both pass the last free place.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from scrapeflow.server._problems import Problem

__all__ = ["JobQuota", "StreamSlots", "Tarpit"]

_STREAM_RETRY = 5
"""Seconds a client refused a stream is told to wait (streams end when clients leave)."""
_ASKING_WINDOW = 10.0
"""Seconds over which a key's refused streams are counted, to tell a flood from a mistake."""
_LONGEST_HOLD = 15.0
"""The most a flooding key's refusal is held, before the spread (one to two times this)."""
_MAX_HELD = 10_000
"""Answers held at once, in all; past it they go out at once."""
_JOBS_RETRY = 10
"""Seconds a client over its job quota is told to wait (jobs end as they run)."""


class Tarpit:
    """Answers held back before they are sent, at most :data:`_MAX_HELD` at once.

    >>> tarpit = Tarpit()
    >>> asyncio.run(tarpit.hold(0.01)), tarpit.held
    (True, 0)
    """

    def __init__(self, most: int = _MAX_HELD) -> None:
        self.most = most
        self.held = 0

    async def hold(self, seconds: float) -> bool:
        """Wait ``seconds``; False at once when :attr:`most` answers are held already."""
        if self.held >= self.most:
            return False
        self.held += 1
        try:
            await asyncio.sleep(seconds)
        finally:
            self.held -= 1
        return True


class StreamSlots:
    """Open event streams per API key and in all, bounded.

    >>> slots = StreamSlots(per_key=1, total=2)
    >>> with slots.taken("k1"), slots.taken("k2"):
    ...     slots.open("k1"), slots.total
    (1, 2)
    >>> slots.open("k1"), slots.total
    (0, 0)
    >>> with slots.taken("k1"):
    ...     with slots.taken("k1"):
    ...         pass
    Traceback (most recent call last):
    scrapeflow.server._problems.Problem: this key holds 1 event streams open already ...
    """

    def __init__(self, *, per_key: int, total: int, tarpit: Tarpit | None = None) -> None:
        self.per_key = per_key
        self.limit = total
        self.total = 0
        self.tarpit = tarpit or Tarpit()
        self._by_key: dict[str, int] = {}
        # key id: (window start, refusals in it, windows in a row past the bound before it)
        self._refused: dict[str, tuple[float, int, int]] = {}

    def open(self, key_id: str) -> int:
        """The streams ``key_id`` holds open in this process."""
        return self._by_key.get(key_id, 0)

    def refusal(self, key_id: str) -> Problem | None:
        """The 429 ``too-many-streams`` a new stream of ``key_id`` would get now, or None."""
        if self.open(key_id) >= self.per_key:
            return Problem(
                429,
                "too-many-streams",
                f"this key holds {self.per_key} event streams open already (the most one key "
                "may); close one, or wait and retry",
                headers={"Retry-After": str(_STREAM_RETRY)},
            )
        if self.total >= self.limit:
            return Problem(
                429,
                "too-many-streams",
                "the service holds as many event streams as it serves; wait and retry",
                headers={"Retry-After": str(_STREAM_RETRY)},
            )
        return None

    def hold_for(self, key_id: str) -> float:
        """Count a refusal of ``key_id``'s stream; the seconds to hold it before it is sent:
        0 unless the key keeps asking (more than its bound of refusals in
        :data:`_ASKING_WINDOW` seconds).

        >>> slots = StreamSlots(per_key=1, total=10)
        >>> slots.hold_for("k"), 5 <= slots.hold_for("k") <= 10
        (0.0, True)
        """
        now = time.monotonic()
        start, count, flooding = self._refused.get(key_id, (now, 0, 0))
        if now - start > _ASKING_WINDOW:
            # A window past the bound makes the next holds longer; one within it, or a quiet
            # one between (no refusal at all), makes them short again.
            past = count > self.per_key and now - start <= 2 * _ASKING_WINDOW
            flooding = min(flooding + 1, 8) if past else 0
            start, count = now, 0
        if len(self._refused) >= _MAX_HELD and key_id not in self._refused:
            self._refused.clear()  # a bound on the bookkeeping: every window starts again
        self._refused[key_id] = (start, count + 1, flooding)
        if count < self.per_key:
            return 0.0
        # Spread over one to two times the hold: held for one exactly, a flood's connections
        # were all answered in the same instant and all asked again in the next one.
        return min(_STREAM_RETRY * (1 << flooding), _LONGEST_HOLD) * (1 + random.random())

    async def refused(self, key_id: str) -> None:
        """Before a refusal of ``key_id``'s stream is sent: held as :meth:`hold_for` says."""
        seconds = self.hold_for(key_id)
        if seconds:
            await self.tarpit.hold(seconds)

    @contextlib.contextmanager
    def taken(self, key_id: str) -> Iterator[None]:
        """Hold a stream's slot while inside; 429 ``too-many-streams`` when the key, or the
        service, holds its bound already. Checked and taken in one step (no await between)."""
        refused = self.refusal(key_id)
        if refused is not None:
            raise refused
        self.total += 1
        self._by_key[key_id] = self.open(key_id) + 1
        try:
            yield
        finally:
            self.total -= 1
            left = self._by_key[key_id] - 1
            if left:
                self._by_key[key_id] = left
            else:
                del self._by_key[key_id]


class JobQuota:
    """The bound on the active jobs of each API key (``limit``), checked against what the
    database counts (the cost of the key's queued and running jobs)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._turns: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key_id: str) -> AsyncIterator[None]:
        """One submission of ``key_id`` at a time in this process: check, then submit, inside."""
        # One lock per key that ever submitted here: as many as there are keys, no more.
        async with self._turns.setdefault(key_id, asyncio.Lock()):
            yield

    async def check(self, key_id: str, cost: int, used_by: Callable[[str], Awaitable[int]]) -> None:
        """429 ``too-many-jobs`` unless the key has room for a job of ``cost``, ``used_by``
        telling what its active jobs take."""
        used = await used_by(key_id)
        if used + cost > self.limit:
            raise Problem(
                429,
                "too-many-jobs",
                f"this key has {used} of its {self.limit} queued or running jobs "
                f"(parts counted); this one would take {cost}: wait for some to end, "
                "or cancel some",
                headers={"Retry-After": str(_JOBS_RETRY)},
            )
