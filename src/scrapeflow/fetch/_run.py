"""A run of one shard: its lock, the repair of what a killed run left, then worker processes.

:class:`FetchRun` checks what could still be wrong before anything is written (Redis answers,
the store can be written), takes the shard's lock (:class:`~scrapeflow.storage.ShardLock`: a
second run of the shard is refused, not run beside this one), completes the items a killed run
left half-stored (:func:`~scrapeflow.storage.repair_shard`), and works out what is left to fetch.
:meth:`FetchRun.fetch` then fetches it in this process, or in up to ``settings.processes``
worker processes (never more than there are URLs), each an event loop with its own fetchers and
writers, splitting the URLs into contiguous parts.

Workers never outlive the run:

* they are forked from a *fork server* (``forkserver``): a fresh interpreter started once per
  run, which imports the fetcher once and has no threads, so a worker inherits no thread or
  lock of the parent's (its progress bar's thread, say) and starts in milliseconds, where a
  ``spawn`` start re-imported everything in every worker (about half a second each, which two
  processes on a 20,000-page list spent instead of fetching). The server is started as soon as
  a run is entered, so its imports overlap the parent's own checks. Each worker asks the kernel
  for ``SIGKILL`` when the fork server dies (Linux ``prctl(PR_SET_PDEATHSIG)``; the server
  exits when the parent does), and also watches the pipe its parent holds (any POSIX system):
  ``kill -9`` of the parent takes its workers with it;
* they inherit the shard's lock: it is held until the last of them has exited, so a resume
  started at once can never write beside a worker that is still dying;
* Ctrl-C or SIGTERM: the parent sends its workers SIGTERM; each cancels its fetches, gives the
  items it is storing a few seconds to finish, and exits; after :data:`GRACE_SECONDS` the
  stragglers are killed (an item cut then is completed by the next run). Workers ignore SIGINT:
  the parent decides. A run in one process stops the same way.

Progress comes back through shared memory, a row of counters per worker, so the parent can draw
one bar for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import reduction
from types import TracebackType
from typing import Any

from scrapeflow._util.atomic import pid_alive
from scrapeflow._util.interrupts import sigterm_interrupts
from scrapeflow.errors import ConfigError
from scrapeflow.fetch._input import FetchItem
from scrapeflow.fetch._pipeline import STOP_GRACE, FetchReport, fetch_share, redis_stream
from scrapeflow.fetch._settings import FetchSettings
from scrapeflow.storage import (
    BlobStore,
    ShardLock,
    journal_dir,
    logged_urls,
    make_indexes,
    remove_journal,
    repair_shard,
)

__all__ = ["GRACE_SECONDS", "OUTCOMES", "FetchRun", "run_fetch"]

OUTCOMES = ("stored", "duplicate", "failed", "skipped")
GRACE_SECONDS = STOP_GRACE + 2.0
"""After Ctrl-C or SIGTERM, how long workers may take to store what they hold and exit."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_TICK = 0.1  # seconds between two progress reports

CountsCallback = Callable[[dict[str, int]], None]


def run_fetch(
    settings: FetchSettings,
    items: Sequence[FetchItem],
    *,
    on_counts: CountsCallback | None = None,
) -> FetchReport:
    """Fetch ``items`` (the whole shard): ``with FetchRun(settings, items) as run: run.fetch()``.

    Raises :class:`~scrapeflow.storage.FetchInProgress` if another run holds the shard,
    :class:`~scrapeflow.errors.StorageError` if the store cannot be used, and
    ``KeyboardInterrupt`` on Ctrl-C (or SIGTERM, when called from the main thread).
    """
    with FetchRun(settings, items) as run:
        return run.fetch(on_counts=on_counts)


class FetchRun:
    """One run of a shard, from its checks to its last worker (see the module docstring).

    >>> with FetchRun(settings, read_items("urls.txt")) as run:  # doctest: +SKIP
    ...     print(f"{len(run.todo)} to fetch, {run.skipped} done before")
    ...     report = run.fetch()

    Entering checks, locks and repairs (nothing is written before the checks pass); leaving
    releases the lock, and forgets the journal when :meth:`fetch` ended normally.
    """

    def __init__(self, settings: FetchSettings, items: Sequence[FetchItem]) -> None:
        self.settings = settings
        self.items = items
        self.log_limit = settings.limit if settings.limit is not None else len(items)
        self.todo: list[FetchItem] = []
        """The items left to fetch (known once entered)."""
        self.skipped = 0
        """Items an earlier run of the shard stored."""
        self.repaired = 0
        """Items a killed run left half-stored, completed on entering."""
        self._lock: ShardLock | None = None
        self._journal = ""
        self._finished = False
        self._forks = False

    def __repr__(self) -> str:
        s = self.settings
        return f"FetchRun({s.fetch_id!r}, offset={s.offset}, limit={self.log_limit})"

    def __enter__(self) -> FetchRun:
        self._forks = self.settings.processes > 1 and len(self.items) > 1
        if self._forks:
            _worker_context()  # the fork server imports while this process checks and locks
        try:
            with sigterm_interrupts():
                asyncio.run(self._prepare())
        except BaseException:
            self._stop_fork_server()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_fork_server()
        lock, self._lock = self._lock, None
        if lock is None:
            return
        if self._finished:
            remove_journal(self._journal)  # every item it holds has its log line
        # Every worker has exited by now (fetch() waits for them): nobody holds the lock.
        lock.release(remove=True)

    def _stop_fork_server(self) -> None:
        """Stop the fork server this run started and wait for it (its workers have exited by
        now): a run leaves no process behind, and the workers' CPU time is counted in this
        process's children's, as a plain child's would be."""
        if self._forks:
            self._forks = False
            stop = getattr(multiprocessing.forkserver._forkserver, "_stop", None)  # 3.11-3.14
            if stop is not None:
                stop()

    async def _prepare(self) -> None:
        s = self.settings
        shard = (s.fetch_id, s.offset, self.log_limit)
        if s.redis_url:
            await _check_redis(s)
        async with BlobStore(s.store, s.program, storage_options=s.storage_options) as store:
            await store.check()  # the first write, if the store's directory must be made
            lock = ShardLock(store, *shard).acquire()
            try:
                indexes = make_indexes(s.indexes, store)
                completed = await repair_shard(store, *shard, indexes)
                if completed and s.redis_url:
                    await _push(s, completed)
                done = await logged_urls(store, *shard)
            except BaseException:
                lock.release(remove=False)
                raise
        self._lock = lock
        self._journal = journal_dir(store, *shard)
        self.repaired = len(completed)
        self.todo = [item for item in self.items if item.url not in done]
        self.skipped = len(self.items) - len(self.todo)

    def fetch(self, *, on_counts: CountsCallback | None = None) -> FetchReport:
        """Fetch what is left; ``on_counts`` gets the counts of :data:`OUTCOMES` as they move
        (per URL in one process, ten times a second with workers)."""
        if self._lock is None:
            raise ConfigError(f"{self!r}.fetch() outside 'with FetchRun(...)'")
        report = FetchReport(items=len(self.items), skipped=self.skipped)
        counts = dict.fromkeys(OUTCOMES, 0)
        counts["skipped"] = self.skipped
        if on_counts is not None:
            on_counts(counts)
        if self.todo:
            processes = min(self.settings.processes, len(self.todo))
            if processes == 1:
                report.add(self._in_process(counts, on_counts))
            else:
                report.add(self._in_workers(processes, counts, on_counts))
        self._finished = True
        return report

    def _in_process(self, counts: dict[str, int], on_counts: CountsCallback | None) -> FetchReport:
        def count(outcome: str) -> None:
            counts[outcome] += 1
            if on_counts is not None:
                on_counts(counts)

        return _fetch_share(self.settings, self.todo, self.log_limit, count)

    def _in_workers(
        self, processes: int, counts: dict[str, int], on_counts: CountsCallback | None
    ) -> FetchReport:
        if self._lock is None or self._lock.fd is None:
            raise ConfigError(f"{self!r} does not hold its lock")
        context = _worker_context()
        rows = context.RawArray("q", processes * len(OUTCOMES))  # a row per worker: no lock
        size = -(-len(self.todo) // processes)
        parts = [self.todo[i : i + size] for i in range(0, len(self.todo), size)]
        workers: list[_Worker] = []
        with sigterm_interrupts():
            try:
                for row, part in enumerate(parts):
                    receive, send = context.Pipe(duplex=False)
                    process = context.Process(
                        target=_worker,
                        args=(
                            self.settings,
                            part,
                            self.log_limit,
                            rows,
                            row,
                            send,
                            _Inherited(self._lock.fd),
                            os.getpid(),
                        ),
                        name=f"scrapeflow-fetch-{row}",
                        daemon=True,
                    )
                    with _sigint_ignored_by_children():
                        process.start()
                    send.close()
                    workers.append(_Worker(process, receive))
                return _supervise(workers, rows, counts, on_counts)
            finally:
                _stop(workers)


def _worker_context() -> Any:
    """The multiprocessing context workers start in: forked from a fork server that has
    imported this module (see the module docstring); the server is started by the first call."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with _sigint_ignored_by_children():  # the server ignores SIGINT itself once it runs
        multiprocessing.forkserver.ensure_running()
    return context


@dataclass
class _Worker:
    process: Any  # multiprocessing's ForkServerProcess
    results: multiprocessing.connection.Connection
    message: tuple[str, Any] | None = None


def _supervise(
    workers: list[_Worker], rows: Any, counts: dict[str, int], on_counts: CountsCallback | None
) -> FetchReport:
    """Wait for every worker's report, drawing progress; the first failure stops the rest."""
    waiting = {id(w.results): w for w in workers}
    while waiting:
        ready = multiprocessing.connection.wait([w.results for w in waiting.values()], _TICK)
        for handle in ready:
            worker = waiting.pop(id(handle))
            try:
                worker.message = worker.results.recv()
            except (EOFError, OSError):  # it died before it could say anything
                worker.process.join(1)
                raise RuntimeError(
                    f"fetch worker {worker.process.pid} died (exit code "
                    f"{worker.process.exitcode}); run the same command again to resume"
                ) from None
            kind, payload = worker.message
            if kind == "error":
                raise payload
            if kind == "interrupted":
                raise KeyboardInterrupt  # stopped from outside: the run is cut short
        _tally(rows, len(workers), counts)
        if on_counts is not None:
            on_counts(counts)
    report = FetchReport()
    for worker in workers:
        if worker.message is not None:
            report.add(worker.message[1])
    return report


def _tally(rows: Any, workers: int, counts: dict[str, int]) -> None:
    width = len(OUTCOMES)
    for n, name in enumerate(OUTCOMES):
        if name != "skipped":
            counts[name] = sum(rows[w * width + n] for w in range(workers))


def _stop(workers: list[_Worker]) -> None:
    """End every worker: SIGTERM, :data:`GRACE_SECONDS` to finish, then SIGKILL; wait for all."""
    alive = [w.process for w in workers if w.process.is_alive()]
    try:
        for process in alive:
            process.terminate()
        deadline = time.monotonic() + GRACE_SECONDS
        for process in alive:
            process.join(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: no more grace
    finally:
        for worker in workers:
            if worker.process.is_alive():
                worker.process.kill()
            worker.process.join()
            worker.results.close()
            worker.process.close()


def _worker(
    settings: FetchSettings,
    items: list[FetchItem],
    log_limit: int,
    rows: Any,
    row: int,
    results: multiprocessing.connection.Connection,
    lock: _Inherited,
    parent: int,
) -> None:
    """A worker process: fetch ``items``, count in row ``row``, send back what happened.
    ``lock`` (the shard's) stays open until the process exits."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides: it sends SIGTERM
    base = row * len(OUTCOMES)
    positions = {name: base + n for n, name in enumerate(OUTCOMES)}

    def count(outcome: str) -> None:
        rows[positions[outcome]] += 1

    message: tuple[str, Any]
    try:
        message = ("report", _fetch_share(settings, items, log_limit, count))
    except KeyboardInterrupt:
        message = ("interrupted", None)
    except BaseException as exc:  # every failure goes back to the parent
        message = ("error", exc)
    try:
        results.send(message)
    except Exception:  # an exception that does not pickle: send its text
        error = message[1]
        results.send(("error", RuntimeError(f"{type(error).__name__}: {error}")))
    results.close()
    del lock  # held to here on purpose; the process's exit closes it


def _fetch_share(
    settings: FetchSettings,
    items: Sequence[FetchItem],
    log_limit: int,
    on_progress: Callable[[str], None],
) -> FetchReport:
    """Fetch ``items`` in an event loop of this thread. In the main thread SIGTERM cancels the
    work like Ctrl-C (what is stored is logged); both end in ``KeyboardInterrupt``."""

    async def share() -> FetchReport:
        task = asyncio.current_task()
        if task is not None and threading.current_thread() is threading.main_thread():
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        report = FetchReport()
        async with BlobStore(
            settings.store, settings.program, storage_options=settings.storage_options
        ) as store:
            await fetch_share(
                store, settings, items, log_limit=log_limit, report=report, on_progress=on_progress
            )
        return report

    try:
        return asyncio.run(share())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


def _die_with_parent(parent: int) -> None:
    """Make this process die with ``parent``, the run's process: a thread watches the pipe the
    parent holds open (EOF when it dies), and on Linux the kernel's parent-death signal covers
    the fork server this worker was forked from (it exits when the parent does)."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the fork server died before we asked: nobody will tell us
        os._exit(1)
    if not pid_alive(parent):
        os._exit(1)
    origin = multiprocessing.parent_process()
    if origin is not None and origin.sentinel is not None:
        threading.Thread(
            target=_watch_parent, args=(origin.sentinel,), name="parent-watch", daemon=True
        ).start()


def _watch_parent(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os.kill(os.getpid(), signal.SIGKILL)


class _Inherited:
    """A file descriptor a spawned worker inherits (the shard lock's open file)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Callable[[Any], _Inherited], tuple[Any]]:
        # Only while a process is being spawned: multiprocessing passes the descriptor on.
        return _rebuild_inherited, (reduction.DupFd(self.fd),)


def _rebuild_inherited(dup: Any) -> _Inherited:
    return _Inherited(dup.detach())


@contextlib.contextmanager
def _sigint_ignored_by_children() -> Iterator[None]:
    """Start children with SIGINT ignored (an ignored signal stays ignored across exec, and
    Python then leaves it so): a Ctrl-C while a worker starts does not print its traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


async def _check_redis(settings: FetchSettings) -> None:
    """Refuse an unreachable Redis before anything is written."""
    from scrapeflow.fetch._redis import RedisPush

    push = RedisPush(settings.redis_url or "", stream=redis_stream(settings))
    try:
        await push.connect()
    finally:
        await push.close()


async def _push(settings: FetchSettings, entries: Sequence[Any]) -> None:
    from scrapeflow.fetch._redis import RedisPush

    push = RedisPush(settings.redis_url or "", stream=redis_stream(settings))
    try:
        await push.connect()
        for entry in entries:
            await push.push(entry)
    finally:
        await push.close()
