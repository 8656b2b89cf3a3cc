"""The states of the parts that a process's jobs wait for, read once for all of them.

A refresh spread over workers waits for its parts (:meth:`DeliveryRunner.join
<scrapeflow.jobs._delivery.DeliveryRunner.join>`) by reading their rows every ``poll``
seconds. Read by each waiting job on its own clock, that was one statement per waiting job and
second: 80 refreshes in flight made 80 reads a second, about a tenth of a worker's CPU in
``bench/distributed.py``'s bank batch. Here the waits share:

* **one read for every caller of the moment** (:meth:`PartStates.read`): the callers that ask
  while no read is under way, or while one is, are answered together by the next read, which
  starts after the last of them asked (a caller never gets rows read before it asked);
* **one clock** (:func:`next_tick`): the waits sleep until the same multiples of ``poll``, so
  the jobs that poll wake in the same turn of the event loop and share a read.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Generic, TypeVar

from scrapeflow.jobs._batched import Batched

__all__ = ["PartStates", "next_tick"]

T = TypeVar("T")


def next_tick(poll: float) -> float:
    """Seconds until the next multiple of ``poll`` on the monotonic clock: what every wait of
    the process sleeps, so that all wake in the same turn of the loop."""
    return poll - time.monotonic() % poll


class PartStates(Generic[T]):
    """Reads of rows by id, coalesced: ``read_rows(ids)`` returns what it found of ``ids``
    (unknown ids left out); each :meth:`read` is answered by a read that began after it was
    called, shared with every other caller waiting for the same one."""

    def __init__(self, read_rows: Callable[[Collection[str]], Awaitable[Mapping[str, T]]]) -> None:
        self._read_rows = read_rows
        self._batched: Batched[Collection[str], Mapping[str, T]] = Batched(
            self._read_all, "part states"
        )

    @property
    def reads(self) -> int:
        """Reads made so far (for tests and figures)."""
        return self._batched.batches

    async def read(self, ids: Collection[str]) -> dict[str, T]:
        """The rows of ``ids`` (unknown ones left out), as of a read that began after this call.
        A failed read raises its error in each of its callers."""
        rows = await self._batched(ids)
        return {i: rows[i] for i in ids if i in rows}

    async def _read_all(self, asked: list[Collection[str]]) -> list[Mapping[str, T]]:
        rows = await self._read_rows({i for ids in asked for i in ids})
        return [rows] * len(asked)
