"""A test that outlives its timeout and its cleanup ends its process (a pytest plugin).

pytest-timeout's ``signal`` method fails a test that runs past its timeout by raising inside it,
which lets the test clean up; but a cleanup that waits forever (an executor's thread blocked in a
socket, a ``finally`` waiting on a process) holds the whole run until CI's own limit, and nothing
says which test it was. So each test also arms :func:`faulthandler.dump_traceback_later` at its
timeout plus :data:`GRACE`: past it, every thread's stack is written to a file (after the
running event loops' tasks and where each waits, which a thread's stack, stuck in ``select``,
does not show) and the process exits. pytest's own faulthandler plugin disarms the timer when a
phase fails; it is armed again then (:func:`pytest_exception_interact`). Under pytest-xdist
the controller reports "worker crashed while running <test>", starts a new worker, and prints
the stacks at the end of the run (:func:`pytest_terminal_summary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

GRACE = 60.0  # seconds after the test's own timeout
_DIR_VARIABLE = "PYTEST_SCRAPEFLOW_HANG_DIR"  # the controller's, inherited by its workers
_file: IO[str] | None = None
_made: str | None = None  # the directory, in the process that made it
_deadline: float | None = None  # when the running test's process is ended
_header = ""  # the running test's name, first in the dump file
_tasks_timer: threading.Timer | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _file, _made
    directory = os.environ.get(_DIR_VARIABLE)
    if directory is None:  # the controller, or a run without workers
        directory = _made = tempfile.mkdtemp(prefix="scrapeflow-test-hangs-")
        os.environ[_DIR_VARIABLE] = directory
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _file = open(Path(directory) / f"{worker}-{os.getpid()}.txt", "w")  # noqa: SIM115


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    global _deadline, _header
    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else _ini_timeout(item.config)
    if _file is not None and timeout > 0:
        _header = f"\n{item.nodeid} ran past {timeout:.0f} s + {GRACE:.0f} s:\n"
        _deadline = time.monotonic() + timeout + GRACE
        _arm(timeout + GRACE)
    try:
        return (yield)
    finally:
        _deadline = None
        faulthandler.cancel_dump_traceback_later()
        if _tasks_timer is not None:
            _tasks_timer.cancel()
        if _file is not None:
            _file.seek(0)
            _file.truncate()


@pytest.hookimpl(trylast=True)
def pytest_exception_interact() -> None:
    """Armed again after pytest's own faulthandler plugin disarmed it for a failed phase (it
    does, for a debugger's sake): the failure pytest-timeout raises is such a phase, and the
    cleanup after it is what hangs."""
    if _deadline is not None:
        _arm(max(_deadline - time.monotonic(), 1.0))


def _dump_tasks(deadline: float) -> None:
    """Every running event loop's tasks and where each waits, in the dump file, just before
    the stacks: a hang in asyncio shows only ``select`` in the threads' stacks. Read from
    another thread, for a diagnosis (not thread-safe, and need not be)."""
    if _file is None or _deadline != deadline:
        return  # the test ended meanwhile
    lines: list[str] = []
    with contextlib.suppress(Exception):
        for loop in (o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)):
            if not loop.is_running():
                continue
            for task in list(asyncio.all_tasks(loop)):
                frames = task.get_stack()
                where = " <- ".join(
                    f"{f.f_code.co_name} ({Path(f.f_code.co_filename).name}:{f.f_lineno})"
                    for f in reversed(frames)
                )
                lines.append(f"task {task.get_name()}: {where or repr(task)}")
    with contextlib.suppress(Exception):
        _file.write("asyncio tasks still running:\n" + "\n".join(lines) + "\n\n")
        _file.flush()


def _arm(seconds: float) -> None:
    """Past ``seconds``, every thread's stack after the test's name in the dump file, and
    the process ends."""
    if _file is None:
        return
    _file.seek(0)
    _file.truncate()
    _file.write(_header)
    _file.flush()
    faulthandler.dump_traceback_later(seconds, exit=True, file=_file)
    global _tasks_timer
    if _tasks_timer is not None:
        _tasks_timer.cancel()
    _tasks_timer = threading.Timer(max(seconds - 2.0, 0.5), _dump_tasks, args=(_deadline,))
    _tasks_timer.daemon = True
    _tasks_timer.start()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    directory = os.environ.get(_DIR_VARIABLE)
    if directory is None:
        return
    for dump in sorted(Path(directory).glob("*.txt")):
        text = dump.read_text(errors="replace").strip()
        if "Thread 0x" in text or "Current thread" in text:
            terminalreporter.section(f"a test that hung ({dump.name})", sep="-", red=True)
            terminalreporter.write_line(text)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _file
    if _file is not None:
        _file.close()
        _file = None
    if _made is not None:
        shutil.rmtree(_made, ignore_errors=True)
        os.environ.pop(_DIR_VARIABLE, None)


def _ini_timeout(config: pytest.Config) -> float:
    try:
        return float(config.getini("timeout") or 0)
    except ValueError:
        return 0.0
