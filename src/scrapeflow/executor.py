"""The workflow engine: run every task's executors, in parallel, resumably.

>>> from pathlib import Path
>>> from scrapeflow.executor import execute_async
>>> from scrapeflow.scrape import scrape
>>> tasks = {"home": {"url": "http://127.0.0.1:8080/"}}
>>> await execute_async([scrape], Path("/tmp/test/"), tasks)  # doctest: +SKIP
['home']

Each task's status is kept in ``<directory>/<key>.status.json``; a second call skips every
executor that already succeeded, so a run that was stopped (Ctrl-C, a crash, ``kill -9``) picks
up where it was.

An executor may add follow-up tasks with ``await context.add_task(key, params)`` (the next page
of a cursor chain): each is saved before it is scheduled, runs in the same run, and a later run
of the same task set finishes the ones that had not.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from array import array
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from scrapeflow._taskify import (
    ALL,
    Context,
    Executor,
    ExecutorResponse,
    TaskClock,
    as_executor,
    executor_name,
    task_clock,
    taskify,
)
from scrapeflow._util.logs import get_logger
from scrapeflow.errors import ConfigError, InputError, TaskConflict, TaskNotFound
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.proxies import ProxyProvider
from scrapeflow.status import (
    SKIPPED,
    JsonDirStore,
    Params,
    StatusData,
    StatusStore,
    check_key,
    dump_status,
)

__all__ = [
    "ADDED_BY",
    "ALL",
    "DEFAULT_MAX_PARALLELISM",
    "DEFAULT_TIMEOUT",
    "FOLLOW_UPS",
    "Context",
    "Executor",
    "ExecutorResponse",
    "Params",
    "RunProgress",
    "StatusData",
    "TaskOutcome",
    "execute_async",
    "taskify",
]

DEFAULT_TIMEOUT = 30.0
"""Seconds a task may run before it is cancelled and recorded as a ``TimeoutError``."""

DEFAULT_MAX_PARALLELISM = 100
"""Concurrent tasks when ``max_parallelism`` is not given. Not a cap: any positive int works,
and never starts more workers than there are tasks."""

TaskInput = Mapping[str, Params] | Iterable[str | tuple[str, Params]]

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How one task ended in this run."""

    key: str
    ok: bool
    skipped: bool  # every executor was skipped: nothing ran
    statuses: dict[str, str]  # executor name -> its status text


@dataclass(slots=True)
class RunProgress:
    """Counters of a run, passed to ``on_progress`` after every task."""

    total: int | None
    started_at: float = field(default_factory=time.monotonic)
    done: int = 0
    succeeded: int = 0
    skipped: int = 0
    failed: int = 0
    last: TaskOutcome | None = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    @property
    def rate(self) -> float:
        """Tasks finished per second so far."""
        elapsed = self.elapsed
        return self.done / elapsed if elapsed > 0 else 0.0


ProgressCallback = Callable[[RunProgress], None]


async def execute_async(
    executors: Sequence[Executor],
    directory: Path,
    tasks: TaskInput,
    timeout: float | None = None,  # noqa: ASYNC109 - the seed's signature
    force_executors: list[str] | None = None,
    max_parallelism: int | None = None,
    proxy_provider: ProxyProvider | None = None,
    *,
    store: StatusStore | None = None,
    http: HttpClient | HttpConfig | None = None,
    on_progress: ProgressCallback | None = None,
) -> list[str]:
    """Run ``executors`` in order on every task, ``max_parallelism`` tasks at a time.

    ``tasks`` is a dict ``key -> params`` on the first run; later runs may give only the keys,
    and the params are read back from the status files. Any iterable of keys or of
    ``(key, params)`` pairs works too and is consumed lazily: a million tasks do not become a
    million coroutines.

    ``timeout`` (default 30 s) bounds each task; ``force_executors`` names executors to rerun
    even if they succeeded before (``["all"]`` for all); ``proxy_provider`` gives the proxies
    that ``scrape`` goes through.

    Beyond the seed: ``store`` replaces the status directory by another :class:`StatusStore`;
    ``http`` is the HTTP layer's configuration, or your own open
    :class:`~scrapeflow.http.HttpClient` (then ``proxy_provider`` is the client's); every
    request of ``scrape`` goes through it, and ``context.session`` is its default session for
    your own executors. ``on_progress`` is called after each task with the run's
    :class:`RunProgress`.

    Executors may add follow-up tasks with :meth:`Context.add_task`; they run in this run on
    the same workers, and a later call with the same ``tasks`` runs those that had not finished
    (the chain is found again through each parent's ``"follow_ups"`` field).

    Returns the keys of the tasks that succeeded or were skipped, in input order, then those of
    the follow-ups that succeeded or were skipped, in the order they were added. An error
    outside the seed's expected list stops the run once every finished task's status is saved,
    and propagates unchanged.
    """
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout}")
    parallelism = DEFAULT_MAX_PARALLELISM if max_parallelism is None else max_parallelism
    if not isinstance(parallelism, int) or parallelism < 1:
        raise ConfigError(f"max_parallelism must be a positive integer, got {max_parallelism!r}")
    chain = [as_executor(e) for e in executors]
    if not chain:
        raise ConfigError("executors is empty: give at least one executor")
    _check_names(chain)
    forced = _check_forced(force_executors, chain)

    store = JsonDirStore(directory) if store is None else store
    await store.prepare()
    if isinstance(tasks, Sequence) and not isinstance(tasks, str):
        await _check_keys_known(tasks, store)
    own_client = not isinstance(http, HttpClient)
    if isinstance(http, HttpClient):
        client = http
    else:
        config = http or HttpConfig(max_connections=parallelism, timeout=timeout)
        client = await HttpClient(config, proxy_provider=proxy_provider).__aenter__()
    context = Context(
        dir=Path(directory),
        session=client.aiohttp_session,
        forced_executors=forced,
        semaphore=asyncio.Semaphore(parallelism),
        timeout_seconds=timeout,
        proxy_provider=client.proxy_provider,
        http=client,
    )
    progress = RunProgress(total=len(tasks) if isinstance(tasks, Mapping | Sequence) else None)
    run = _Run(chain, context, store, progress, on_progress)
    run.context = context._replace(follow_ups=run)
    _log.info(
        "run.start",
        directory=str(directory),
        tasks=progress.total,
        parallelism=parallelism,
        executors=[executor_name(e) for e in chain],
    )
    try:
        await run.run_all(_task_stream(tasks), parallelism)
    finally:
        if own_client:
            await client.aclose()
        _log.info(
            "run.end",
            done=progress.done,
            succeeded=progress.succeeded,
            skipped=progress.skipped,
            failed=progress.failed,
            seconds=round(progress.elapsed, 3),
        )
    return run.succeeded()


def _check_names(chain: list[Executor]) -> None:
    """Executor names become status fields: they must not collide with each other or with the
    engine's own fields (``name``, ``params``, ``added_by``, ``follow_ups``)."""
    names = [executor_name(e) for e in chain]
    fields: dict[str, str] = {}
    for name in names:
        for field_name in (name, f"{name}_status", f"{name}_last_run"):
            if field_name in _RESERVED_FIELDS or field_name in fields:
                other = fields.get(field_name, field_name)
                raise ConfigError(
                    f"executor {name!r} would overwrite the status field {field_name!r}"
                    + (f" of executor {other!r}" if other != field_name else "")
                    + "; give it another name"
                )
            fields[field_name] = name


def _check_forced(force_executors: list[str] | str | None, chain: list[Executor]) -> list[str]:
    if isinstance(force_executors, str):
        force_executors = [force_executors]  # force_executors="all" means what it says
    forced = list(force_executors or [])
    names = {executor_name(e) for e in chain}
    unknown = [f for f in forced if f != ALL and f not in names]
    if unknown:
        raise ConfigError(
            f"force_executors names no executor of this run: {', '.join(unknown)} "
            f"(executors: {', '.join(sorted(names))}; or 'all')"
        )
    return forced


async def _check_keys_known(tasks: Sequence[Any], store: StatusStore) -> None:
    """A list of bare keys must name tasks the store knows; say which do not before starting."""
    missing = [t for t in tasks if isinstance(t, str) and not await store.exists(check_key(t))]
    if missing:
        shown = ", ".join(repr(k) for k in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise TaskNotFound(
            f"{len(missing)} task key(s) have no status in {store!r} and no params were given: "
            f"{shown}; pass a dict key -> params the first time"
        )


def _task_stream(tasks: TaskInput) -> Iterator[tuple[int, str, Params | None]]:
    items: Iterable[Any] = tasks.items() if isinstance(tasks, Mapping) else tasks
    if isinstance(items, str):
        raise InputError("tasks must be a dict key -> params or a list of keys, not a string")
    for index, item in enumerate(items):
        if isinstance(item, str):
            yield index, check_key(item), None
        elif isinstance(item, tuple) and len(item) == 2:
            key, params = item
            if not isinstance(params, Mapping):
                raise InputError(f"params of task {key!r} must be a dict, got {params!r}")
            yield index, check_key(key), dict(params)
        else:
            raise InputError(f"task #{index} is neither a key nor a (key, params) pair: {item!r}")


ADDED_BY = "added_by"
"""Status field of a follow-up task: the key of the task whose executor added it."""
FOLLOW_UPS = "follow_ups"
"""Status field of a task that added follow-ups: their keys, in the order they were added."""
_RESERVED_FIELDS = frozenset({"name", "params", ADDED_BY, FOLLOW_UPS})
# Follow-ups sort after every input task (whose indexes count from 0) in the returned keys.
_FOLLOW_UP_BASE = 1 << 62


class _Run:
    """One call of ``execute_async``: a pool of at most ``workers`` workers pulling tasks from
    the input stream and from the follow-ups its executors add."""

    def __init__(
        self,
        chain: list[Executor],
        context: Context,
        store: StatusStore,
        progress: RunProgress,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.chain = chain
        self.names = [executor_name(e) for e in chain]
        self.status_fields = [f"{n}_status" for n in self.names]
        self.context = context
        self.store = store
        self._saves_inline = getattr(store, "saves_inline", False) is True
        self.progress = progress
        self.on_progress = on_progress
        # Keys of the tasks that succeeded, and their input positions packed as machine ints:
        # about 100 bytes a task rather than 200 for a list of (index, key) tuples.
        self.succeeded_keys: list[str] = []
        self._in_flight: dict[str, asyncio.Event | None] = {}
        self.succeeded_at = array("q")
        self._pool: _Pool | None = None
        self._follow_ups: set[str] = set()  # scheduled in this run
        self._children: dict[str, list[str]] = {}  # running parent -> follow-ups it added
        self._adding = asyncio.Lock()  # one add at a time: check, save, schedule as one step

    def succeeded(self) -> list[str]:
        """The succeeded keys in input order (workers finish out of order)."""
        keys, at = self.succeeded_keys, self.succeeded_at
        if all(at[i] < at[i + 1] for i in range(len(at) - 1)):
            return keys
        return [keys[i] for i in sorted(range(len(keys)), key=at.__getitem__)]

    async def run_all(self, stream: Iterator[tuple[int, str, Params | None]], workers: int) -> None:
        """Run every task of ``stream`` on at most ``workers`` workers, each started with a task
        in hand: never more workers than tasks (a 2-URL list at parallelism 10,000 runs 2)."""
        self._pool = pool = _Pool(stream, self._worker, workers)
        try:
            # All at once, as a pool of `workers` would start: the first requests leave together.
            for item in itertools.islice(stream, workers):
                pool.spawn(item)
        except BaseException:  # a bad task in the stream: stop the ones started
            await _cancel_all(pool.tasks)
            raise
        if not pool.tasks:
            return
        watchdog = asyncio.create_task(self._watch(pool.workers))
        try:
            await pool.finished.wait()
        except asyncio.CancelledError:
            pool.closed = True
            await _cancel_all([*pool.tasks, watchdog])
            raise
        pool.closed = True
        await _cancel_all([watchdog])
        if pool.error is not None:
            await _cancel_all(pool.tasks)
            raise pool.error

    async def add_task(self, parent: str, key: str, params: Params) -> bool:
        """:meth:`Context.add_task`: save ``key`` as a follow-up of ``parent``, then schedule it."""
        key = check_key(key)
        wanted = _json_params(key, params)
        async with self._adding:
            stored = await self.store.load(key)
            if stored is None:
                # Saved before it is scheduled: a crash from here on loses nothing.
                await self.store.save(key, {"name": key, "params": wanted, ADDED_BY: parent})
                self._link(parent, key)
                self._schedule(key)
                return True
            if stored.get("params") != wanted:
                if stored.get(ADDED_BY) != parent:
                    raise TaskConflict(
                        f"task {key!r} exists with other params than task {parent!r} adds now; "
                        "give the follow-up another key (the stored status was left untouched)"
                    )
                # Its own parent, retried, re-adds it (a cursor differs at every fetch): one
                # chain, not a fork. New params replace the old only if it never ran.
                if self._never_ran(stored, key):
                    stored["params"] = wanted
                    await self.store.save(key, stored)
            if stored.get(ADDED_BY) is None:
                return False  # a task of the input: its own list runs it
            self._link(parent, key)
            if key not in self._follow_ups:  # left unfinished by an earlier run
                self._schedule(key)
            return False

    def _never_ran(self, stored: StatusData, key: str) -> bool:
        return key not in self._in_flight and not any(f in stored for f in self.status_fields)

    def _link(self, parent: str, key: str) -> None:
        children = self._children.setdefault(parent, [])
        if key not in children:
            children.append(key)

    def _schedule(self, key: str) -> None:
        if self._pool is None:  # pragma: no cover - add_task runs inside run_all
            raise RuntimeError("follow-up added outside a run")
        self._follow_ups.add(key)
        if self.progress.total is not None:
            self.progress.total += 1
        self._pool.push((_FOLLOW_UP_BASE + len(self._follow_ups), key, None))

    async def _resume_follow_ups(self, status: StatusData) -> None:
        """Schedule the follow-ups an earlier run saved for this task (finished ones skip)."""
        listed = status.get(FOLLOW_UPS)
        if not isinstance(listed, list):
            return
        for child in listed:
            if (
                isinstance(child, str)
                and child not in self._follow_ups
                and await self.store.exists(child)
            ):
                self._schedule(child)

    async def _save(self, key: str, status: StatusData) -> None:
        """Save a task's status, listing the follow-ups it added (how a resume finds them)."""
        added = self._children.get(key)
        if added:
            listed = status.get(FOLLOW_UPS)
            if not isinstance(listed, list):
                listed = status[FOLLOW_UPS] = []
            seen = set(listed)
            listed.extend(k for k in added if k not in seen)
        if self._saves_inline:  # it cannot be cut: no task of its own needed
            await self.store.save(key, status)
            return
        # Shielded: a run cancelled while a database store writes still keeps the executor's
        # result, so a resume does not redo it.
        await asyncio.shield(self.store.save(key, status))

    async def _watch(self, workers: dict[asyncio.Task[None], TaskClock]) -> None:
        """Cancel an executor whose task is past its deadline (a timer per run, not per call)."""
        loop = asyncio.get_running_loop()
        interval = min(0.25, max(0.005, self.context.timeout_seconds / 20))
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for clock in workers.values():
                if clock.in_executor and not clock.expired and clock.deadline <= now:
                    clock.expired = True
                    if clock.task is not None:
                        clock.task.cancel()

    async def _worker(self, pool: _Pool, clock: TaskClock, first: _Item) -> None:
        clock.task = asyncio.current_task()
        task_clock.set(clock)  # this worker's own context: set once, reused for every task
        timeout = self.context.timeout_seconds
        loop = asyncio.get_running_loop()
        progress = self.progress
        # Tasks are pulled one at a time, so memory holds `workers` tasks, never the whole set.
        in_flight = self._in_flight
        item: _Item | None = first
        while item is not None:
            index, key, params = item
            while key in in_flight:  # the same key twice in the input: one after the other
                waiter = in_flight[key] or asyncio.Event()
                in_flight[key] = waiter
                await waiter.wait()
            in_flight[key] = None
            clock.key = key
            try:
                status = await self._load(key, params)
                if FOLLOW_UPS in status:
                    await self._resume_follow_ups(status)
                clock.deadline = loop.time() + timeout
                ok, ran_any = await self._run_task(key, status)
            finally:
                clock.key = None
                self._children.pop(key, None)
                waiting = in_flight.pop(key)
                if waiting is not None:
                    waiting.set()
            progress.done += 1
            if ok:
                self.succeeded_keys.append(key)
                self.succeeded_at.append(index)
                if ran_any:
                    progress.succeeded += 1
                else:
                    progress.skipped += 1
            else:
                progress.failed += 1
                _log.debug("task.failed", key=key, statuses=self._statuses(status))
            if self.on_progress is not None:
                progress.last = TaskOutcome(
                    key=key, ok=ok, skipped=ok and not ran_any, statuses=self._statuses(status)
                )
                self.on_progress(progress)
            item = pool.next_item()

    def _statuses(self, status: StatusData) -> dict[str, str]:
        return {n: str(status.get(f"{n}_status", "")) for n in self.names}

    async def _run_task(self, key: str, status: StatusData) -> tuple[bool, bool]:
        """Run the chain on one task; (succeeded, anything ran). Saves after each executor."""
        ok, ran_any, dirty = True, False, False
        for executor, status_field in zip(self.chain, self.status_fields, strict=True):
            before = status.get(status_field)
            try:
                status, ok = await executor(self.context, status)
            except Exception:
                await self._save(key, status)  # the error is recorded; keep it
                raise
            if status.get(status_field) != SKIPPED:
                ran_any = True
                await self._save(key, status)  # each executor's result, as it lands
                dirty = False
            elif before != SKIPPED:
                dirty = True
            if not ok:
                break
        if dirty:
            await self._save(key, status)
        return ok, ran_any

    async def _load(self, key: str, params: Params | None) -> StatusData:
        status = await self.store.load(key)
        if status is None:
            if params is None:
                raise TaskNotFound(f"task {key!r} has no status yet: give its params")
            try:
                orjson.dumps(params, option=orjson.OPT_NON_STR_KEYS)
            except TypeError as exc:
                raise InputError(f"params of task {key!r} are not JSON: {exc}") from None
            return {"name": key, "params": params}
        if params is not None and status.get("params") != _as_stored(params):
            raise TaskConflict(
                f"task {key!r} was stored with other params than given now; "
                "use another directory or another key (the stored status was left untouched)"
            )
        status["name"] = key
        return status


_Item = tuple[int, str, Params | None]
_WorkerBody = Callable[["_Pool", TaskClock, _Item], Coroutine[Any, Any, None]]


class _Pool:
    """The workers of a run, each started with its first task in hand (so never more workers
    than tasks, and at most ``limit``); ``finished`` is set when they have all ended, or at the
    first one that failed (``error``). Follow-ups (``push``) start a worker while fewer than
    ``limit`` run, else wait for one, ahead of the input stream."""

    def __init__(self, stream: Iterator[_Item], body: _WorkerBody, limit: int) -> None:
        self.stream = stream
        self.body = body
        self.limit = limit
        self.workers: dict[asyncio.Task[None], TaskClock] = {}  # the running ones
        self.pending: deque[_Item] = deque()
        self.finished = asyncio.Event()
        self.error: BaseException | None = None
        self.closed = False

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self.workers)

    def spawn(self, first: _Item) -> None:
        clock = TaskClock(None)
        task = asyncio.create_task(self.body(self, clock, first))
        self.workers[task] = clock
        task.add_done_callback(self._ended)

    def push(self, item: _Item) -> None:
        if len(self.workers) < self.limit and not self.closed:
            self.spawn(item)
        else:
            self.pending.append(item)

    def next_item(self) -> _Item | None:
        if self.pending:
            return self.pending.popleft()
        item = next(self.stream, None)
        if item is None:
            # The calling worker ends: from now on a follow-up pushed starts a worker of its own
            # (the done callback comes later, and another worker may add one before it).
            self.workers.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
        return item

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.workers.pop(task, None)
        error = None if task.cancelled() else task.exception()
        if error is not None and self.error is None:
            self.error = error
            self.finished.set()
        if not self.workers:
            self.finished.set()


def _json_params(key: str, params: object) -> Params:
    """A follow-up's params as they read back from its status file; InputError if not JSON."""
    if not isinstance(params, Mapping):
        raise InputError(f"params of task {key!r} must be a dict, got {params!r}")
    try:
        stored: Params = orjson.loads(orjson.dumps(dict(params), option=orjson.OPT_NON_STR_KEYS))
    except TypeError as exc:
        raise InputError(f"params of task {key!r} are not JSON: {exc}") from None
    return stored


def _as_stored(params: Params) -> Any:
    """``params`` as they read back from a status file (tuples become lists, and so on)."""
    return orjson.loads(dump_status(params))


async def _cancel_all(tasks: Iterable[asyncio.Task[None]]) -> None:
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
