"""Per-task status: the ``StatusData`` object, where it is stored, and how to read it back.

A task's status is a JSON object (the seed's ``<key>.status.json``)::

    {
      "name": "9cbc5ee4b61e0acb335d56e96c6b2586",  # the task's key, the file's basename
      "params": {"url": "http://www.bing.com"},  # the task, as given on the first run
      "scrape": {"size": 95534, "content": "b20a...", "response_headers": {...}},
      "scrape_status": "SUCCESS",                # SUCCESS | SKIPPED | ERROR <Type>::<message>
      "scrape_last_run": "2022-08-05 16:03:52.336815+00:00"  # UTC; kept when SKIPPED
    }

Where statuses live is a :class:`StatusStore`. The default, :class:`JsonDirStore`, is the seed's
format: one file per task in a directory, each written atomically (temp file + rename), so a run
killed at any moment never leaves a cut file behind. Files are created owner-only (0600), and so
are the directories the store makes (0700). :class:`scrapeflow.statusdb.SqlStatusStore` keeps the
same JSON in a database table instead, so a run can resume on another machine.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from scrapeflow._util.atomic import (
    NotARegularFile,
    atomic_write_bytes,
    make_private_dirs,
    read_regular_file,
    sweep_stale_temp_files,
)
from scrapeflow._util.logs import get_logger
from scrapeflow.errors import InputError, MissingExtra, StatusCorrupt, StatusError, TaskConflict

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ERROR_PREFIX",
    "SKIPPED",
    "STATUS_SUFFIX",
    "SUCCESS",
    "JsonDirStore",
    "Params",
    "StatusData",
    "StatusStore",
    "check_key",
    "check_task_set",
    "dump_status",
    "executor_names",
    "iter_statuses",
    "load_status_file",
    "parse_status",
    "read_status",
    "status_summary",
    "summarize",
]

StatusData = dict[str, Any]
"""A task's status: ``name``, ``params`` and, per executor, its output, status and last run."""

Params = dict[str, Any]
"""A task's parameters; ``url`` is the one the built-in executors read."""

SUCCESS = "SUCCESS"
SKIPPED = "SKIPPED"
ERROR_PREFIX = "ERROR "
STATUS_SUFFIX = ".status.json"

_log = get_logger(__name__)
_RESERVED_KEYS = {"name", "params"}
_DUMP_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
_KEY_FORBIDDEN = re.compile(r"[/\\\x00]")
_MAX_KEY_LENGTH = 200


def check_key(key: object) -> str:
    """Return ``key`` if it can name a status file, else raise :class:`InputError` naming it."""
    if not isinstance(key, str):
        raise InputError(f"task key must be a string, got {type(key).__name__}: {key!r}")
    if (
        not key
        or key in {".", ".."}
        or key.startswith(".")
        or _KEY_FORBIDDEN.search(key)
        or len(key.encode()) > _MAX_KEY_LENGTH
    ):
        raise InputError(
            f"task key {key!r} cannot be a file name "
            f"(non-empty, no '/', no leading '.', at most {_MAX_KEY_LENGTH} bytes in UTF-8)"
        )
    return key


@runtime_checkable
class StatusStore(Protocol):
    """Where task statuses are kept. The engine only talks to this interface.

    Implementations must make ``save`` atomic: after a crash, ``load`` returns the last saved
    status or ``None``, never a partial one. Every method is async, ``keys`` too: a store may
    be a database across the network (:class:`scrapeflow.statusdb.SqlStatusStore`).

    A store whose ``save`` never suspends (it writes and returns, like a local file's) may say
    so with a class attribute ``saves_inline = True``: a cancel cannot cut such a save, so the
    engine calls it directly instead of shielding it in a task of its own.
    """

    async def prepare(self) -> None:
        """Make the store usable (create it, check it is writable); raise a clear error if not."""

    async def load(self, key: str) -> StatusData | None:
        """The task's status, or ``None`` when the task has never been saved."""

    async def save(self, key: str, status: StatusData) -> None:
        """Replace the task's status, atomically."""

    async def exists(self, key: str) -> bool:
        """Whether the task has a saved status."""

    async def keys(self) -> list[str]:
        """Every saved task's key, in no particular order."""


class JsonDirStore:
    """The seed's store: ``<directory>/<key>.status.json``, one JSON file per task.

    ``fsync=True`` flushes every write to disk (survives power loss, costs a disk flush per
    task); by default writes are atomic against process crashes, which is what a killed run
    needs, and fast.
    """

    saves_inline = True
    """``save`` writes the file and returns without suspending (see :class:`StatusStore`)."""

    def __init__(self, directory: Path | str, *, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self._prefix = os.path.join(os.fspath(directory), "")  # hot path: plain strings

    def __repr__(self) -> str:
        return f"JsonDirStore({str(self.directory)!r})"

    def path(self, key: str) -> Path:
        """The status file of ``key``."""
        return self.directory / f"{key}{STATUS_SUFFIX}"

    async def prepare(self) -> None:
        try:
            make_private_dirs(self.directory)  # owner-only, like the files written in it
            probe = self.directory / f".scrapeflow-write-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StatusError(
                f"cannot write status files to {self.directory}: {exc.strerror or exc}"
            ) from exc
        sweep_stale_temp_files(self.directory)

    async def load(self, key: str) -> StatusData | None:
        return load_status_file(f"{self._prefix}{key}{STATUS_SUFFIX}")

    async def save(self, key: str, status: StatusData) -> None:
        atomic_write_bytes(
            f"{self._prefix}{key}{STATUS_SUFFIX}", dump_status(status), fsync=self.fsync
        )

    async def exists(self, key: str) -> bool:
        return os.path.isfile(f"{self._prefix}{key}{STATUS_SUFFIX}")  # noqa: ASYNC240 - one local stat

    async def keys(self) -> list[str]:
        # A directory of a million files takes a second to list: not on the event loop.
        return await asyncio.to_thread(lambda: list(_keys_in(self.directory)))


def _keys_in(directory: Path) -> Iterator[str]:
    """The task keys of the status files in ``directory``, one at a time (none if it is not a
    directory)."""
    if not directory.is_dir():
        return
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(STATUS_SUFFIX) and not entry.name.startswith("."):
                yield entry.name[: -len(STATUS_SUFFIX)]


def dump_status(status: StatusData) -> bytes:
    """A status as the JSON bytes of its file: indented, UTF-8; non-JSON values as text."""
    return orjson.dumps(status, default=str, option=_DUMP_OPTIONS)


def load_status_file(path: str | Path) -> StatusData | None:
    """Parse one status file; ``None`` if absent, :class:`StatusCorrupt` if not a status,
    :class:`StatusError` if it is not a regular file (a directory, a FIFO, a device)."""
    try:
        raw = read_regular_file(path)
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        # Not StatusCorrupt, which readers may skip: reading what is there could block (a FIFO)
        # or never end (a link to /dev/zero), and no scrapeflow run makes one.
        raise StatusError(
            f"{path} is {exc.kind}, not a status file; move it out of the directory"
        ) from None
    return parse_status(raw, where=str(path))


def parse_status(raw: bytes | str, *, where: str) -> StatusData:
    """A status from its JSON (what :func:`dump_status` wrote); :class:`StatusCorrupt` naming
    ``where`` (a file, a table row) if it is not one."""
    try:
        status = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StatusCorrupt(f"{where} is not valid JSON ({exc}); it was left untouched") from exc
    if not isinstance(status, dict) or not isinstance(status.get("params"), dict):
        raise StatusCorrupt(f"{where} is not a scrapeflow status (no 'params' object)")
    return status


def check_task_set(
    directory: Path | str,
    tasks: Iterable[tuple[str, Params]],
    *,
    executors: Sequence[str],
    force: Sequence[str] | None = None,
) -> None:
    """Refuse, before anything is written, what would stop a run halfway.

    Raises :class:`InputError` for a ``force`` name that is none of ``executors`` (nor
    ``"all"``); :class:`StatusError` for a directory that cannot hold status files or that holds
    only statuses of another task set; :class:`TaskConflict` for a status of one of ``tasks``
    with other params; :class:`StatusCorrupt` for a status of this task set that does not parse.
    Creates nothing: the run's store makes the directory.
    """
    unknown = [name for name in force or [] if name not in (*executors, "all")]
    if unknown:
        raise InputError(
            f"--force names no executor of this run: {', '.join(unknown)} "
            f"({', '.join([*executors, 'all'])})"
        )
    directory = Path(directory)
    if not directory.exists():
        parent = next((p for p in directory.parents if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise StatusError(
                f"cannot write status files to {directory}: {parent} is not a writable directory"
            )
        return
    if not directory.is_dir():
        raise StatusError(f"{directory} exists and is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StatusError(f"cannot write status files to {directory}: permission denied")
    store = JsonDirStore(directory)
    existing = set(_keys_in(directory))
    if not existing:
        return
    shared = 0
    for key, params in tasks:
        if key not in existing:
            continue
        shared += 1
        status = load_status_file(store.path(key))  # StatusCorrupt names the file
        if status is not None and status.get("params") != params:
            shown = params.get("url", params)
            raise TaskConflict(
                f"{store.path(key)} is for other params than {shown!r}; use another --dir"
            )
    if not shared:
        raise StatusError(
            f"{directory} holds {len(existing):,} status files of a different task set "
            "(none is for a task of this list); use another --dir"
        )


SkipCallback = Callable[[Path, StatusError], None]


def iter_statuses(
    directory: Path | str, *, on_skip: SkipCallback | None = None
) -> Iterator[StatusData]:
    """Every status in ``directory``, one at a time (memory stays flat for huge runs).

    A ``*.status.json`` that is not a scrapeflow status raises :class:`StatusCorrupt`, or,
    with ``on_skip``, is reported to it and skipped.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise StatusError(f"{directory} is not a directory")
    store = JsonDirStore(directory)
    for key in _keys_in(directory):
        path = store.path(key)
        try:
            status = load_status_file(path)
        except (StatusCorrupt, OSError) as exc:
            if on_skip is None:
                raise
            on_skip(path, exc if isinstance(exc, StatusError) else StatusError(str(exc)))
            continue
        if status is not None:  # removed between listing and reading
            yield status


def _warn_skipped(path: Path, problem: StatusError) -> None:
    _log.warning("status.skipped", file=str(path), problem=str(problem))


def executor_names(status: StatusData) -> list[str]:
    """The executors recorded in ``status``, in the order they appear."""
    return [
        k[: -len("_status")]
        for k in status
        if k.endswith("_status") and k not in _RESERVED_KEYS and k[: -len("_status")] in status
    ]


def summarize(
    directory: Path | str, *, on_skip: SkipCallback | None = None
) -> dict[str, Counter[str]]:
    """Per executor, how many tasks ended with each status message. No pandas needed.

    >>> summarize("/tmp/run")  # doctest: +SKIP
    {'scrape': Counter({'SUCCESS': 980, 'ERROR HTTPStatusError::HTTP response 404': 20})}
    """
    summary: dict[str, Counter[str]] = {}
    for status in iter_statuses(directory, on_skip=on_skip):
        for name in executor_names(status):
            summary.setdefault(name, Counter())[str(status[f"{name}_status"])] += 1
    return summary


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise MissingExtra("read_status and status_summary", "pandas") from exc
    return pandas


def read_status(directory: Path) -> pd.DataFrame:
    """All status files in ``directory`` as a DataFrame: one row per task, indexed by name.

    Files that are not scrapeflow statuses are skipped, each with a logged warning.
    """
    pandas = _pandas()
    statuses = list(iter_statuses(directory, on_skip=_warn_skipped))
    frame: pd.DataFrame = pandas.DataFrame.from_records(statuses)
    if not frame.empty:
        frame = frame.set_index("name", drop=False).sort_index()
    return frame


def status_summary(directory: Path) -> pd.DataFrame:
    """Per executor (columns), the histogram of status messages (rows) in ``directory``."""
    pandas = _pandas()
    summary = summarize(directory, on_skip=_warn_skipped)
    frame: pd.DataFrame = pandas.DataFrame(
        {name: pandas.Series(counts) for name, counts in summary.items()}
    )
    frame = frame.fillna(0).astype(int).sort_index()
    return frame
