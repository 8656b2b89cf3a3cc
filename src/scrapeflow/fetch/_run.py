"""``MAX_CPUS`` processes, each an event loop with its own fetchers and writers.

The shard's items are split into contiguous parts, one per process; every process writes to
the same fetch log, indexes and WARC file (the storage layer makes that safe). Progress comes
back through shared counters, so the parent can draw one bar for all of them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from scrapeflow.fetch._input import FetchItem
from scrapeflow.fetch._pipeline import FetchReport, fetch_items
from scrapeflow.fetch._settings import FetchSettings

__all__ = ["OUTCOMES", "run_fetch"]

OUTCOMES = ("stored", "duplicate", "failed", "skipped")
_counters: Any = None  # set in each child by _init_child


def run_fetch(
    settings: FetchSettings,
    items: Sequence[FetchItem],
    *,
    on_counts: Callable[[dict[str, int]], None] | None = None,
) -> FetchReport:
    """Fetch ``items`` (the whole shard) with ``settings.max_cpus`` processes."""
    log_limit = settings.limit if settings.limit is not None else len(items)
    cpus = max(1, min(settings.max_cpus, len(items)))
    if cpus == 1:
        counts = dict.fromkeys(OUTCOMES, 0)

        def count(outcome: str) -> None:
            counts[outcome] += 1
            if on_counts is not None:
                on_counts(counts)

        return asyncio.run(fetch_items(settings, items, log_limit=log_limit, on_progress=count))
    context = multiprocessing.get_context("spawn")
    shared = context.Array("q", len(OUTCOMES))
    size = -(-len(items) // cpus)
    parts = [list(items[i : i + size]) for i in range(0, len(items), size)]
    report = FetchReport()
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(shared, on_counts, stop), daemon=True)
    watcher.start()
    try:
        with ProcessPoolExecutor(
            len(parts), mp_context=context, initializer=_init_child, initargs=(shared,)
        ) as pool:
            futures = [pool.submit(_child, settings, part, log_limit) for part in parts]
            for future in futures:
                report.add(future.result())
    finally:
        stop.set()
        watcher.join()
    if on_counts is not None:
        on_counts(dict(zip(OUTCOMES, shared[:], strict=True)))
    return report


def _watch(shared: Any, on_counts: Callable[[dict[str, int]], None] | None, stop: Any) -> None:
    while not stop.wait(0.1):
        if on_counts is not None:
            on_counts(dict(zip(OUTCOMES, shared[:], strict=True)))


def _init_child(shared: Any) -> None:
    global _counters
    _counters = shared


def _child(settings: FetchSettings, items: list[FetchItem], log_limit: int) -> FetchReport:
    positions = {name: n for n, name in enumerate(OUTCOMES)}

    def count(outcome: str) -> None:
        with _counters.get_lock():
            _counters[positions[outcome]] += 1

    return asyncio.run(fetch_items(settings, items, log_limit=log_limit, on_progress=count))
