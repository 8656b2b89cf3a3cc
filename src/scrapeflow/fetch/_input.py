"""What to fetch: a URL list, one item a line, and the shard of it this fetcher takes.

Three formats, told apart by the file's extension or, failing that, by each line:

* plain text: one URL a line;
* TSV (``.tsv``): ``URL <TAB> processor name <TAB> processor meta (JSON object)``, the last two
  optional — the seed's "processor meta information" (``Pubmed_XML``, ``RSS``...);
* JSON lines (``.jsonl``): ``{"url": ..., "processor": ..., "meta": {...}}``.

Blank lines and lines starting with ``#`` are skipped and do not count. ``offset`` and
``limit`` pick the shard by item number (0-based), like gofetch's FETCH_OFFSET/FETCH_LIMIT.
The whole file is checked before anything is fetched; the first bad line is named. The list must
be a regular file: a FIFO or a device would hang the run or never end (and a resume reads the
list again).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapeflow.errors import InputError
from scrapeflow.urllist import check_url, list_lines

__all__ = ["FetchItem", "read_items"]


@dataclass(frozen=True, slots=True)
class FetchItem:
    """One URL to fetch, its position in the list, and what processes it downstream."""

    index: int
    url: str
    processor: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def read_items(path: Path | str, *, offset: int = 0, limit: int | None = None) -> list[FetchItem]:
    """The items ``offset`` .. ``offset + limit - 1`` of the list at ``path``, checked."""
    path = Path(path)
    if offset < 0 or (limit is not None and limit < 1):
        raise InputError(f"offset must be >= 0 and limit >= 1 (got {offset}, {limit})")
    _check_regular_file(path)
    items: list[FetchItem] = []
    index = 0
    jsonl = path.suffix == ".jsonl"
    for lineno, line in list_lines(path):
        item = _parse(path, lineno, line, index, jsonl=jsonl)
        if index >= offset and (limit is None or index < offset + limit):
            items.append(item)
        index += 1
    if index == 0:
        raise InputError(f"{path}: no URL in the file")
    return items


class _Where:
    """``path:line`` for an error message, made only when one is raised (read_items checks
    every line of a list that may hold millions)."""

    __slots__ = ("lineno", "path")

    def __init__(self, path: Path, lineno: int) -> None:
        self.path, self.lineno = path, lineno

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}"


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _check_regular_file(path: Path) -> None:
    """Refuse what is not a regular file before opening it: opening a FIFO blocks until a
    writer comes, and ``/dev/zero`` never ends."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a directory, not a URL list")
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise InputError(f"{path}: is {kind}, not a URL list file")


def _parse(path: Path, lineno: int, line: str, index: int, *, jsonl: bool) -> FetchItem:
    where = _Where(path, lineno)
    if jsonl or line.lstrip().startswith("{"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not a JSON object ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("url"), str):
            raise InputError(f'{where}: a JSON line needs a "url" string')
        url, processor, meta = row["url"].strip(), row.get("processor", ""), row.get("meta", {})
    else:
        parts = line.split("\t")
        if len(parts) > 3:
            raise InputError(f"{where}: a TSV line has at most 3 fields (url, processor, meta)")
        url = parts[0].strip()
        processor = parts[1].strip() if len(parts) > 1 else ""
        meta_text = parts[2].strip() if len(parts) > 2 else ""
        try:
            meta = json.loads(meta_text) if meta_text else {}
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: the processor meta is not JSON ({exc.msg})") from None
    if not isinstance(processor, str):
        raise InputError(f"{where}: the processor name must be a string")
    if any(c in processor for c in "\t\r\n"):
        raise InputError(f"{where}: the processor name holds a tab or a line break")
    if not isinstance(meta, dict):
        raise InputError(f"{where}: the processor meta must be a JSON object")
    if (problem := check_url(url)) is not None:
        shown = url if len(url) <= 80 else url[:77] + "..."
        raise InputError(f"{where}: {problem}: {shown!r}")
    return FetchItem(index=index, url=url, processor=processor, meta=meta)
