"""``taskify``: turn a task body into an :data:`Executor` that records itself in the status."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeAlias

import aiohttp

from scrapeflow._util.redact import redact
from scrapeflow.errors import ConfigError
from scrapeflow.status import ERROR_PREFIX, SKIPPED, SUCCESS, Params, StatusData

if TYPE_CHECKING:
    from pathlib import Path

    from scrapeflow.http import HttpClient
    from scrapeflow.proxies import ProxyProvider

__all__ = [
    "ALL",
    "EXPECTED_ERRORS",
    "Context",
    "Executor",
    "ExecutorResponse",
    "FollowUpSink",
    "TaskClock",
    "as_executor",
    "executor_name",
    "taskify",
]

ALL = "all"
"""``force_executors=["all"]`` reruns every executor."""

# The seed's list of errors that fail one task and let the run go on. aiohttp.ClientError covers
# ClientConnectorError, ServerDisconnectedError, ClientOSError, ClientConnectionError,
# ClientPayloadError and ClientResponseError (and InvalidURL, which is one task's problem too).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    TimeoutError,
    asyncio.CancelledError,
    RuntimeError,
)


class FollowUpSink(Protocol):
    """Where :meth:`Context.add_task` sends a follow-up: the running ``execute_async``."""

    async def add_task(self, parent: str, key: str, params: Params) -> bool:
        """Persist and schedule ``key`` for ``parent``; False when it already existed."""
        ...


class Context(NamedTuple):
    "Each task gets the context as a parameter."

    # The directory for the binary blobs (the run's directory).
    dir: Path
    # To be used for async http requests.
    session: aiohttp.ClientSession | None
    # List of executor names that need to be forced or 'all'.
    forced_executors: list[str]
    # Limits concurrent network requests across the run.
    semaphore: asyncio.Semaphore
    # Task timeout in seconds.
    timeout_seconds: float
    # Proxy provider for http requests.
    proxy_provider: ProxyProvider | None
    # Beyond the seed: the HTTP layer (slots, retries, sessions, proxy rotation) of the run.
    http: HttpClient | None = None
    # Beyond the seed: the run that add_task sends follow-up tasks to.
    follow_ups: FollowUpSink | None = None

    async def add_task(self, key: str, params: Params) -> bool:
        """Beyond the seed: add a follow-up task to the running ``execute_async``.

        The task (``key`` checked like any task key, ``params`` a JSON object) is saved before
        it is scheduled, with ``"added_by"`` naming the task whose executor added it, and the
        parent's status lists it under ``"follow_ups"``; it then runs in this run, with the same
        executors, like any task. A later run of the parent's task set runs it too if it has not
        finished. Returns True for a new task, False when ``key`` already exists (this run or an
        earlier one): a retried page never forks its chain. An existing key with other params
        raises :class:`~scrapeflow.errors.TaskConflict` naming it, unless this same parent task
        added it (a retried page re-adding its next one, whose cursor differs at every fetch):
        then the new params replace the old if the follow-up never ran, else they are ignored::

            async def page(context, key, status):
                data = await fetch_page(status["params"]["after"])
                if data["next_cursor"]:
                    n = status["params"]["n"] + 1
                    await context.add_task(f"page-{n}", {"n": n, "after": data["next_cursor"]})
                return data
        """
        clock = task_clock.get()
        if self.follow_ups is None or clock is None or clock.key is None:
            raise ConfigError("add_task works only in an executor that execute_async runs")
        return await self.follow_ups.add_task(clock.key, key, params)


ExecutorResponse: TypeAlias = tuple[StatusData, bool]
Executor: TypeAlias = Callable[[Context, StatusData], Awaitable[ExecutorResponse]]


class TaskClock:
    """The deadline of the task a worker of ``execute_async`` is running.

    The run's watchdog cancels the worker when the deadline passes while an executor runs
    (``in_executor``) and marks the clock ``expired``, so the executor records a
    ``TimeoutError``. One clock per worker, reused task after task: no timer per call.
    ``key`` is the task the worker is running (the parent of what ``add_task`` adds).
    """

    __slots__ = ("deadline", "expired", "in_executor", "key", "task")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.key: str | None = None
        self.deadline = float("inf")
        self.expired = False
        self.in_executor = False


# Set by each worker of a run; executors called outside a run use the context's timeout.
task_clock: ContextVar[TaskClock | None] = ContextVar("scrapeflow_task_clock", default=None)

_EXECUTOR_NAME = "__scrapeflow_executor__"


def executor_name(executor: Callable[..., Any]) -> str:
    """The name an executor records itself under in the status (its function's name)."""
    name = getattr(executor, _EXECUTOR_NAME, None)
    return name if isinstance(name, str) else getattr(executor, "__name__", repr(executor))


def is_forced(context: Context, name: str) -> bool:
    return ALL in context.forced_executors or name in context.forced_executors


def now_text() -> str:
    """The ``_last_run`` timestamp: the seed's format, in UTC with its offset."""
    return datetime.now(UTC).isoformat(sep=" ")


def error_text(exc: BaseException) -> str:
    """``ERROR <ExceptionType>::<message>``, with credentials scrubbed from the message."""
    return f"{ERROR_PREFIX}{type(exc).__name__}::{redact(str(exc))}"


def _takes_key(fn: Callable[..., Any]) -> bool:
    """Whether a body has the ``(context, key, status)`` form rather than ``(context, status)``."""
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(params) >= 3


def taskify(fn: Callable[..., Awaitable[Any]]) -> Executor:
    """Make an :data:`Executor` from a task body.

    The body is ``async def name(context, key, status)`` (or ``(context, status)``) and returns
    its output, any JSON value. The executor records it under the body's name::

        status[name]              = output      ({} when it failed)
        status[name + "_status"]  = "SUCCESS" | "SKIPPED" | "ERROR <Type>::<message>"
        status[name + "_last_run"]= "2022-08-05 16:03:52.336815+00:00"  (kept when SKIPPED)

    A body that succeeded before is skipped unless forced. The errors of the seed's list
    (aiohttp client errors, timeouts, cancellation, ``RuntimeError``) fail the task and are
    recorded; any other exception is recorded and propagates, stopping the run.

    A body may also return the raw ``(status, ok)`` pair of the :data:`Executor` protocol
    (the status it was given, and a bool); it then manages its own fields.
    """
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(
            f"executor {fn!r} has no usable name (the status fields are named after it): "
            "wrap it in a named async function"
        )
    takes_key = _takes_key(fn)

    status_field = f"{name}_status"
    last_run_field = f"{name}_last_run"

    def record(status: StatusData, output: Any, outcome: str) -> None:
        status[name] = output
        status[status_field] = outcome
        status[last_run_field] = now_text()

    @functools.wraps(fn)
    async def executor(context: Context, status: StatusData) -> ExecutorResponse:
        if status.get(status_field) in (SUCCESS, SKIPPED) and not is_forced(context, name):
            status[status_field] = SKIPPED
            return status, True
        clock = task_clock.get()
        # Only a worker's outermost executor is watched by the run's deadline watchdog; an
        # executor called from another one, or in a child task, runs inside that one.
        owner = clock is not None and not clock.in_executor and asyncio.current_task() is clock.task

        def call() -> Awaitable[Any]:
            return fn(context, status["name"], status) if takes_key else fn(context, status)

        try:
            if clock is None:
                async with asyncio.timeout(context.timeout_seconds):
                    output = await call()
            elif owner:
                output = await _watched(clock, call)
            else:
                output = await call()
        except EXPECTED_ERRORS as exc:
            if isinstance(exc, asyncio.CancelledError) and _cancelled_from_outside():
                raise
            record(status, {}, error_text(exc))
            return status, False
        except Exception as exc:
            record(status, {}, error_text(exc))
            raise
        if (
            isinstance(output, tuple)
            and len(output) == 2
            and output[0] is status
            and isinstance(output[1], bool)
        ):
            return output[0], output[1]
        record(status, {} if output is None else output, SUCCESS)
        return status, True

    setattr(executor, _EXECUTOR_NAME, name)
    return executor


async def _watched(clock: TaskClock, call: Callable[[], Awaitable[Any]]) -> Any:
    """Run the body under the worker's clock; a cancel by the watchdog becomes TimeoutError.

    Whatever the body did with the watchdog's cancel (let it through, swallowed it, turned it
    into another error), the expiry is settled here, so nothing leaks into the worker's next
    task; a cancel from outside (Ctrl-C) that came too still propagates.
    """
    if clock.deadline <= asyncio.get_running_loop().time():
        raise TimeoutError
    clock.in_executor = True
    try:
        return await call()
    except asyncio.CancelledError:
        if not clock.expired:
            raise
    finally:
        clock.in_executor = False
        if clock.expired:
            clock.expired = False
            if clock.task is not None:
                clock.task.uncancel()
                if clock.task.cancelling() > 0:
                    raise asyncio.CancelledError
            raise TimeoutError


def _cancelled_from_outside() -> bool:
    """True when the run itself is being cancelled (Ctrl-C), not just this executor's call."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def as_executor(candidate: Callable[..., Awaitable[Any]]) -> Executor:
    """An executor as given (already taskified) or a plain async body, taskified by name."""
    if not callable(candidate):
        raise TypeError(f"an executor must be an async function, got {candidate!r}")
    if hasattr(candidate, _EXECUTOR_NAME):
        return candidate
    if not (
        inspect.iscoroutinefunction(candidate)
        or inspect.iscoroutinefunction(type(candidate).__call__)  # an object's async __call__
    ):
        raise TypeError(f"executor {executor_name(candidate)!r} must be an async function")
    return taskify(candidate)
