"""One log file per launch (the seed's habit): JSON lines, its name says whose and when.

``{log_dir}/{YYYYmmddTHHMMSSZ}_customer-{external id}_{launch id}.log``. Values are scrubbed of
URL credentials like every scrapeflow log; scrapers never hand it a password.
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

__all__ = ["LaunchLog"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class LaunchLog:
    """Appends JSON lines to the launch's file (or nowhere, without a directory)."""

    def __init__(self, log_dir: Path | None, *, external_id: str, launch_id: str) -> None:
        self.path: Path | None = None
        self._file: IO[bytes] | None = None
        self._closed = False
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            customer = _UNSAFE.sub("_", external_id)[:60]
            self.path = log_dir / f"{stamp}_customer-{customer}_{launch_id}.log"
            if not os.access(log_dir, os.W_OK):
                raise ConfigError(f"the log directory {log_dir} is not writable")

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
            self._file = self.path.open("ab")
        record = {"at": datetime.now(UTC).isoformat(), "event": event}
        record.update({k: redact_value(v) for k, v in fields.items()})
        self._file.write(orjson.dumps(record, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None
