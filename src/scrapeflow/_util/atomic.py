"""Crash-safe file writes: a reader sees the old file or the new one, never a cut one.

These run once or twice per task on the engine's hot path, so they use ``os`` calls on string
paths rather than pathlib (measured: 37 µs against 49 µs per atomic write on this machine).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

__all__ = ["TMP_MARK", "atomic_write_bytes", "sweep_stale_temp_files", "write_new_or_replace"]

TMP_MARK = ".sf-tmp-"
_write_ids = itertools.count()
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL
_TMP_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def _write_fd(fd: int, data: bytes, *, fsync: bool) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and a rename.

    A process killed at any instant (even SIGKILL) leaves either the previous file or the new
    one. ``fsync=True`` also survives power loss, at the cost of a disk flush per file.
    """
    path = os.fspath(path)
    # pid and a per-process counter: two writes of one file (threads) never share a temp file.
    tmp = f"{path}{TMP_MARK}{os.getpid()}-{next(_write_ids)}"
    try:
        _write_fd(os.open(tmp, _TMP_FILE, 0o644), data, fsync=fsync)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_new_or_replace(path: str | Path, data: bytes) -> None:
    """Create ``path`` with ``data``; if it already exists, replace it atomically.

    For files that a separate, atomic record (a task's status) declares complete: a new file
    cut by a crash is never declared complete, and an existing one, which may be, is only ever
    swapped whole. Saves the rename on the common path, a first write.
    """
    try:
        fd = os.open(path, _NEW_FILE, 0o644)
    except FileExistsError:
        atomic_write_bytes(path, data)
        return
    _write_fd(fd, data, fsync=False)


def sweep_stale_temp_files(directory: Path) -> int:
    """Remove temp files left by writers that died (their pid is gone). Returns the count."""
    removed = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            mark = name.rfind(TMP_MARK)
            if mark < 0:
                continue
            pid_text, _, serial = name[mark + len(TMP_MARK) :].partition("-")
            if not (pid_text.isdigit() and serial.isdigit()) or _pid_alive(int(pid_text)):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed += 1
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
