"""``scrapeflow`` commands run as processes of their own, forked from one that imported it.

A bad-input case is a whole command in a process of its own: its exit code, its stderr, what it
left on disk. Started with ``python -m scrapeflow``, most of each case is the interpreter
importing the CLI (0.5 s, more inside the suite); the cases here are forked instead from a
*zygote* (:mod:`tests._zygote`), a process of the test worker's that has imported the CLI and
its libraries once and does nothing else (no thread, no command run, no setting read). The
child then runs the command as ``python -m scrapeflow`` would: its own stdin, stdout and stderr
(pipes), working directory, umask and environment, ``scrapeflow.cli.main``, and the
interpreter's own exit (threads waited for, exit handlers, its exit code).

What a fork cannot take from the zygote, a real interpreter start is still used for: an
environment whose variables read when an interpreter starts or the CLI is imported
(``PYTHON*``, ``LANG``, ``LC_*``, ``TZ``, the terminal's and colours') differ from the zygote's.
Tests of signals, of several commands at once and of long runs start real processes of their
own; this is for one command at a time that ends.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["run_cli"]

_REPO = Path(__file__).resolve().parents[1]
_IMPORTED = (  # what the commands import when they start (read once, the first time: 1-2 s)
    "scrapeflow.cli._main",
    "scrapeflow.cli._display",
    "scrapeflow.config",
    "scrapeflow.banking",
    "scrapeflow.banking._directory",
    "scrapeflow.banking._vault",
    "scrapeflow.crawl",
    "scrapeflow.db",
    "scrapeflow.executor",
    "scrapeflow.fetch",
    "scrapeflow.scrape",
    "scrapeflow.status",
    "scrapeflow.urllist",
    "sqlalchemy.ext.asyncio",
    "aiosqlite",
    "aiohttp",
)
_READ_AT_START = ("PYTHON", "LANG", "LC_", "TZ", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR")
_READ_AT_START += ("TTY_", "JUPYTER_")
_OUTPUT_ONLY = frozenset({"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"})
"""Read at start, but nothing a command that is waited for shows: the output is read whole."""


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_START) and k not in _OUTPUT_ONLY}


class _Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SCRAPEFLOW_") and k not in ("COLUMNS", "LINES")
        }
        self.read_at_start = _read_at_start(env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests._zygote", str(theirs.fileno()), *_IMPORTED],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            cwd=_REPO,
            env=env,
        )
        theirs.close()
        self.channel = ours
        self.answers = ours.makefile("rb")
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Kill the zygote, and forget it (the next command starts another)."""
        self.process.kill()
        self.process.wait()
        self.answers.close()
        self.channel.close()

    def answer(self, key: str) -> int:
        line = self.answers.readline()
        if not line:
            raise RuntimeError("the CLI's zygote died")
        return int(json.loads(line)[key])

    def run(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        input: bytes | None,
        timeout: float,
    ) -> tuple[int, bytes, bytes]:
        with self.lock:
            umask = os.umask(0o077)
            os.umask(umask)
            request = {"args": list(args), "env": dict(env), "cwd": cwd, "umask": umask}
            stdin_r, stdin_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            fds = array.array("i", [stdin_r, out_w, err_w])
            try:
                self.channel.sendmsg(
                    [json.dumps(request).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
                )
            finally:
                for fd in (stdin_r, out_w, err_w):
                    os.close(fd)
            outputs: dict[int, bytes] = {}
            threads = [
                threading.Thread(target=_write_all, args=(stdin_w, input or b""), daemon=True),
                threading.Thread(target=_read_all, args=(out_r, outputs), daemon=True),
                threading.Thread(target=_read_all, args=(err_r, outputs), daemon=True),
            ]
            for thread in threads:
                thread.start()
            pid = None
            try:
                pid = self.answer("pid")
                deadline = time.monotonic() + timeout
                for thread in threads:
                    thread.join(max(0.0, deadline - time.monotonic()))
                if any(thread.is_alive() for thread in threads):
                    raise subprocess.TimeoutExpired(["scrapeflow", *args], timeout)
                status = self.answer("status")
            except BaseException:
                # A timeout, or this call interrupted (a test's own timeout): the command and
                # everything it started are killed, and this zygote with them (its answers
                # would be out of step with the next request).
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
                self.close()
                raise
            return os.waitstatus_to_exitcode(status), outputs[out_r], outputs[err_r]


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as pipe, contextlib.suppress(BrokenPipeError):
        pipe.write(data)


def _read_all(fd: int, into: dict[int, bytes]) -> None:
    with os.fdopen(fd, "rb") as pipe:
        into[fd] = pipe.read()


_zygote: _Zygote | None = None


def run_cli(
    args: Sequence[str | bytes],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
    text: bool = True,
    timeout: float = 60,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([python, "-m", "scrapeflow", *args], capture_output=True, ...)``,
    the process forked from the zygote (see the module's docstring). stdin is ``input`` (else
    empty, as ``/dev/null``); ``env`` the whole environment (default: this process's)."""
    global _zygote
    env = dict(os.environ if env is None else env)
    data = input.encode() if isinstance(input, str) else input
    where = os.fspath(cwd) if cwd is not None else os.getcwd()
    if _zygote is None or not _zygote.alive():
        _zygote = _Zygote()
    if _read_at_start(env) != _zygote.read_at_start:
        done = subprocess.run(
            [sys.executable, "-m", "scrapeflow", *args],
            input=data or b"",
            capture_output=True,
            env=env,
            cwd=where,
            timeout=timeout,
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    else:  # arguments as the interpreter gives them to sys.argv (bytes: surrogate escapes)
        argv = [os.fsdecode(arg) for arg in args]
        zygote = _zygote
        try:
            code, out, err = zygote.run(argv, env, where, data, timeout)
        finally:
            if not zygote.alive():
                _zygote = None
    if text:  # as subprocess's text mode decodes: strictly, universal newlines
        return subprocess.CompletedProcess(args, code, _decoded(out), _decoded(err))
    return subprocess.CompletedProcess(args, code, out, err)


def _decoded(data: bytes) -> str:
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")
