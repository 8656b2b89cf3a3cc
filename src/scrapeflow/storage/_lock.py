"""One run of a shard at a time: an exclusive lock on ``(fetch id, offset, limit)``.

Two runs of one shard side by side (a resume started while the killed run's workers still
write, say) fetch the same URLs twice and double their index and log lines. So a run holds an
exclusive ``flock`` on ``.{fetch_id}_{offset}_{limit}.lock``, a file next to the shard's fetch
log: in ``{root}/{program}/logs/`` on local disk, in the spool directory for S3 (where the log
is built on this machine). A second run of the shard is refused at once
(:class:`FetchInProgress`), naming the fetch id and the pid that took the lock.

The lock belongs to an open file, not to a process: the processes a run starts inherit the
descriptor (:attr:`ShardLock.fd`), so the lock is held until the *last* process of the run has
exited, however the run ends, ``kill -9`` of its parent included. The kernel releases it when
they are gone: a stale lock cannot outlive its run.

Shards of one fetch id with other offsets or limits run side by side (gofetch's scheduler fans a
fetch out over machines that way): they fetch other URLs into other logs. Across machines on
S3, the scheduler gives each shard to one machine (see ``docs/storage.md``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from scrapeflow.errors import FetchInProgress, StoreUnavailable
from scrapeflow.storage._fetchlog import spool_path
from scrapeflow.storage._private import FILE_MODE, makedirs_private
from scrapeflow.storage._store import BlobStore
from scrapeflow.storage._types import check_name

__all__ = ["FetchInProgress", "ShardLock", "shard_state_dir"]

_OPEN = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC


def shard_state_dir(store: BlobStore, spool_dir: str | Path | None = None) -> str:
    """The local directory beside the shard's fetch log, for its lock and the fetcher's journal:
    ``{root}/{program}/logs`` on local disk, the store's spool directory for S3."""
    key = store.key("logs")
    local = store._backend.local_path(key)
    if local is not None:
        return local
    return os.path.dirname(spool_path(store, f"{key}/lock", spool_dir))


class ShardLock:
    """The exclusive lock of one shard of a fetch in ``store`` (see the module docstring).

    >>> with ShardLock(store, "48213", 0, 500) as lock:  # doctest: +SKIP
    ...     start_workers(inherit=lock.fd)

    :meth:`acquire` raises :class:`FetchInProgress` when another run holds it, and
    :class:`StoreUnavailable` when the lock file cannot be created.
    """

    def __init__(
        self,
        store: BlobStore,
        fetch_id: str,
        offset: int,
        limit: int,
        *,
        spool_dir: str | Path | None = None,
    ) -> None:
        check_name("fetch id", fetch_id)
        self.fetch_id, self.offset, self.limit = fetch_id, offset, limit
        self.path = os.path.join(
            shard_state_dir(store, spool_dir), f".{fetch_id}_{offset}_{limit}.lock"
        )
        self.fd: int | None = None

    def __repr__(self) -> str:
        return f"ShardLock({self.path!r}, held={self.fd is not None})"

    def acquire(self) -> ShardLock:
        """Take the lock now, or raise :class:`FetchInProgress` (never waits)."""
        if self.fd is not None:
            return self
        try:
            makedirs_private(os.path.dirname(self.path))
        except OSError as exc:
            reason = "a file is there" if isinstance(exc, FileExistsError) else exc.strerror
            raise StoreUnavailable(
                f"cannot create directory {os.path.dirname(self.path)}: {reason}"
            ) from None
        while True:
            try:
                fd = os.open(self.path, _OPEN, FILE_MODE)
            except OSError as exc:
                raise StoreUnavailable(f"cannot create {self.path}: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                by = f" by pid {holder}" if holder else ""
                raise FetchInProgress(
                    f"fetch {self.fetch_id} (offset {self.offset}, limit {self.limit}) is "
                    f"already running on this store (started{by}; lock {self.path}): let it "
                    "finish or stop it, then run the same command again to resume"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            if _still_named(self.path, fd):
                break
            # The run that held it finished and removed the file while we waited for it: the
            # lock we hold is on a file nobody else will open. Take the one at the name.
            os.close(fd)
        with contextlib.suppress(OSError):  # who holds it, for the refusal above; a nicety
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self, *, remove: bool = True) -> None:
        """Let go of the lock (this process's descriptor; processes that inherited it hold it
        until they exit). ``remove``: delete the lock file first (a finished run's)."""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            if remove and _still_named(self.path, fd):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)  # safe: we hold it, and a newcomer re-checks the name
        finally:
            os.close(fd)

    def __enter__(self) -> ShardLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _still_named(path: str, fd: int) -> bool:
    try:
        named, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
