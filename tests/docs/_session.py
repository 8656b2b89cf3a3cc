"""One page's shell: a bash that lives for the whole page, as a reader's terminal does.

Variables, functions, ``cd`` and background processes (``scrapeflow sandbox … &``) carry over
from block to block. Each step's code is sourced from a file, its output (stdout and stderr
together) kept in another; the first command that fails ends the step, and its line is told.
The shell runs in a new process group in the page's own directory, with the scrapeflow command
first on ``PATH``; at the end the whole group is stopped (SIGTERM, then SIGKILL), so whatever a
page started in the background ends with its test, passed or failed (and so does what left the
group, as ``timeout`` does: every descendant of the shell is stopped too).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

__all__ = ["Outcome", "ShellSession", "StepTimeout"]

_DONE = "__DOCS_STEP_DONE__"
# bash's own set-up, as a reader's shell (no pipefail: `… | head` is fine): on a failing
# command in a sourced step, record it (once) and leave the step. DOCS_LENIENT=1 (a
# transcript) records nothing.
_PRELUDE = f"""
set -o errtrace
__docs_fail() {{
  local status=$1 line=$2 command=$3
  if [ "${{DOCS_LENIENT:-0}}" = 1 ] || [ -s "$DOCS_FAIL" ]; then return 0; fi
  printf '%s\\t%s\\t%s\\n' "$status" "$line" "$command" > "$DOCS_FAIL"
}}
__docs_leave() {{ [ "${{DOCS_LENIENT:-0}}" = 1 ]; }}
trap '__docs_fail $? $LINENO "$BASH_COMMAND"; __docs_leave || return 1 2>/dev/null' ERR
echo {_DONE} 0
"""


class StepTimeout(Exception):
    """A step ran past its time: the shell is stopped."""


@dataclass(frozen=True)
class Outcome:
    """What one step did: its exit status, what it printed, and where it failed (if it did)."""

    status: int
    output: str
    output_file: Path
    failed_line: int | None  # the line of the step's code that failed, from 1
    failed_command: str | None


class ShellSession:
    """``with ShellSession(directory, env) as shell: shell.run(code)``."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self._env = env
        self._count = 0
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None

    def __enter__(self) -> ShellSession:
        self._process = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=self.directory,
            env=self._env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="docs-shell", daemon=True)
        self._reader.start()
        self._send(_PRELUDE)
        self._wait_done(60)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _send(self, text: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(text)
        self._process.stdin.flush()

    def _wait_done(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StepTimeout(f"no end after {timeout:.0f} s")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError("the page's shell ended (a block ran 'exit'?)")
            if line.startswith(_DONE):
                return int(line.split()[1])

    def run(self, code: str, *, lenient: bool = False, timeout: float = 180) -> Outcome:
        """Source ``code`` in the shell; ``lenient``: a failing command does not end it."""
        self._count += 1
        step = self.directory / f".docs-step-{self._count}.sh"
        output = self.directory / f".docs-step-{self._count}.out"
        fail = self.directory / f".docs-step-{self._count}.fail"
        step.write_text(code + "\n", encoding="utf-8")
        self._send(
            f"DOCS_FAIL={str(fail)!r} DOCS_LENIENT={int(lenient)}; "
            f"{{ source {str(step)!r}; }} > {str(output)!r} 2>&1 < /dev/null; "
            f"echo {_DONE} $?\n"
        )
        status = self._wait_done(timeout)
        text = output.read_text(encoding="utf-8", errors="replace")
        failed_line = failed_command = None
        if fail.exists() and fail.read_text().strip():
            code_status, line, command = fail.read_text().rstrip("\n").split("\t", 2)
            status = int(code_status) or status
            failed_line, failed_command = int(line), command
        return Outcome(status, text, output, failed_line, failed_command)

    def close(self) -> None:
        """Stop the shell and everything it started (its process group)."""
        process = self._process
        if process is None:
            return
        self._process = None
        # what the page started, also what left the group (``timeout`` makes a group of its
        # own): taken before the shell ends, when they are still its descendants
        try:
            started = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            started = []
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass
        _stop_group(process.pid)
        _stop_rest(started)
        process.wait(timeout=30)
        if self._reader is not None:
            self._reader.join(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _stop_rest(processes: list[psutil.Process]) -> None:
    """SIGTERM, then after 15 s SIGKILL, to those of ``processes`` still running."""
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=15)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_group(pgid: int) -> None:
    """SIGTERM to the group, then SIGKILL to what is left after 15 s."""
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            # reap the shell itself, so that a zombie does not keep the group alive
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pgid, os.WNOHANG)
            if not _alive(pgid):
                return
            time.sleep(0.1)
    print(f"docs: process group {pgid} still alive after SIGKILL", file=sys.stderr)
