"""Crash-safe file writes: a reader sees the old file or the new one, never a cut one.

Files are created owner-only (0600), and so are the directories made here (0700): status files
hold the sites' answers and the URLs asked, which may carry tokens. Reads refuse what is not a
regular file (a FIFO would block, ``/dev/zero`` never end) without blocking on it.

These run once or twice per task on the engine's hot path, so they use ``os`` calls on string
paths rather than pathlib (measured: 37 µs against 49 µs per atomic write on this machine).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from pathlib import Path

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "TMP_MARK",
    "NotARegularFile",
    "atomic_write_bytes",
    "file_kind",
    "make_private_dirs",
    "pid_alive",
    "read_regular_file",
    "sweep_stale_temp_files",
    "write_new_or_replace",
]

TMP_MARK = ".sf-tmp-"
FILE_MODE = 0o600
"""Files written here: read and written by their owner only."""
DIR_MODE = 0o700
"""Directories made here: entered by their owner only."""
_write_ids = itertools.count()
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_TMP_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class NotARegularFile(OSError):
    """The path is a directory, a FIFO, a device or a socket: not read."""

    def __init__(self, path: str | Path, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.kind = kind


def file_kind(mode: int) -> str:
    """What ``st_mode`` describes, for a message: "a directory", "a FIFO", "a device"..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def read_regular_file(path: str | Path) -> bytes:
    """The whole content of ``path``; :class:`NotARegularFile` if it is not a regular file.

    A FIFO is opened without waiting for a writer and refused; so is a device such as
    ``/dev/zero`` (also behind a symlink). ``FileNotFoundError`` and other ``OSError`` pass.
    """
    fd = os.open(path, _READ)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(path, file_kind(info.st_mode))
        chunks = []
        while chunk := os.read(fd, max(info.st_size + 1, 65_536)):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def make_private_dirs(directory: str | Path) -> None:
    """Create ``directory`` and its missing parents, each owner-only (0700); existing ones are
    left as they are. Like ``os.makedirs(..., exist_ok=True)``, whose ``mode`` skips parents."""
    directory = os.path.abspath(directory)
    missing = []
    while not os.path.isdir(directory):
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, DIR_MODE)
        if not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)


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
    one, owner-only (0600). ``fsync=True`` also survives power loss, at the cost of a disk flush
    per file.
    """
    path = os.fspath(path)
    # pid and a per-process counter: two writes of one file (threads) never share a temp file.
    tmp = f"{path}{TMP_MARK}{os.getpid()}-{next(_write_ids)}"
    try:
        _write_fd(os.open(tmp, _TMP_FILE, FILE_MODE), data, fsync=fsync)
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
        fd = os.open(path, _NEW_FILE, FILE_MODE)
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
            if not (pid_text.isdigit() and serial.isdigit()) or pid_alive(int(pid_text)):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed += 1
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (this process counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
