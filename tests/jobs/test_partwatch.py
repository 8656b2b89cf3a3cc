"""The reads of the parts a process's jobs wait for (``scrapeflow.jobs._partwatch``, over
``scrapeflow.jobs._batched``): the jobs that ask at the same moment share one read, none is
answered by a read that began before it asked, a failed read fails each of its callers, and
one caller cancelled leaves the others their answer; waits on the process's clock wake in the
same turn (so they share a read); an error in one item's place of a batch is raised in its
caller alone."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

import pytest

from scrapeflow.jobs._batched import Batched
from scrapeflow.jobs._partwatch import PartStates, next_tick


class Rows:
    """A table of states read by id; each read waits for ``gate`` (when set) and is logged."""

    def __init__(self) -> None:
        self.states = {"a": "queued", "b": "queued", "c": "running"}
        self.reads: list[set[str]] = []
        self.gate: asyncio.Event | None = None
        self.fail: Exception | None = None

    async def read(self, ids: Collection[str]) -> dict[str, str]:
        self.reads.append(set(ids))
        seen = dict(self.states)  # what the read sees: the rows as it began
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return {i: seen[i] for i in ids if i in seen}


async def test_callers_of_the_same_moment_share_one_read() -> None:
    rows = Rows()
    watch = PartStates(rows.read)
    answers = await asyncio.gather(*(watch.read([i]) for i in ("a", "b", "c", "missing")))
    assert answers == [{"a": "queued"}, {"b": "queued"}, {"c": "running"}, {}]
    assert rows.reads == [{"a", "b", "c", "missing"}]
    assert watch.reads == 1


async def test_a_caller_is_answered_by_a_read_that_began_after_it_asked() -> None:
    rows = Rows()
    rows.gate = asyncio.Event()
    watch = PartStates(rows.read)
    first = asyncio.create_task(watch.read(["a"]))
    await asyncio.sleep(0.01)  # the first read is under way, and saw "a" queued
    rows.states["a"] = "succeeded"
    second = asyncio.create_task(watch.read(["a", "b"]))
    await asyncio.sleep(0.01)
    rows.gate.set()
    assert await first == {"a": "queued"}
    assert await second == {"a": "succeeded", "b": "queued"}  # not the first read's rows
    assert rows.reads == [{"a"}, {"a", "b"}]


async def test_a_failed_read_fails_each_of_its_callers_and_the_next_read_is_made() -> None:
    rows = Rows()
    rows.fail = ConnectionResetError("the database went away")
    watch = PartStates(rows.read)
    answers = await asyncio.gather(watch.read(["a"]), watch.read(["b"]), return_exceptions=True)
    assert [type(a) for a in answers] == [ConnectionResetError, ConnectionResetError]
    rows.fail = None
    assert await watch.read(["a"]) == {"a": "queued"}


async def test_one_caller_cancelled_leaves_the_others_their_answer() -> None:
    rows = Rows()
    rows.gate = asyncio.Event()
    watch = PartStates(rows.read)
    leaving = asyncio.create_task(watch.read(["a"]))
    staying = asyncio.create_task(watch.read(["b"]))
    await asyncio.sleep(0.01)
    leaving.cancel()
    rows.gate.set()
    assert await staying == {"b": "queued"}
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_waits_on_the_process_clock_wake_together() -> None:
    poll = 0.2
    woke: list[float] = []
    loop = asyncio.get_running_loop()

    async def wait(offset: float) -> None:
        await asyncio.sleep(offset)
        await asyncio.sleep(next_tick(poll))
        woke.append(loop.time())

    await asyncio.sleep(next_tick(poll))  # just after a tick: the waits begin within 50 ms
    await asyncio.gather(*(wait(n * 0.01) for n in range(6)))
    assert max(woke) - min(woke) < poll / 2  # the same tick, whenever each began to wait


async def test_an_error_in_an_items_place_is_raised_in_its_caller_alone() -> None:
    batches: list[list[int]] = []

    async def halve(items: list[int]) -> list[int | Exception]:
        batches.append(items)
        return [n // 2 if n % 2 == 0 else ValueError(f"{n} is odd") for n in items]

    halving = Batched(halve, "halving")
    answers = await asyncio.gather(*(halving(n) for n in (2, 3, 4)), return_exceptions=True)
    assert answers[0] == 1 and answers[2] == 2
    assert isinstance(answers[1], ValueError) and str(answers[1]) == "3 is odd"
    assert batches == [[2, 3, 4]]
