"""``scrapeflow serve --processes N``: the API in N processes on one listening socket.

One Python process serves on one core. The supervisor binds the socket, then forks N service
processes that each run the whole app on it (uvicorn, the lifespan, the embedded job queue, the
courier, the schedule), over the same database: the kernel hands each new connection to one of
them. What must happen once happens once by the database's rules, as between services on
several machines — a job is claimed by one process (a conditional update), a webhook delivery
under a lease, a day's schedule by its run's row; an event stored by one process reaches the
streams of the others at their next look (each second; at once on PostgreSQL, by a notice); a
revoked key is refused by every process within a second.

The first process starts alone, and the others once it serves: it migrates the database and
makes the service's tables, which the others then find. The supervisor prints the service's
URL once every process serves. It forwards SIGTERM and Ctrl-C to them (each stops as one
service does: no new request or job, running jobs get their grace) and exits when they have.
A process that dies is started again a second later, for as long as the supervisor runs; when
the first cannot start (a database that is not there), the service stops with its error, as one
process would.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

from scrapeflow._util.logs import get_logger
from scrapeflow.server._timeshare import Siblings, map_siblings

__all__ = ["supervise"]

_log = get_logger(__name__)

_RESTART_AFTER = 1.0
"""Seconds before a process that died is started again."""
_STARTUP_LIMIT = 120.0
"""Seconds a process may take to serve before the supervisor gives up on it."""

Serve = Callable[[Callable[[], None]], bool]
"""One service process's work: serves on the socket until told to stop, calls its argument once
it serves; True when it served (False: it could not start)."""


def supervise(serve: Serve, processes: int, announce: Callable[[], None]) -> int:
    """Run ``serve`` in ``processes`` forked processes; ``announce`` once all of them serve.
    The exit status: 0 after a stop asked by a signal, 1 when the service could not start."""
    # What the processes tell each other (the keys each saw last): mapped before they fork.
    board = map_siblings(processes)
    stopping = threading.Event()  # set by a signal (an Event: checked after blocking calls)
    children: dict[int, int] = {}  # pid -> its place (0 … processes-1)

    def forward(signum: int, _frame: object) -> None:
        stopping.set()
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def start(place: int) -> tuple[int, int]:
        """A process forked for ``place``, known to ``forward`` from its first instant: a
        signal while it starts stops it too (the supervisor would wait for it forever)."""
        pid, read_end = _start(serve, place, board)
        children[pid] = place
        if stopping.is_set():  # the signal came between the fork and the line above
            forward(signal.SIGTERM, None)
        return pid, read_end

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        first, read_end = start(0)
        if not _ready(read_end, first) or stopping.is_set():
            forward(signal.SIGTERM, None)
            _reap_all(children)
            return 0 if stopping.is_set() else 1
        started = [start(place) for place in range(1, processes)]
        serving = [_ready(fd, pid) for pid, fd in started]  # each pipe read, and closed
        if all(serving) and not stopping.is_set():
            announce()
        while children:
            try:
                pid, status = os.wait()
            except ChildProcessError:  # pragma: no cover - every child already reaped
                break
            place = children.pop(pid, None)
            if place is None or stopping.is_set():
                continue
            _log.warning(
                "a service process ended; starting it again",
                pid=pid,
                exit_status=os.waitstatus_to_exitcode(status),
            )
            time.sleep(_RESTART_AFTER)
            if not stopping.is_set():
                pid, read_end = start(place)
                _ready(read_end, pid)  # one that cannot start ends, and is tried again
        return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start(serve: Serve, place: int, board: Siblings | None) -> tuple[int, int]:
    """Fork one service process; its pid and the pipe it reports it serves on."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the service process
        os.close(read_end)
        if board is not None:
            board.place = place
        _die_with_supervisor()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)  # uvicorn installs its own when it serves
        code = 1
        try:

            def serving() -> None:
                os.write(write_end, b"1")

            code = 0 if serve(serving) else 1
        except BaseException:  # pragma: no cover - told by the traceback, then gone
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def _die_with_supervisor() -> None:
    """Ask Linux for a SIGTERM when the supervisor dies (a ``kill -9`` of it): the process
    then stops as at any SIGTERM instead of serving on, orphaned."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the supervisor died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)


def _ready(read_end: int, pid: int) -> bool:
    """Whether the process reports it serves before it ends (or the start-up limit)."""
    try:
        ready, _, _ = select.select([read_end], [], [], _STARTUP_LIMIT)
        return bool(ready) and os.read(read_end, 1) == b"1"
    except InterruptedError:  # pragma: no cover - retried by select itself (PEP 475)
        return False
    finally:
        os.close(read_end)


def _reap_all(children: dict[int, int]) -> None:
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        children.pop(pid, None)
