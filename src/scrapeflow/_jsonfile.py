"""Crash-safe file writes: a reader sees the old file or the new one, never a cut one."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TMP_MARK = ".tmp-"


def atomic_write_bytes(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and a rename.

    A process killed at any instant (even SIGKILL) leaves either the previous file or the new
    one. ``fsync=True`` also survives power loss, at the cost of a disk flush per file.
    """
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if fsync:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def sweep_stale_temp_files(directory: Path) -> int:
    """Remove temp files left by writers that died (their pid is gone). Returns the count."""
    removed = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            mark = name.rfind(TMP_MARK)
            if mark < 0:
                continue
            pid_text = name[mark + len(TMP_MARK) :]
            if not pid_text.isdigit() or _pid_alive(int(pid_text)):
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
