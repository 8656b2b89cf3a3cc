"""How long a refused event stream's answer is held: not at all for a key that asks past its
cap now and then, longer and longer for one that keeps flooding, short again once it calms."""

from __future__ import annotations

import pytest

from scrapeflow.server import _fairuse
from scrapeflow.server._fairuse import StreamSlots


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def holds(slots: StreamSlots, key: str, refusals: int) -> list[float]:
    return [slots.hold_for(key) for _ in range(refusals)]


def test_holds_lengthen_while_a_key_floods_and_end_when_it_calms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(_fairuse.time, "monotonic", clock)
    slots = StreamSlots(per_key=2, total=100)

    first = holds(slots, "k", 50)  # a flood's first window
    assert first[:2] == [0.0, 0.0]  # up to its cap of refusals, answered at once
    assert all(5 <= hold <= 10 for hold in first[2:])
    assert holds(slots, "calm", 2) == [0.0, 0.0]  # another key is not held for it

    clock.now += 11  # the next window: it kept asking
    second = holds(slots, "k", 50)
    assert second[:2] == [0.0, 0.0]
    assert all(10 <= hold <= 20 for hold in second[2:])

    for _ in range(3):  # and on: held 15-30 s at most
        clock.now += 11
        later = holds(slots, "k", 50)
    assert all(15 <= hold <= 30 for hold in later[2:])

    clock.now += 11  # a window within its cap of refusals...
    assert holds(slots, "k", 2) == [0.0, 0.0]
    clock.now += 11  # ...and a flood after it starts from the shortest hold again
    again = holds(slots, "k", 10)
    assert all(5 <= hold <= 10 for hold in again[2:])

    clock.now += 11  # flooding again...
    holds(slots, "k", 10)
    clock.now += 60  # ...then a minute without asking: the next flood starts short
    after_a_pause = holds(slots, "k", 10)
    assert all(5 <= hold <= 10 for hold in after_a_pause[2:])
