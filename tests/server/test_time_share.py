"""Each key's share of a process's time: a key alone is never held; while other keys ask, a
key past its share waits its turn, charged only its part of the time shared, and a key that
would wait past the bound is told 429 with when to come back."""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from scrapeflow.server._problems import Problem
from scrapeflow.server._timeshare import (
    LONGEST_WAIT,
    MOST_IN_FLIGHT,
    Permit,
    Siblings,
    TimeShare,
)


class Clock:
    """A clock the test moves, and a sleep that moves it (and yields once, as a sleep does)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def at_once(admission: Coroutine[Any, Any, Permit]) -> Permit:
    """The permit ``admission`` gives without waiting at all (fails if it would wait)."""
    with pytest.raises(StopIteration) as done:
        admission.send(None)
    permit = done.value.value
    assert isinstance(permit, Permit)
    return permit


def busy(share: TimeShare, clock: Clock, key: str, requests: int, seconds: float) -> None:
    """``requests`` of ``key`` in flight together for ``seconds``."""
    permits = [at_once(share.admit(key)) for _ in range(requests)]
    clock.now += seconds
    for permit in permits:
        share.done(permit)


def test_a_key_alone_is_never_held_however_much_it_asks() -> None:
    clock = Clock()
    share = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep)
    for _ in range(20):  # 20 s of the process, ten times its share
        busy(share, clock, "alone", requests=4, seconds=1.0)
    share.done(at_once(share.admit("alone")))
    assert clock.slept == []


def test_what_a_key_used_alone_is_not_owed_when_another_key_comes() -> None:
    """A UI's server, alone on the service for minutes with 20 requests in flight, is not
    refused the moment an operator's key asks: what it used alone was nobody's loss."""
    clock = Clock()
    share = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep)
    for _ in range(120):  # 2 minutes of the whole process, alone
        busy(share, clock, "ui", requests=20, seconds=1.0)
    assert clock.slept == []
    operator = at_once(share.admit("operator"))  # another key asks, and is in flight

    async def ui_again() -> None:
        share.done(await share.admit("ui"))  # not refused: it owes only its last second

    asyncio.run(ui_again())
    # Its last 20 requests' 1 s at 0.5 s a second; owing its 2 minutes alone (60 s), it was
    # refused 429 until the operator's key had been quiet for a second.
    assert 0 < sum(clock.slept) <= 2.0
    share.done(operator)


def test_a_request_is_charged_its_part_of_the_time_shared() -> None:
    clock = Clock()
    share = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep)
    honest = at_once(share.admit("honest"))
    busy(share, clock, "heavy", requests=MOST_IN_FLIGHT, seconds=4.5)  # 9 in flight for 4.5 s
    share.done(honest)
    # The honest request waited 4.5 s among 9: charged 0.5 s, within its account; the heavy
    # key was charged 8 parts of 9 (4 s, 2.25 s filled meanwhile, 1 s of burst: 0.75 s owed).
    share.done(at_once(share.admit("honest")))
    assert share.in_flight == 0

    async def heavy_again() -> None:
        share.done(await share.admit("heavy"))

    asyncio.run(heavy_again())
    assert sum(clock.slept) == pytest.approx(0.75 / 0.5)


def test_while_shared_a_key_has_at_most_its_bound_in_flight() -> None:
    clock = Clock()
    share = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep)
    other = at_once(share.admit("other"))
    many = [at_once(share.admit("many")) for _ in range(MOST_IN_FLIGHT)]

    async def one_more() -> float:
        async def end_one_soon() -> None:
            await asyncio.sleep(0)
            clock.now += 0.001
            share.done(many.pop())

        ending = asyncio.ensure_future(end_one_soon())
        permit = await share.admit("many")  # waits for one of its own to end
        await ending
        share.done(permit)
        return clock.now

    asyncio.run(one_more())
    assert clock.slept  # it waited
    assert len(many) == MOST_IN_FLIGHT - 1
    for permit in [*many, other]:
        share.done(permit)
    share.done(at_once(share.admit("many")))  # its own ended: in at once


def test_a_wait_past_the_bound_is_refused_with_when_to_come_back() -> None:
    clock = Clock()
    share = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep)
    heavy = [at_once(share.admit("heavy")) for _ in range(40)]  # alone: in at once
    other = at_once(share.admit("other"))  # another key asks while they run, and stays
    clock.now += 40.0
    for permit in heavy:
        share.done(permit)
    # Each charged its part of 40 s among 41, at most 1 s: 40 s, less 20 s filled meanwhile
    # and 1 s of burst (the time they ran while another key was in flight is owed): 19 s.

    with pytest.raises(Problem) as refused:
        asyncio.run(share.admit("heavy"))
    assert refused.value.status == 429
    assert refused.value.type == "too-many-requests"
    retry = int(refused.value.headers["Retry-After"])
    # 19 s owed at 0.5 s a second: 38 s to wait, 10 s of which it could have waited.
    assert 28 <= retry <= 30
    assert clock.slept == []  # refused at once, not after a wait
    share.done(other)

    clock.now += retry  # back when told: it waits (within the bound) instead of a refusal
    share.done(at_once(share.admit("other")))

    async def heavy_again() -> None:
        share.done(await share.admit("heavy"))

    asyncio.run(heavy_again())
    assert 0 < sum(clock.slept) <= LONGEST_WAIT


def test_a_keys_waiting_requests_go_in_one_at_a_time() -> None:
    clock = Clock()
    share = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep)
    other = at_once(share.admit("other"))
    # Charged 8 parts of 9 of 3.6 s (3.2 s) from 1 s, filled 1.8 s meanwhile: owes 0.4 s.
    busy(share, clock, "heavy", requests=MOST_IN_FLIGHT, seconds=3.6)
    let_in: list[float] = []

    async def waits() -> None:
        async def one() -> None:
            permit = await share.admit("heavy")
            let_in.append(clock.now)
            await clock.sleep(0.2)  # its work
            share.done(permit)

        await asyncio.gather(one(), one(), one())

    asyncio.run(waits())
    share.done(other)
    # Each waited for the one before to be charged and its account to fill again.
    assert len(let_in) == 3
    assert all(later - earlier > 0.1 for earlier, later in itertools.pairwise(let_in))


def test_a_key_alone_in_its_process_waits_while_another_process_serves_other_keys() -> None:
    """The kernel hands connections to processes: a UI's few connections can all land on one
    while a key's loops land on the other, where it looks alone."""
    clock = Clock()
    board = Siblings(2)
    here = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep, siblings=board)
    for _ in range(40):  # 4 s alone in the whole service: never held
        busy(here, clock, "heavy", requests=1, seconds=0.1)
    assert clock.slept == []

    board.place = 1  # the other process serves another key now
    there = TimeShare(share=0.5, burst=1.0, clock=clock, sleep=clock.sleep, siblings=board)
    there.done(at_once(there.admit("honest")))
    board.place = 0

    async def heavy_again() -> None:
        here.done(await here.admit("heavy"))

    asyncio.run(heavy_again())
    # As if the other key had asked here. Owed: its last request's 0.1 s less the 0.05 s its
    # account filled meanwhile, at 0.5 s a second; not its 4 s alone (2 s).
    assert sum(clock.slept) == pytest.approx(0.1)

    clock.now += 2  # the other process's key gone quiet for more than a second: alone again
    clock.slept.clear()
    busy(here, clock, "heavy", requests=1, seconds=3.0)
    here.done(at_once(here.admit("heavy")))
    assert clock.slept == []


def test_forked_processes_see_each_others_keys() -> None:
    board = Siblings(2)
    pid = os.fork()
    if pid == 0:  # the other process: it serves "honest" now
        board.place = 1
        board.post(("honest", time.monotonic()), ("", -math.inf))
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    since = time.monotonic() - 1
    assert board.other_key_since("heavy", since)  # seen by the other process
    assert not board.other_key_since("honest", since)  # its own key is not another's
