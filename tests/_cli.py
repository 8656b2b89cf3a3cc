"""``scrapeflow`` commands run as processes of their own, forked from one that imported it.

A bad-input case is a whole command in a process of its own: its exit code, its stderr, what it
left on disk. Started with ``python -m scrapeflow``, most of each case is the interpreter
importing the CLI (0.5 s, more inside the suite); the cases here are forked instead from a
*zygote*, a process of the test worker's that has imported the CLI and its libraries once and
does nothing else (no thread, no command run, no setting read). The child then runs the command
as ``python -m scrapeflow`` would: its own stdin, stdout and stderr (pipes), working directory
and environment, ``scrapeflow.cli.main``, the exit handlers, its exit code.

What a fork cannot take from the zygote, a real interpreter start is still used for: an
environment whose interpreter variables (``PYTHON*``, ``LANG``, ``LC_*``) differ from the
zygote's, read when an interpreter starts. Tests of signals, of several commands at once and of
long runs start real processes of their own; this is for one command at a time that ends.
"""

from __future__ import annotations

import array
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["run_cli"]

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

# The zygote: reads a request (JSON, with the child's three standard fds), forks, answers the
# child's pid, waits for it, answers its wait status. One request at a time.
_ZYGOTE = r"""
import array, atexit, importlib, json, os, socket, sys
for name in sys.argv[2:]:
    importlib.import_module(name)
from scrapeflow.cli._main import main
channel = socket.socket(fileno=int(sys.argv[1]))
while True:
    fds = array.array("i")
    message, ancillary, _, _ = channel.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
    if not message:
        break
    for level, kind, data in ancillary:
        fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        channel.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        code = 3
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = [sys.argv[0], *request["args"]]
            try:
                main(request["args"])
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    channel.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    channel.sendall(json.dumps({"status": status}).encode() + b"\n")
"""


def _interpreter_variables(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LANG", "LC_"))}


class _Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SCRAPEFLOW_") and k not in ("COLUMNS", "LINES")
        }
        self.interpreter = _interpreter_variables(env)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE, str(theirs.fileno()), *_IMPORTED],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env=env,
        )
        theirs.close()
        self.channel = ours
        self.answers = ours.makefile("rb")
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        input: bytes | None,
        timeout: float,
    ) -> tuple[int, bytes, bytes]:
        with self.lock:
            stdin_r, stdin_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            request = json.dumps({"args": list(args), "env": dict(env), "cwd": cwd}).encode()
            fds = array.array("i", [stdin_r, out_w, err_w])
            try:
                self.channel.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            finally:
                for fd in (stdin_r, out_w, err_w):
                    os.close(fd)
            pid = json.loads(self.answers.readline())["pid"]
            outputs: dict[int, bytes] = {}
            readers = [
                threading.Thread(target=_read_all, args=(fd, outputs), daemon=True)
                for fd in (out_r, err_r)
            ]
            for reader in readers:
                reader.start()
            with os.fdopen(stdin_w, "wb") as stdin:
                try:
                    if input:
                        stdin.write(input)
                except BrokenPipeError:
                    pass
            for reader in readers:
                reader.join(timeout)
            if any(reader.is_alive() for reader in readers):
                os.kill(pid, 9)
                self.answers.readline()
                for reader in readers:
                    reader.join()
                raise subprocess.TimeoutExpired(["scrapeflow", *args], timeout)
            status = json.loads(self.answers.readline())["status"]
            return os.waitstatus_to_exitcode(status), outputs[out_r], outputs[err_r]


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
    if _interpreter_variables(env) != _zygote.interpreter:
        done = subprocess.run(
            [sys.executable, "-m", "scrapeflow", *args],
            input=data if data is not None else b"",
            capture_output=True,
            env=env,
            cwd=where,
            timeout=timeout,
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    else:  # arguments as the interpreter gives them to sys.argv (bytes: surrogate escapes)
        argv = [os.fsdecode(arg) for arg in args]
        code, out, err = _zygote.run(argv, env, where, data, timeout)
    if text:
        return subprocess.CompletedProcess(args, code, _decoded(out), _decoded(err))
    return subprocess.CompletedProcess(args, code, out, err)


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", "replace").replace("\r\n", "\n")
