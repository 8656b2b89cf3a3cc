"""Item exports that a crash cannot cut or double: JSON lines, CSV and Parquet.

Each export keeps a journal in the crawl's directory: one line per page whose items are in
the file, with the file's size after them. Items are appended to the file, then the page's
line to the journal. Opened again (a resumed crawl), the file is cut back to the size the
journal's last whole line names (a page written but not journalled when the process died is
written again, once), and a page the journal lists is never written twice. A file smaller
than the journal says (deleted, replaced) is started over from the items stored with the pages.

Parquet cannot be appended to: its items go to a JSON-lines spool kept the same way, and the
Parquet file is written whole from it (to a temporary file, then renamed) when the crawl ends.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scrapeflow._util.atomic import make_private_dirs
from scrapeflow.errors import ConfigError, MissingExtra

__all__ = ["Export", "ExportFormat", "ItemExporter"]

ExportFormat = Literal["jsonl", "csv", "parquet"]
_SUFFIXES: dict[str, ExportFormat] = {
    ".jsonl": "jsonl",
    ".jl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}


@dataclass(frozen=True, slots=True)
class Export:
    """Where items go: ``path``, in ``format`` (by default from the suffix: ``.jsonl``,
    ``.csv``, ``.parquet``). ``fields`` chooses and orders a CSV's columns (by default the
    first item's keys)."""

    path: Path
    format: ExportFormat | None = None
    fields: Sequence[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        if self.format is None:
            found = _SUFFIXES.get(self.path.suffix.lower())
            if found is None:
                raise ConfigError(
                    f"cannot tell the export format of {self.path}: name it .jsonl, .csv or "
                    ".parquet, or give format="
                )
            object.__setattr__(self, "format", found)
        elif self.format not in ("jsonl", "csv", "parquet"):
            raise ConfigError(f"unknown export format {self.format!r}: jsonl, csv or parquet")
        if self.format == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise MissingExtra("Parquet exports", "parquet") from None

    @classmethod
    def of(cls, target: Export | str | os.PathLike[str]) -> Export:
        return target if isinstance(target, Export) else cls(Path(target))


class ItemExporter:
    """One export, open for a crawl: :meth:`write` a page's items, :meth:`close` at the end."""

    def __init__(self, export: Export, journal_dir: Path) -> None:
        self.export = export
        where = hashlib.sha1(
            str(export.path.resolve()).encode(), usedforsecurity=False
        ).hexdigest()[:12]
        stem = f"{export.path.name}-{where}"
        self.journal_path = journal_dir / f"{stem}.journal"
        self.data_path = (
            journal_dir / f"{stem}.spool.jsonl" if export.format == "parquet" else export.path
        )
        self.exported: set[str] = set()
        self.items = 0
        """Items in the file (all runs)."""
        self._fields: list[str] | None = list(export.fields) if export.fields else None
        self._header_written = False
        self._data = -1
        self._journal = -1
        self._size = 0
        make_private_dirs(journal_dir)
        if self.data_path.parent != journal_dir:
            self.data_path.parent.mkdir(parents=True, exist_ok=True)
        self._open()

    def _open(self) -> None:
        keys, size, items, header = self._read_journal()
        try:
            actual = self.data_path.stat().st_size
        except FileNotFoundError:
            actual = 0
        if actual < size:  # the file was deleted or replaced: start over from the pages
            keys, size, items, header = set(), 0, 0, None
            self.journal_path.unlink(missing_ok=True)
        self._data = os.open(self.data_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.ftruncate(self._data, size)
        os.lseek(self._data, size, os.SEEK_SET)
        self._journal = os.open(
            self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        self.exported, self._size, self.items = keys, size, items
        if header is not None:
            self._fields, self._header_written = header, True

    def _read_journal(self) -> tuple[set[str], int, int, list[str] | None]:
        keys: set[str] = set()
        size = items = 0
        header = None
        try:
            text = self.journal_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return keys, size, items, header
        whole = text[: text.rfind("\n") + 1]  # a line the process died in the middle of: not
        for line in whole.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "K":
                key, count, offset = rest.split(" ")
                keys.add(key)
                items += int(count)
                size = int(offset)
            elif kind == "H":
                offset, fields = rest.split(" ", 1)
                header, size = json.loads(fields), int(offset)
        if len(whole) < len(text):  # drop the cut line, so later lines start on their own
            with open(self.journal_path, "r+b") as journal:
                journal.truncate(len(whole.encode()))
        return keys, size, items, header

    def write(self, key: str, items: list[dict[str, Any]]) -> bool:
        """Append ``items`` of page ``key``; False (nothing written) when they are in already."""
        if key in self.exported:
            return False
        data = self._encode(items)
        if data:
            self._append(self._data, data)
            self._size += len(data)
        self._append(self._journal, f"K {key} {len(items)} {self._size}\n".encode())
        self.exported.add(key)
        self.items += len(items)
        return True

    def _encode(self, items: list[dict[str, Any]]) -> bytes:
        if not items:
            return b""
        if self.export.format != "csv":
            return "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items).encode()
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        if not self._header_written:
            self._fields = self._fields or list(items[0])
            writer.writerow(self._fields)
            header = buffer.getvalue().encode()
            self._append(self._data, header)
            self._size += len(header)
            self._append(self._journal, f"H {self._size} {json.dumps(self._fields)}\n".encode())
            self._header_written = True
            buffer = io.StringIO()
            writer = csv.writer(buffer)
        fields = self._fields or []
        for item in items:
            writer.writerow([_cell(item.get(f)) for f in fields])
        return buffer.getvalue().encode()

    @staticmethod
    def _append(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def close(self) -> None:
        """Close the files; a Parquet export is written whole from its spool."""
        for fd in (self._data, self._journal):
            if fd >= 0:
                os.close(fd)
        self._data = self._journal = -1
        if self.export.format == "parquet":
            self._write_parquet()

    def _write_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        with open(self.data_path, encoding="utf-8") as spool:
            rows = [json.loads(line) for line in spool if line.strip()]
        columns: dict[str, None] = {}
        for row in rows:  # every item's fields, in the order they first appear
            columns.update(dict.fromkeys(row))
        data = {c: [row.get(c) for row in rows] for c in columns}
        arrays = {}
        for name, values in data.items():
            try:
                arrays[name] = pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                # Values of several types in one field ({"n": 5} here, {"n": "abc"} there):
                # a column of JSON texts, rather than no file at all.
                arrays[name] = pa.array(
                    [None if v is None else json.dumps(v, ensure_ascii=False) for v in values]
                )
        table = pa.table(arrays)
        temp = self.export.path.with_name(f".{self.export.path.name}.sf-tmp-{os.getpid()}")
        try:
            pq.write_table(table, temp)
            os.replace(temp, self.export.path)
        finally:
            temp.unlink(missing_ok=True)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value
