"""The failed-attempt tracker is bounded: a flood of failures from rotating addresses keeps at
most its maximum of addresses, at a constant cost per failure, and an address's failures leave
its window."""

from __future__ import annotations

import time

from scrapeflow.server._state import AuthFailures


def test_a_flood_of_addresses_keeps_the_tracker_bounded_and_cheap() -> None:
    failures = AuthFailures(allowed=10, window=60.0, max_addresses=10_000)
    started = time.perf_counter()
    for n in range(120_000):
        failures.failed(f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}")
    per_failure = (time.perf_counter() - started) / 120_000
    assert len(failures) == 10_000
    assert per_failure < 50e-6, f"{per_failure * 1e6:.1f} µs a failure"  # was 1.8 ms past 100k
    # The latest addresses are still known, each with its own count.
    for _ in range(10):
        failures.failed("192.0.2.1")
    assert failures.retry_after("192.0.2.1") > 0
    assert failures.retry_after("198.51.100.1") == 0


def test_failures_leave_their_window() -> None:
    failures = AuthFailures(allowed=2, window=0.2)
    for _ in range(5):
        failures.failed("192.0.2.1")
    assert failures.retry_after("192.0.2.1") > 0
    time.sleep(0.25)
    assert failures.retry_after("192.0.2.1") == 0
    assert len(failures) == 0  # forgotten once quiet
