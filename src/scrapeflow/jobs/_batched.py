"""Calls of the same moment made as one: :class:`Batched`.

A worker's jobs ask the database the same kind of thing at the same moment: the refreshes
waiting for their parts read the parts' states, a refresh queues its four parts. Made one by
one, each is a transaction and a round trip, most of a job's cost beyond its own work.
:class:`Batched` gathers the calls made while none is under way, or while one is, and makes
them together: each caller is answered by a batch that began after it called, shared with
the others of that batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Batched"]

T = TypeVar("T")
R = TypeVar("R")


class Batched(Generic[T, R]):
    """``await batched(item)``: ``item``'s answer from ``handle(items)``, which answers a batch
    of items in their order (a list as long as the batch; an exception in an item's place is
    raised in its caller alone). A failed batch raises its error in each of its callers; one
    caller cancelled leaves the others their answer."""

    def __init__(
        self, handle: Callable[[list[T]], Awaitable[Sequence[R | Exception]]], name: str
    ) -> None:
        self._handle = handle
        self._name = name
        self._items: list[T] = []
        self._next: asyncio.Future[Sequence[R | Exception]] | None = None
        self._runner: asyncio.Task[None] | None = None
        self.batches = 0
        """Batches made so far (for tests and figures)."""

    async def __call__(self, item: T) -> R:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            # Retrieved here, so that a failed batch all of whose callers were cancelled is not
            # reported as "never retrieved".
            self._next.add_done_callback(lambda f: f.cancelled() or f.exception())
        answers, place = self._next, len(self._items)
        self._items.append(item)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name=self._name)
        # Shielded: one caller cancelled does not cancel the batch the others wait for.
        answer = (await asyncio.shield(answers))[place]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def _run(self) -> None:
        """Answer the batches waiting, one after the other, until none is left."""
        while self._next is not None:
            answers, items = self._next, self._items
            self._next, self._items = None, []
            self.batches += 1
            try:
                answered = await self._handle(items)
            except asyncio.CancelledError:  # the loop closing: no batch will answer them
                for waiting in (answers, self._next):
                    if waiting is not None:
                        waiting.cancel()
                self._next, self._items = None, []
                raise
            except Exception as exc:
                answers.set_exception(exc)
            else:
                if len(answered) != len(items):
                    answers.set_exception(
                        RuntimeError(f"{self._name}: {len(answered)} answers to {len(items)}")
                    )
                else:
                    answers.set_result(answered)
