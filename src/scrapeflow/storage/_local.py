"""Local-disk backend: plain ``os`` calls, because what the store needs (create-if-absent, rename
into place, ``O_APPEND``) is exactly what fsspec's local filesystem does not expose.

* Objects are written to a temp file in the same directory and then hard-linked (create only)
  or renamed (replace) into place: a reader, or a process killed half-way, never sees a cut one.
* Index lines are appended with ``O_APPEND``, one ``os.write`` per whole line. POSIX makes the
  seek to the end and the write one atomic step for every process appending to the file, and
  on a local Linux filesystem (ext4, xfs, btrfs, tmpfs) the write of a regular file holds the
  inode lock for its whole length, so lines of concurrent writers (threads, processes) never
  interleave or overwrite each other. Not on NFS, where ``O_APPEND`` is emulated by the client.
* Small operations run inline (a few microseconds); bodies over ``THREAD_THRESHOLD`` bytes are
  written and read in a worker thread so a 50 MB page does not stall the event loop.
* Every file created is ``0600`` and every directory ``0700`` (:mod:`._private`): fetched pages
  and their logs are nobody else's business on a shared machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os

from scrapeflow._util.atomic import TMP_MARK
from scrapeflow.errors import StorageError, StoreUnavailable
from scrapeflow.storage._private import FILE_MODE, copy_private, makedirs_private, write_private
from scrapeflow.storage._types import split_lines

__all__ = ["THREAD_THRESHOLD", "LocalBackend"]

THREAD_THRESHOLD = 1 << 20
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
# pid and a per-process counter (next() is atomic): no two writers, threads included, share one.
_tmp_ids = itertools.count()


class LocalBackend:
    """Objects as files under ``root``; see the module docstring for the guarantees."""

    def __init__(self, path: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(path or "."))
        self._made_dirs: set[str] = set()

    def __repr__(self) -> str:
        return f"LocalBackend({self.root!r})"

    def location(self, key: str) -> str:
        return f"{self.root}/{key}"

    def local_path(self, key: str) -> str:
        return f"{self.root}/{key}"

    async def check(self) -> None:
        self._ensure_dir(self.root)
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StoreUnavailable(f"store directory {self.root} is not writable")

    async def exists(self, key: str) -> bool:
        return _exists(self.local_path(key))

    async def read(self, key: str) -> bytes | None:
        path = self.local_path(key)
        try:
            size = os.stat(path).st_size
            if size > THREAD_THRESHOLD:
                return await asyncio.to_thread(_read_file, path)
            return _read_file(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _storage_error("read", path, exc) from exc

    async def create(self, key: str, data: bytes) -> bool:
        path = self.local_path(key)
        if _exists(path):
            return False
        if len(data) > THREAD_THRESHOLD:
            return await asyncio.to_thread(self._create, path, data)
        return self._create(path, data)

    def _create(self, path: str, data: bytes) -> bool:
        tmp = self._write_tmp(path, data)
        try:
            try:
                # link() fails if the name exists: of two writers of one body, exactly one
                # reports "created", and the object is never replaced once there.
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV}:
                    raise
                # A filesystem without hard links: rename is still atomic (same bytes anyway).
                if os.path.exists(path):
                    return False
                os.replace(tmp, path)
            return True
        except OSError as exc:
            raise _storage_error("write", path, exc) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _write_tmp(self, path: str, data: bytes) -> str:
        self._ensure_dir(os.path.dirname(path))
        tmp = _tmp_name(path)
        try:
            write_private(tmp, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _storage_error("write", path, exc) from exc
        return tmp

    async def replace(self, key: str, data: bytes) -> None:
        path = self.local_path(key)
        self._ensure_dir(os.path.dirname(path))
        try:
            if len(data) > THREAD_THRESHOLD:
                await asyncio.to_thread(_replace_file, path, data)
            else:
                _replace_file(path, data)
        except OSError as exc:
            raise _storage_error("write", path, exc) from exc

    async def upload(self, path: str, key: str) -> None:
        dest = self.local_path(key)
        self._ensure_dir(os.path.dirname(dest))
        try:
            await asyncio.to_thread(_copy_into_place, path, dest)
        except OSError as exc:
            raise _storage_error("write", dest, exc) from exc

    async def download(self, key: str, path: str) -> bool:
        try:
            await asyncio.to_thread(copy_private, self.local_path(key), path)
        except FileNotFoundError:
            if _exists(self.local_path(key)):
                raise  # the destination's directory is missing: the caller's bug
            return False
        return True

    async def list_names(self, key: str) -> list[str]:
        try:
            with os.scandir(self.local_path(key)) as entries:
                return sorted(e.name for e in entries if e.is_file() and TMP_MARK not in e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []

    async def add_line(self, key: str, line: bytes, tag: str) -> None:
        path = f"{self.root}/{key}"
        directory, _, _ = path.rpartition("/")
        if directory not in self._made_dirs:
            self._ensure_dir(directory)
        try:
            fd = os.open(path, _APPEND, FILE_MODE)
            try:
                written = os.write(fd, line)  # one write: see the module docstring
            finally:
                os.close(fd)
        except OSError as exc:
            raise _storage_error("append to", path, exc) from exc
        if written != len(line):  # only on a full disk or a file size limit
            raise StorageError(f"append to {path}: wrote {written} of {len(line)} bytes")

    async def read_lines(self, key: str) -> list[bytes]:
        data = await self.read(key)
        return split_lines(data or b"")

    async def compact_lines(self, key: str) -> int:
        return 0  # one appended file already: nothing to fold

    async def aclose(self) -> None:
        return None

    def _ensure_dir(self, directory: str) -> None:
        if directory in self._made_dirs:
            return
        try:
            makedirs_private(directory)
        except FileExistsError as exc:  # a file where a directory should be
            raise StoreUnavailable(f"cannot create directory {directory}: a file is there") from exc
        except OSError as exc:
            raise StoreUnavailable(f"cannot create directory {directory}: {exc.strerror}") from exc
        self._made_dirs.add(directory)


def _exists(path: str) -> bool:
    """One stat: microseconds on a local disk, not worth a thread."""
    return os.path.exists(path)


def _tmp_name(path: str) -> str:
    return f"{path}{TMP_MARK}{os.getpid()}-{next(_tmp_ids)}"


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _replace_file(path: str, data: bytes) -> None:
    tmp = _tmp_name(path)
    try:
        write_private(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _copy_into_place(src: str, dest: str) -> None:
    tmp = _tmp_name(dest)
    try:
        copy_private(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _storage_error(action: str, path: str, exc: OSError) -> StorageError:
    reason = exc.strerror or type(exc).__name__
    if exc.errno in {errno.EACCES, errno.EPERM, errno.EROFS}:
        return StoreUnavailable(f"cannot {action} {path}: {reason}")
    return StorageError(f"cannot {action} {path}: {reason}")
