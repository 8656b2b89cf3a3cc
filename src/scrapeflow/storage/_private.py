"""Owner-only files and directories: what the store creates on local disk (bodies, indexes, fetch
logs, WARC files, spools, locks) is ``0600``, the directories it creates ``0700``, whatever the
umask. Fetched pages and their logs may be private; the owner can widen modes afterwards.

Existing files and directories keep their modes: only what is created here is owner-only.
"""

from __future__ import annotations

import os

__all__ = ["DIR_MODE", "FILE_MODE", "copy_private", "makedirs_private", "write_private"]

FILE_MODE = 0o600
DIR_MODE = 0o700
_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_CHUNK = 1 << 20


def makedirs_private(path: str) -> None:
    """Create the directory ``path`` and its missing parents, each ``0700``.

    Like ``os.makedirs(path, exist_ok=True)`` (``FileExistsError`` if ``path`` is a file), except
    that the parents it creates are ``0700`` too (``os.makedirs`` gives them the umask's mode).
    """
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
        else:
            # mkdir's mode passes through the umask: a umask of 0o277 would leave 0o500.
            os.chmod(directory, DIR_MODE)


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (created ``0600``, or truncated if it is there)."""
    fd = os.open(path, _NEW, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def copy_private(src: str, dest: str) -> None:
    """Copy the file ``src`` to ``dest`` (created ``0600``, or truncated if it is there)."""
    with open(src, "rb") as source:
        fd = os.open(dest, _NEW, FILE_MODE)
        try:
            while chunk := source.read(_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
