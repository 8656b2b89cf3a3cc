"""A local file that the processes of one machine append to, published whole by the last one.

Fetch logs and WARC files are one object per run, written by every process of the run, while
S3 cannot append. So each is built in a local *spool* file and published when the run closes:

* every write is one ``os.write`` of whole records with ``O_APPEND`` (no interleaving between
  processes on a local filesystem, and nothing buffered in Python: a killed process leaves
  everything it wrote);
* each writer holds a shared ``flock`` while open; on close it tries for the exclusive lock
  without waiting, and only the writer that gets it (the last one) publishes and removes the
  spool. A writer that opens meanwhile waits for that, sees its file was unlinked, and starts a
  new spool seeded from the published object;
* a spool found at open with no live writer is a crashed run's: its cut tail (a record whose
  write was under way) is trimmed, and the run goes on appending to it.

Spool files are ``0600`` and the directories made for them ``0700``, like the store's own files.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import zlib
from collections.abc import Awaitable, Callable

from scrapeflow.errors import StorageError
from scrapeflow.storage._private import FILE_MODE, makedirs_private

__all__ = ["SharedAppendFile", "trim_cut_gzip", "trim_cut_line"]

_OPEN = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
_CHUNK = 1 << 16
_seed_ids = itertools.count()

Seed = Callable[[str], Awaitable[bool]]
Publish = Callable[[str], Awaitable[None]]


class SharedAppendFile:
    """One writer's handle on a spool file (see the module docstring)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    async def open(
        cls, path: str, *, seed: Seed | None, trim: Callable[[str], None]
    ) -> SharedAppendFile:
        """Open ``path`` for appending, creating it first with ``seed(tmp)`` (which fills a
        temp file and says whether it wrote anything) if there is none."""
        makedirs_private(os.path.dirname(path))
        while True:
            if not _exists(path):
                await _create(path, seed)
            try:
                fd = os.open(path, _OPEN)
            except FileNotFoundError:
                continue  # published and removed by the last writer just now: seed anew
            try:
                alone = _try_lock(fd, fcntl.LOCK_EX)
                if alone and _names(path, fd):
                    # No live writer: whatever is cut at the end was cut by a crash. (Holding
                    # the exclusive lock, nobody can publish the file under us meanwhile.)
                    await asyncio.to_thread(trim, path)
                # Blocks while the last writer of a closing run publishes: in a thread.
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_SH)
                if _names(path, fd):
                    return cls(path, fd)
            except BaseException:
                os.close(fd)
                raise
            # Published while we opened it — unlinked, or renamed into place (a local WARC):
            # what we hold is no longer the spool. Start anew.
            os.close(fd)

    def append(self, data: bytes) -> None:
        """Append ``data`` in one write (whole records: never split between two writes)."""
        if self._fd is None:
            raise StorageError(f"{self.path} is closed")
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            raise StorageError(f"cannot append to {self.path}: {exc.strerror}") from exc
        if written != len(data):  # a full disk: the record is cut, the reader will skip it
            raise StorageError(f"append to {self.path}: wrote {written} of {len(data)} bytes")

    def sync(self) -> None:
        """Flush to the disk (survives a power cut, not just a killed process)."""
        if self._fd is not None:
            os.fsync(self._fd)

    async def close(self, publish: Publish | None) -> bool:
        """Stop writing; the last writer calls ``publish(path)`` and removes the spool (unless
        ``publish`` moved it). ``publish=None``: the file is the final object, kept. Returns
        whether this writer was the last. If ``publish`` fails, the spool stays for the next
        run to pick up, and the error propagates."""
        fd, self._fd = self._fd, None
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
            if not _try_lock(fd, fcntl.LOCK_EX):
                return False  # another writer is still open: it publishes
            if not _names(self.path, fd):
                return False  # a writer that closed just before us published already
            if publish is not None:
                await publish(self.path)
                # Unlink only our own file: if publish moved it, the name may already be a new
                # spool (nobody else can replace ours while it is there and we hold the lock).
                if _names(self.path, fd):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path)
            return True
        finally:
            os.close(fd)


async def _create(path: str, seed: Seed | None) -> None:
    tmp = f"{path}.seed-{os.getpid()}-{next(_seed_ids)}"
    try:
        # Created owner-only before the seed fills it: a download keeps the mode it finds.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE))
        if seed is None or not await seed(tmp):
            os.truncate(tmp, 0)  # nothing to seed from: an empty spool
        else:
            os.chmod(tmp, FILE_MODE)  # in case the seed replaced the file rather than filled it
        # link() creates only if absent: of two processes seeding at once, one spool wins.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (not unlinked, renamed or replaced)."""
    try:
        named, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def trim_cut_line(path: str) -> None:
    """Truncate ``path`` after its last newline (drop a line whose write was cut)."""
    size = os.path.getsize(path)
    with open(path, "rb+") as f:
        end = size
        while end > 0:
            start = max(0, end - _CHUNK)
            f.seek(start)
            block = f.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                if keep != size:
                    f.truncate(keep)
                return
            end = start
        f.truncate(0)


def trim_cut_gzip(path: str) -> None:
    """Truncate ``path`` after its last complete gzip member (drop a cut WARC record)."""
    good = 0
    offset = 0
    decomp = zlib.decompressobj(zlib.MAX_WBITS | 16)
    with open(path, "rb+") as f:
        while chunk := f.read(_CHUNK):
            data = chunk
            while data:
                try:
                    decomp.decompress(data)
                except zlib.error:
                    f.truncate(good)
                    return
                if not decomp.eof:
                    offset += len(data)
                    break
                consumed = len(data) - len(decomp.unused_data)
                offset += consumed
                good = offset
                data = decomp.unused_data
                decomp = zlib.decompressobj(zlib.MAX_WBITS | 16)
        if good != os.path.getsize(path):
            f.truncate(good)
