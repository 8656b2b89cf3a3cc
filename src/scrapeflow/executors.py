"""Executors by registered name, and the ``run`` job that runs a task list through them.

A client that must not send code — the ``run`` kind of ``POST /v1/jobs`` — names executors,
and each name is looked up in an :class:`ExecutorRegistry`: never imported, never a path. A
name is a lowercase identifier (``[a-z][a-z0-9_]*``, at most 64 characters), so an import path
(``os.system``, ``pkg.mod:fn``) or a file path can never even be one. The library registers
its own executors (``scrape``); a deployment adds its own in Python code, at start-up::

    from scrapeflow.executor import taskify
    from scrapeflow.executors import register_executor

    @taskify
    async def title(context, key, status):
        response = await context.http.request("GET", status["params"]["url"])
        return {"title": response.text().split("<title>")[1].split("</title>")[0]}

    register_executor("title", lambda: title)

or, for ``scrapeflow serve`` as it ships, from an installed package's entry point (loaded on
first use; it never replaces a name already registered)::

    [project.entry-points."scrapeflow.executors"]
    title = "mypackage.executors:title"      # an executor, or a factory that returns one

A task's status fields are named after its executors (``title``, ``title_status``,
``title_last_run``): an executor must record itself under its registered name (a ``taskify``
executor records itself under its function's name).

:class:`RunJobs` is the ``run`` job kind: a task list (URLs, or keys with params) through the
named executors with :func:`~scrapeflow.executor.execute_async`, into a status directory the
service chooses (``{root}/{job id}``), never the client. Run again after a crash, it skips
what succeeded: the engine's resume makes the job idempotent. On the distributed backend a job
may run again on another machine, so there the statuses are kept in the service's database
(:class:`~scrapeflow.statusdb.SqlStatusStore`, namespace: the job id) instead of files.

>>> from scrapeflow.executors import executor_names
>>> "scrape" in executor_names()
True
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import orjson

from scrapeflow._runheaders import check_request_headers, shown_output
from scrapeflow._taskify import Executor, as_executor, executor_name
from scrapeflow._util.atomic import make_private_dirs
from scrapeflow._util.logs import get_logger
from scrapeflow.errors import ConfigError, InputError, StatusError
from scrapeflow.status import (
    ERROR_PREFIX,
    SKIPPED,
    STATUS_SUFFIX,
    SUCCESS,
    JsonDirStore,
    Params,
    StatusData,
    StatusStore,
    check_key,
    load_status_file,
)
from scrapeflow.urllist import check_url, url_key

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from scrapeflow.config import Settings
    from scrapeflow.executor import RunProgress
    from scrapeflow.http import EgressPolicy
    from scrapeflow.statusdb import SqlStatusStore

__all__ = [
    "ENTRY_POINT_GROUP",
    "MAX_RUN_BATCHES",
    "MAX_RUN_DELAY",
    "MAX_RUN_EXECUTORS",
    "MAX_RUN_PARALLELISM",
    "MAX_RUN_PER_HOST",
    "MAX_RUN_TASKS",
    "MAX_RUN_TIMEOUT",
    "MAX_TASK_PARAMS_BYTES",
    "RUN_KIND",
    "ExecutorFactory",
    "ExecutorOutcome",
    "ExecutorRegistry",
    "RunJobParams",
    "RunJobs",
    "RunTask",
    "RunTaskOutcome",
    "executor_names",
    "make_executors",
    "register_executor",
]

ENTRY_POINT_GROUP = "scrapeflow.executors"
RUN_KIND = "run"
"""The job kind of :class:`RunJobs`."""
MAX_RUN_TASKS = 10_000
"""Tasks in one ``run`` job, at most (a bigger list is several jobs)."""
MAX_RUN_EXECUTORS = 10
MAX_TASK_PARAMS_BYTES = 16 * 1024
"""A task's params as JSON, at most: they are kept in the job and in every status file."""
MAX_RUN_PARALLELISM = 1_000
MAX_RUN_PER_HOST = 64
MAX_RUN_TIMEOUT = 600.0
MAX_RUN_DELAY = 60.0
MAX_RUN_BATCHES = 16
"""Batches one ``run`` job splits its tasks into, at most (each a job of its own, counted in its
API key's quota of active jobs beside the job)."""
"""Batches one ``run`` job splits its tasks into, at most (each a ``run`` job of its own)."""

ExecutorFactory = Callable[[], Callable[..., Any]]
"""Makes the executor a name stands for: an :data:`~scrapeflow.executor.Executor`, or an
async task body that :func:`~scrapeflow.executor.taskify` accepts."""

ProgressCallback = Callable[..., None]
"""Told a job's counters as they move: ``progress(done=10, total=300, failed=1)``."""

_log = get_logger(__name__)
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_RESERVED = frozenset({"name", "params"})  # a status's own fields


def _scrape() -> Executor:
    from scrapeflow.scrape import scrape

    return scrape


class ExecutorRegistry:
    """Executor names and the factories that make them.

    The module-level :func:`register_executor`, :func:`executor_names` and
    :func:`make_executors` use one shared registry (with the ``scrapeflow.executors`` entry
    points); build your own (``ExecutorRegistry(entry_points=False)``) to keep a test apart.
    """

    def __init__(self, *, entry_points: bool = True) -> None:
        self._factories: dict[str, ExecutorFactory] = {"scrape": _scrape}
        self._entry_points_loaded = not entry_points

    def register(self, name: str, factory: ExecutorFactory, *, replace: bool = False) -> None:
        """Make ``name`` stand for the executor ``factory()`` makes. An existing name needs
        ``replace=True``."""
        _check_name(name)
        if not callable(factory):
            raise ConfigError(f"the factory of executor {name!r} is not callable: {factory!r}")
        if name in self._factories and not replace:
            raise ConfigError(f"executor {name!r} is already registered (pass replace=True)")
        self._factories[name] = factory

    def unregister(self, name: str) -> None:
        """Forget ``name``."""
        self._factories.pop(name, None)

    def names(self) -> list[str]:
        """Registered executor names, sorted."""
        self._load_entry_points()
        return sorted(self._factories)

    def check(self, names: Iterable[object]) -> list[str]:
        """``names`` if each is registered, once; else :class:`InputError` naming the first that
        is not, and the names that are."""
        known = self.names()
        checked: list[str] = []
        for name in names:
            if not isinstance(name, str) or name not in self._factories:
                shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
                raise InputError(
                    f"unknown executor {shown}: executors are chosen by registered name "
                    f"(known: {', '.join(known) or 'none'})"
                )
            if name in checked:
                raise InputError(f"executor {name!r} is named twice")
            checked.append(name)
        return checked

    def make(self, names: Iterable[object]) -> list[Executor]:
        """The executors called ``names``, in that order (see :meth:`check`)."""
        executors = []
        for name in self.check(names):
            made = self._factories[name]()
            try:
                executor = as_executor(made)
            except (TypeError, ConfigError) as exc:
                raise ConfigError(
                    f"the factory of executor {name!r} made {made!r}: {exc}"
                ) from None
            if executor_name(executor) != name:
                raise ConfigError(
                    f"the executor registered as {name!r} records itself as "
                    f"{executor_name(executor)!r}: name its function {name!r}"
                )
            executors.append(executor)
        return executors

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for point in entry_points(group=ENTRY_POINT_GROUP):
            if not _usable(point.name) or point.name in self._factories:
                _log.warning("executor entry point skipped (bad or taken name)", name=point.name)
                continue
            try:
                loaded = point.load()
            except Exception as exc:  # one broken plug-in must not hide the others
                _log.warning(
                    "executor entry point failed to load", name=point.name, error=repr(exc)
                )
                continue
            if _is_executor(loaded):
                self._factories[point.name] = _constant(loaded)
            elif callable(loaded):
                self._factories[point.name] = loaded
            else:
                _log.warning("executor entry point is not callable", name=point.name)


def _is_executor(candidate: object) -> bool:
    """An executor (or a task body) rather than a factory: an async function or object."""
    return inspect.iscoroutinefunction(candidate) or inspect.iscoroutinefunction(
        type(candidate).__call__
    )


def _constant(executor: Callable[..., Any]) -> ExecutorFactory:
    return lambda: executor


def _usable(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and bool(_NAME.fullmatch(name)) and name not in _RESERVED


def _check_name(name: object) -> str:
    if not _usable(name):
        raise ConfigError(
            f"executor name {name!r} must be a lowercase identifier of at most 64 characters "
            "([a-z][a-z0-9_]*), not 'name' or 'params': it names the task's status fields"
        )
    return name


_REGISTRY = ExecutorRegistry()


def register_executor(name: str, factory: ExecutorFactory, *, replace: bool = False) -> None:
    """Register an executor factory under ``name`` in the shared registry (the service's)."""
    _REGISTRY.register(name, factory, replace=replace)


def executor_names() -> list[str]:
    """The names of the shared registry, sorted."""
    return _REGISTRY.names()


def make_executors(
    names: Iterable[object], *, registry: ExecutorRegistry | None = None
) -> list[Executor]:
    """The executors called ``names``; ``registry`` defaults to the shared one."""
    return (registry or _REGISTRY).make(names)


# -- the run job -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunTask:
    """One task of a run job: its key (a status file's name) and its params."""

    key: str
    params: Params


@dataclass(frozen=True, slots=True)
class RunJobParams:
    """What a ``run`` job does, checked. Build with :meth:`from_params`.

    ``tasks``: URLs (key: the URL's MD5, params ``{"url": url}``, as ``scrapeflow run``), or
    ``{"key": ..., "params": {...}}`` objects (key optional when the params have a ``url``);
    ``executors``: registered names; ``parallelism``, ``per_host``, ``delay``: how hard to go,
    within the service's own limits; ``timeout``: seconds per task (the service's by default);
    ``batches``: split the tasks into that many batches, each a ``run`` job of its own (any
    worker may take one).
    """

    tasks: tuple[RunTask, ...]
    executors: tuple[str, ...] = ("scrape",)
    parallelism: int = 16
    per_host: int = 8
    delay: float = 0.0
    timeout: float | None = None
    batches: int = 1

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any], *, registry: ExecutorRegistry | None = None
    ) -> RunJobParams:
        """Check a job's params; :class:`InputError` names the first thing wrong."""
        if not isinstance(params, Mapping):
            raise InputError("a run job's params must be an object")
        unknown = sorted(set(params) - set(cls.__slots__))
        if unknown:
            raise InputError(f"unknown run job param(s): {', '.join(map(repr, unknown))}")
        raw_tasks = params.get("tasks")
        if not isinstance(raw_tasks, list) or not 1 <= len(raw_tasks) <= MAX_RUN_TASKS:
            raise InputError(f"tasks must be a list of 1 to {MAX_RUN_TASKS:,} tasks")
        tasks = tuple(_task(n, raw) for n, raw in enumerate(raw_tasks))
        seen: set[str] = set()
        for n, task in enumerate(tasks):
            if task.key in seen:
                raise InputError(f"tasks[{n}]: key {task.key!r} is given twice")
            seen.add(task.key)
        raw_executors = params.get("executors", ["scrape"])
        if not isinstance(raw_executors, list) or not 1 <= len(raw_executors) <= MAX_RUN_EXECUTORS:
            raise InputError(f"executors must be a list of 1 to {MAX_RUN_EXECUTORS} names")
        executors = tuple((registry or _REGISTRY).check(raw_executors))
        timeout = params.get("timeout")
        if timeout is not None:
            timeout = _number("timeout", timeout, low=0.0, high=MAX_RUN_TIMEOUT, open_low=True)
        return cls(
            tasks=tasks,
            executors=executors,
            parallelism=_whole("parallelism", params.get("parallelism", 16), MAX_RUN_PARALLELISM),
            per_host=_whole("per_host", params.get("per_host", 8), MAX_RUN_PER_HOST),
            delay=_number("delay", params.get("delay", 0.0), low=0.0, high=MAX_RUN_DELAY),
            timeout=timeout,
            batches=_whole("batches", params.get("batches", 1), MAX_RUN_BATCHES),
        )

    def as_params(self) -> dict[str, Any]:
        """The params as a job keeps them (tasks in their full form)."""
        return {
            "tasks": [{"key": t.key, "params": t.params} for t in self.tasks],
            "executors": list(self.executors),
            "parallelism": self.parallelism,
            "per_host": self.per_host,
            "delay": self.delay,
            "timeout": self.timeout,
            **({"batches": self.batches} if self.batches > 1 else {}),
        }


def _task(n: int, raw: object) -> RunTask:
    where = f"tasks[{n}]"
    if isinstance(raw, str):
        return RunTask(url_key(_url(where, raw)), {"url": raw})
    if not isinstance(raw, Mapping) or set(raw) - {"key", "params"}:
        raise InputError(f'{where}: a task is a URL or {{"key": ..., "params": {{...}}}}')
    params = raw.get("params")
    if not isinstance(params, Mapping):
        raise InputError(f"{where}: params must be an object")
    try:
        size = len(orjson.dumps(params))
    except TypeError as exc:
        raise InputError(f"{where}: params are not JSON ({exc})") from None
    if size > MAX_TASK_PARAMS_BYTES:
        raise InputError(
            f"{where}: params are {size:,} bytes of JSON, at most {MAX_TASK_PARAMS_BYTES:,}"
        )
    url = params.get("url")
    if url is not None:
        _url(f"{where}.params.url", url)
    check_request_headers(f"{where}.params.headers", params.get("headers"))
    key = raw.get("key")
    if key is None:
        if url is None:
            raise InputError(f"{where}: a task without a url needs a key")
        key = url_key(url)
    try:
        check_key(key)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return RunTask(key, dict(params))


def _url(where: str, url: object) -> str:
    if not isinstance(url, str):
        raise InputError(f"{where}: a URL must be a string")
    problem = check_url(url) if len(url) <= 8_192 else "URL longer than 8,192 characters"
    if problem is not None:
        shown = url if len(url) <= 80 else url[:77] + "..."
        raise InputError(f"{where}: {problem}: {shown!r}")
    return url


def _whole(name: str, value: object, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InputError(f"{name} must be a whole number from 1 to {high:,}, got {value!r}")
    return value


def _number(name: str, value: object, *, low: float, high: float, open_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{name} must be a number, got {value!r}")
    if value > high or value < low or (open_low and value == low):
        above = "above" if open_low else "from"
        raise InputError(f"{name} must be {above} {low:g} and at most {high:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ExecutorOutcome:
    """One executor's part of a task: its status text and its output."""

    status: str
    output: Any


@dataclass(frozen=True, slots=True)
class RunTaskOutcome:
    """Where one task of a run job stands: ``succeeded``, ``failed``, ``pending`` (the job is
    still active), ``not_run`` (the job ended before it) or ``unreadable`` (its saved status is
    not one the engine wrote)."""

    index: int
    key: str
    url: str | None
    state: str
    executors: dict[str, ExecutorOutcome] = field(default_factory=dict)


@dataclass(frozen=True)
class RunJobs:
    """The ``run`` job kind on a service's settings: where jobs write (``root``), and the HTTP
    limits a client's choices are held within.

    ``status_db``: a database URL where the jobs keep their task statuses
    (:class:`~scrapeflow.statusdb.SqlStatusStore`, one namespace per job id) rather than status
    files under ``root`` (which then holds only what executors write, such as page bodies);
    ``engine``: an open engine on that database to share (else each call opens its own).

    >>> jobs = RunJobs.from_settings(Settings.load())  # doctest: +SKIP
    >>> params = {"tasks": ["https://example.com/"], "executors": ["scrape"]}
    >>> summary = await jobs.run(job_id, params, print)  # doctest: +SKIP
    """

    root: Path
    registry: ExecutorRegistry = field(default_factory=lambda: _REGISTRY)
    max_parallelism: int = 100
    max_per_host: int = 16
    timeout: float = 30.0
    retries: int = 3
    rotate_after: int = 3
    identity: str = "browser"
    proxies: Path | None = None
    egress: EgressPolicy | None = None
    """Where the tasks' URLs (a client's) may lead, on every redirect hop; None: anywhere."""
    status_db: str | None = field(default=None, repr=False)  # a URL may hold a password
    engine: AsyncEngine | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        registry: ExecutorRegistry | None = None,
        engine: AsyncEngine | None = None,
    ) -> RunJobs:
        """Run jobs under ``{jobs_dir}/run``, with the service's HTTP settings as limits. On the
        ``procrastinate`` backend (a job may run again on another machine) statuses are kept
        in the service's database, ``db_url``, through ``engine`` if given (one on it)."""
        from scrapeflow.http import EgressPolicy

        distributed = settings.jobs_backend == "procrastinate"
        return cls(
            root=settings.jobs_dir / "run",
            registry=registry or _REGISTRY,
            max_parallelism=settings.parallelism,
            max_per_host=settings.per_host,
            timeout=settings.timeout,
            retries=settings.retries,
            rotate_after=settings.rotate_after,
            identity=settings.identity,
            proxies=settings.proxies,
            egress=EgressPolicy.from_settings(settings),
            status_db=settings.db_url if distributed else None,
            engine=engine if distributed else None,
        )

    def directory(self, job_id: str) -> Path:
        """The directory of job ``job_id``: its status files (unless ``status_db`` keeps them)
        and whatever its executors write there (``scrape``'s page bodies)."""
        return self.root / check_key(job_id)

    @asynccontextmanager
    async def status_store(self, job_id: str) -> AsyncIterator[StatusStore]:
        """The store of job ``job_id``'s statuses (not prepared), closed on leaving."""
        if self.status_db is None:
            yield JsonDirStore(self.directory(job_id))
            return
        async with self._sql_store(self.status_db, job_id) as store:
            yield store

    def _sql_store(self, db_url: str, job_id: str) -> SqlStatusStore:
        from scrapeflow.statusdb import SqlStatusStore

        return SqlStatusStore(self.engine or db_url, namespace=check_key(job_id))

    async def run(
        self, job_id: str, params: Mapping[str, Any], progress: ProgressCallback
    ) -> dict[str, Any]:
        """Run job ``job_id``: every task through its executors; its counters go to
        ``progress``; the summary is returned. Cancelled, it stops at once: every finished
        task's status is saved, and the next run of the job would skip it."""
        from scrapeflow.executor import execute_async
        from scrapeflow.http import HostPolicy, HttpConfig, RetryPolicy
        from scrapeflow.proxies import ProxyProviderFromList

        checked = RunJobParams.from_params(params, registry=self.registry)
        executors = self.registry.make(checked.executors)
        parallelism = min(checked.parallelism, self.max_parallelism)
        timeout = min(checked.timeout or self.timeout, MAX_RUN_TIMEOUT)
        http = HttpConfig(
            max_connections=parallelism,
            timeout=timeout,
            host=HostPolicy(
                concurrency=min(checked.per_host, self.max_per_host), delay=checked.delay
            ),
            retry=RetryPolicy(attempts=self.retries + 1),
            rotate_after=self.rotate_after,
            identities=self.identity,
            egress=self.egress,
        )
        provider = ProxyProviderFromList.from_file(self.proxies) if self.proxies else None
        total = len(checked.tasks)
        progress(done=0, total=total, succeeded=0, skipped=0, failed=0)

        counts = {"succeeded": 0, "skipped": 0, "failed": 0}

        def moved(run: RunProgress) -> None:
            counts.update(succeeded=run.succeeded, skipped=run.skipped, failed=run.failed)
            progress(done=run.done, total=total, **counts)

        directory = self.directory(job_id)
        async with self.status_store(job_id) as store:
            if not isinstance(store, JsonDirStore):
                make_private_dirs(directory)  # the executors' files, made by JsonDirStore else
            await execute_async(
                executors,
                directory,
                {task.key: task.params for task in checked.tasks},
                timeout=timeout,
                max_parallelism=parallelism,
                proxy_provider=provider,
                http=http,
                on_progress=moved,
                store=store,
            )
        return {"tasks": total, **counts, "executors": list(checked.executors)}

    async def outcomes(
        self,
        job_id: str,
        params: Mapping[str, Any],
        *,
        active: bool,
        start: int,
        limit: int,
        batches: Sequence[tuple[str, range]] = (),
    ) -> list[RunTaskOutcome]:
        """Tasks ``start`` .. ``start + limit - 1`` of job ``job_id`` (in the order given),
        each with its executors' statuses and outputs as saved so far. ``active``: the job is
        queued or running (a task with nothing saved is ``pending``, else ``not_run``).
        ``batches``: a job split into batches, each batch's job id and task indexes (the
        statuses are the batches')."""
        if batches:
            outcomes: list[RunTaskOutcome] = []
            for batch_id, part in batches:
                low, high = max(start, part.start), min(start + limit, part.stop)
                if low < high:
                    mine = {**params, "tasks": params["tasks"][part.start : part.stop]}
                    ran = await self.outcomes(
                        batch_id, mine, active=active, start=low - part.start, limit=high - low
                    )
                    outcomes += [replace(o, index=o.index + part.start) for o in ran]
            return outcomes
        tasks = _stored_tasks(params)[start : start + limit]
        names = [n for n in params.get("executors", []) if isinstance(n, str)]
        if self.status_db is None:
            directory = self.directory(job_id)

            def read() -> list[RunTaskOutcome]:
                return [
                    _outcome(start + n, task, names, _read_file(directory, task.key), active)
                    for n, task in enumerate(tasks)
                ]

            return await asyncio.to_thread(read)
        async with self._sql_store(self.status_db, job_id) as store:
            await store.prepare()  # a job not started yet may find no table
            found = await store.load_many(task.key for task in tasks)
        return [
            _outcome(start + n, task, names, found.get(task.key), active)
            for n, task in enumerate(tasks)
        ]


def _stored_tasks(params: Mapping[str, Any]) -> list[RunTask]:
    """The tasks as a job keeps them (:meth:`RunJobParams.as_params`), without re-checking."""
    tasks = params.get("tasks")
    found = []
    for raw in tasks if isinstance(tasks, list) else []:
        if isinstance(raw, Mapping) and isinstance(raw.get("key"), str):
            found.append(RunTask(raw["key"], dict(raw.get("params") or {})))
    return found


def _read_file(directory: Path, key: str) -> StatusData | StatusError | None:
    """A task's status file: its status, ``None`` if there is none yet, or the error that
    says it is not one the engine wrote."""
    try:
        return load_status_file(directory / f"{check_key(key)}{STATUS_SUFFIX}")
    except StatusError as exc:
        return exc


def _outcome(
    index: int,
    task: RunTask,
    names: Sequence[str],
    status: StatusData | StatusError | None,
    active: bool,
) -> RunTaskOutcome:
    url = task.params.get("url")
    url = url if isinstance(url, str) else None
    waiting = "pending" if active else "not_run"
    if isinstance(status, StatusError):  # not what the engine wrote: say so, not fail the page
        return RunTaskOutcome(index, task.key, url, "unreadable")
    if status is None:
        return RunTaskOutcome(index, task.key, url, waiting)
    executors = {
        name: ExecutorOutcome(str(status[f"{name}_status"]), shown_output(status.get(name)))
        for name in names
        if f"{name}_status" in status
    }
    texts = [e.status for e in executors.values()]
    if any(text.startswith(ERROR_PREFIX) for text in texts):
        state = "failed"
    elif len(texts) == len(names) and all(text in (SUCCESS, SKIPPED) for text in texts):
        state = "succeeded"
    else:
        state = waiting
    return RunTaskOutcome(index, task.key, url, state, executors)
