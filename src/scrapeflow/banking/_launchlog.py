"""One log file per launch (the seed's habit): JSON lines, its name says whose and when.

``{log_dir}/{YYYYmmddTHHMMSSZ}_customer-{external id}_{launch id}.log``. Values are scrubbed of
URL credentials like every scrapeflow log; scrapers never hand it a password. The files are the
owner's only (0600), and so are the directories made for them (0700): they name customers,
logins and banks. A directory that already exists keeps its mode.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from scrapeflow._util.redact import redact_value
from scrapeflow.errors import ConfigError

__all__ = ["LaunchLog", "prepare_log_dir"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def prepare_log_dir(log_dir: Path) -> None:
    """Make ``log_dir`` (and its missing parents, owner-only) and check launches can write there;
    :class:`~scrapeflow.errors.ConfigError` naming it when they cannot."""
    missing: list[Path] = []
    for folder in (log_dir, *log_dir.parents):
        if folder.exists() or folder.is_symlink():
            break
        missing.append(folder)
    try:
        for folder in reversed(missing):
            folder.mkdir(mode=0o700)  # not mkdir(parents=True): that ignores the mode of parents
    except FileExistsError:
        pass  # made by someone else meanwhile: checked below
    except OSError as exc:
        raise ConfigError(
            f"cannot make the log directory {log_dir}: {exc.strerror or type(exc).__name__}"
        ) from None
    if not log_dir.is_dir():
        raise ConfigError(f"the log directory {log_dir} is not a directory")
    if not os.access(log_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"the log directory {log_dir} is not writable")


class LaunchLog:
    """Appends JSON lines to the launch's file (or nowhere, without a directory)."""

    def __init__(self, log_dir: Path | None, *, external_id: str, launch_id: str) -> None:
        self.path: Path | None = None
        self._file: IO[bytes] | None = None
        self._closed = False
        if log_dir is not None:
            prepare_log_dir(log_dir)
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            customer = _UNSAFE.sub("_", external_id)[:60]
            self.path = log_dir / f"{stamp}_customer-{customer}_{launch_id}.log"

    def write(self, event: str, **fields: Any) -> None:
        if self.path is None:
            return
        if self._closed:  # a straggler (an access finishing after a stop): append, close
            self._closed = False
            try:
                self.write(event, **fields)
            finally:
                self.close()
            return
        if self._file is None:  # opened on the first line: a refused launch leaves no file
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
            self._file = os.fdopen(os.open(self.path, flags, 0o600), "ab")
        record = {"at": datetime.now(UTC).isoformat(), "event": event}
        record.update({k: redact_value(v) for k, v in fields.items()})
        self._file.write(orjson.dumps(record, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None
