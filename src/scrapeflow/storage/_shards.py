"""Index lines of many keys in one append-only file per shard, on local disk.

An index with a key per URL made a file per URL, and on ext4 a new file costs a new inode: a
fetch of 20,000 URLs spent 3.0-5.5 s of system time creating them, where a loop writing the
content and the checksum index spent 0.9 s for everything. So on local disk such an index
keeps the lines of all the keys of a shard (the key's first two characters: 256 shards) in one
file, ``{index}/{shard}.tsv``, one record a line::

    {key}\\t{line}\\n

**Appends** are one ``os.write`` of a whole record with ``O_APPEND``: the move to the end and
the write are one step, and a local filesystem writes a regular file under its inode lock, so
records of concurrent writers (threads, processes) never interleave. Each writer holds a shared
``flock`` on the file while it appends, which only compaction (exclusive) waits for.

**A torn record** (a process killed inside its write, a full disk) has no newline, and the next
writer's record follows it on the same line. A reader therefore does not split on line starts:
it takes, for a key, every ``{key}\\t`` followed by a well-formed line (``record_pattern``: so
many tab-separated fields, each of a known shape where it has one) and a newline. A torn record
plus a whole one has more fields than a line can have, so the torn one is never read, and the
whole one after it is.

**Compaction** (:func:`compact_shard`) rewrites a shard without its torn records and duplicate
lines, with the lines of older layouts (a file per key) folded in: it holds the file's
exclusive ``flock``, writes a temp file and renames it into place, then deletes the old files it
folded. An appender that got its shared lock on the file that was just replaced sees that it
has no link left (the rename took its name), and appends again to the new file.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import re
from collections.abc import Callable, Iterable

from scrapeflow._util.atomic import TMP_MARK
from scrapeflow.errors import StorageError, StoreUnavailable
from scrapeflow.storage._private import FILE_MODE, makedirs_private, write_private

__all__ = [
    "SHARD_SUFFIX",
    "append_record",
    "compact_shard",
    "read_shard",
    "records_of",
]

SHARD_SUFFIX = ".tsv"
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_CLOEXEC
_TRIES = 100  # replaced by a compaction this many times during one append: something is wrong


async def append_record(path: str, record: bytes, made_dirs: set[str]) -> None:
    """Append ``record`` (``{key}\\t{line}\\n``) to the shard file ``path`` in one write.

    Inline (a few microseconds); only while a compaction holds the file is the wait for it
    done in a worker thread. ``made_dirs``: directories known to exist (the caller's cache)."""
    directory = path.rpartition("/")[0]
    if directory not in made_dirs:
        _ensure_dir(directory)
        made_dirs.add(directory)
    if not _append(path, record, wait=False):
        await asyncio.to_thread(_append, path, record, wait=True)


def _append(path: str, record: bytes, *, wait: bool) -> bool:
    for _ in range(_TRIES):
        try:
            fd = os.open(path, _APPEND, FILE_MODE)
        except OSError as exc:
            raise _error("append to", path, exc) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return False  # a compaction holds it: wait in a thread, not in the event loop
            if not _is_current(fd):
                continue  # a compaction replaced the file: append to the new one
            try:
                written = os.write(fd, record)
            except OSError as exc:
                raise _error("append to", path, exc) from exc
            if written != len(record):  # a full disk: the cut record is never read
                raise StorageError(f"append to {path}: wrote {written} of {len(record)} bytes")
            return True
        finally:
            os.close(fd)  # and the lock with it
    raise StorageError(f"append to {path}: the file was replaced {_TRIES} times meanwhile")


def _is_current(fd: int) -> bool:
    """Whether the open file is still at its path: a compaction renames its new file over the
    path, which leaves the old one with no link (one ``fstat``, no second path lookup)."""
    return os.fstat(fd).st_nlink > 0


def read_shard(path: str) -> bytes:
    """The shard file's bytes (``b""`` if there is none yet)."""
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise _error("read", path, exc) from exc
    try:
        return _read_all(fd)
    finally:
        os.close(fd)


def records_of(data: bytes, key: bytes, line: bytes) -> list[tuple[bytes, bytes]]:
    """The ``(key, line)`` records of a shard's ``data``, in order, torn records skipped.

    ``key`` and ``line`` are regular expressions on bytes: a key's shape (a fixed length, so
    that the key of a whole record that follows a torn one is read exactly) and a line's, which
    matches one whole line and nothing longer (no newline, a fixed number of tabs). ``key`` may
    be one key, escaped, to read only its records."""
    return re.findall(b"(" + key + b")\t(" + line + b")\n", data)


def compact_shard(
    path: str,
    key: bytes,
    line: bytes,
    old_files: Callable[[], Iterable[tuple[str, str]]],
    split: Callable[[bytes], list[bytes]],
) -> int:
    """Rewrite the shard file ``path`` whole and atomically: its well-formed records, each once,
    after the lines of ``old_files()`` (``(key, path)`` of files of an older layout, one line
    each), which it then deletes. Blocks (run it in a thread). Returns how many old files it
    folded."""
    _ensure_dir(os.path.dirname(path))
    for _ in range(_TRIES):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise _error("compact", path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # appenders finish their line; new ones wait
            if not _is_current(fd):
                continue  # another compaction replaced it meanwhile
            folded: list[str] = []
            merged: list[bytes] = []
            for name, old in old_files():  # older lines first
                try:
                    with open(old, "rb") as f:
                        lines = split(f.read())
                except FileNotFoundError:
                    continue
                merged += [f"{name}\t".encode() + old_line for old_line in lines]
                folded.append(old)
            records = records_of(_read_all(fd), key, line)
            merged += [k + b"\t" + v for k, v in records]
            body = b"".join(record + b"\n" for record in dict.fromkeys(merged))
            tmp = f"{path}{TMP_MARK}{os.getpid()}-compact"
            try:
                write_private(tmp, body)
                os.replace(tmp, path)  # still holding the old file's lock: no append is lost
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise _error("compact", path, exc) from exc
            # Only now: a reader reads the old files before the shard, so between the rename
            # and these deletes it finds a line twice (and keeps it once), never not at all.
            for old in folded:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(old)
            return len(folded)
        finally:
            os.close(fd)
    raise StorageError(f"compact {path}: the file was replaced {_TRIES} times meanwhile")


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, max(size - offset, 1 << 16), offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _ensure_dir(directory: str) -> None:
    try:
        makedirs_private(directory)
    except FileExistsError as exc:
        raise StoreUnavailable(f"cannot create directory {directory}: a file is there") from exc
    except OSError as exc:
        raise StoreUnavailable(f"cannot create directory {directory}: {exc.strerror}") from exc


def _error(action: str, path: str, exc: OSError) -> StorageError:
    reason = exc.strerror or type(exc).__name__
    if exc.errno in {errno.EACCES, errno.EPERM, errno.EROFS}:
        return StoreUnavailable(f"cannot {action} {path}: {reason}")
    return StorageError(f"cannot {action} {path}: {reason}")
