"""URL lists: one URL per line, checked before anything is fetched.

Blank lines and lines starting with ``#`` are ignored; a line may be 64 KiB long at most
(:data:`MAX_LINE_BYTES`), and the file must be a regular file (it is read twice). Each URL
becomes a task whose key is the MD5 of the URL (the seed's example ``name``) and whose params
are ``{"url": url}``. A URL listed twice is one task.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import yarl

from scrapeflow._util.atomic import file_kind
from scrapeflow.errors import InputError
from scrapeflow.status import Params

__all__ = ["MAX_LINE_BYTES", "UrlList", "check_url", "list_lines", "open_regular_file", "url_key"]

MAX_LINE_BYTES = 64 * 1024
"""The longest line a list file may hold. Browsers take URLs up to about 2 MB, but servers
refuse far less (nginx, Apache: 8 KB; CDNs: 16-32 KB), so a longer URL could never be fetched;
and a task's URL is kept in its status file and in memory for every task in flight (10,000 at
most): 64 KiB each stays bounded. A longer line is refused, named by its number."""


_WHITESPACE = re.compile(r"\s")  # str.isspace's characters: one search, not a loop per character


def url_key(url: str) -> str:
    """The task key of ``url``: its MD5, hex."""
    return hashlib.md5(url.encode(), usedforsecurity=False).hexdigest()


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be fetched, or ``None`` when it is a usable http(s) URL."""
    try:
        parsed = yarl.URL(url)
    except (TypeError, ValueError) as exc:
        return f"not a URL ({exc})"
    if parsed.scheme not in {"http", "https"}:
        return "not an http(s) URL"
    if not parsed.host:
        return "URL has no host"
    if _WHITESPACE.search(url):
        return "URL contains whitespace"
    return None


@dataclass(frozen=True, slots=True)
class UrlList:
    """A checked URL list file. ``count`` is the number of distinct URLs."""

    path: Path
    count: int
    duplicates: int

    @classmethod
    def open(cls, path: Path | str) -> UrlList:
        """Read and check every line of ``path``; :class:`InputError` names the first bad one."""
        path = Path(path)
        seen: set[str] = set()
        duplicates = 0
        for _lineno, url in _lines(path, check=True):
            key = url_key(url)
            if key in seen:
                duplicates += 1
            seen.add(key)
        if not seen:
            raise InputError(f"{path}: no URL in the file")
        return cls(path=path, count=len(seen), duplicates=duplicates)

    def keys(self) -> Iterator[str]:
        """The task keys, in file order, once each."""
        for key, _params in self.tasks():
            yield key

    def tasks(self) -> Iterator[tuple[str, Params]]:
        """``(key, {"url": url})`` per distinct URL, read lazily from the file."""
        seen: set[str] = set()
        for _lineno, url in _lines(self.path, check=False):
            key = url_key(url)
            if key not in seen:
                seen.add(key)
                yield key, {"url": url}


def list_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line of a list file that is not blank or a ``#``
    comment, without its line end; :class:`InputError` names a file that cannot be read, is
    not a regular file (a FIFO, a device: the list is read twice, and would block or never
    end), is not UTF-8, or has a line longer than :data:`MAX_LINE_BYTES`.
    """
    with open_regular_file(path, what="URL list") as handle:
        lineno = 0
        while True:
            # Bounded reads: a 50 MB "line" is refused after reading 64 KiB of it.
            raw = handle.readline(MAX_LINE_BYTES + 2)
            if not raw:
                return
            lineno += 1
            content = raw.rstrip(b"\r\n")
            if len(content) > MAX_LINE_BYTES:
                raise InputError(
                    f"{path}:{lineno}: line longer than {MAX_LINE_BYTES // 1024} KiB "
                    "(no server takes a URL that long)"
                )
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not UTF-8 text ({exc.reason})") from None
            if text.strip() and not text.lstrip().startswith("#"):
                yield lineno, text


@contextmanager
def open_regular_file(path: Path, *, what: str) -> Iterator[BinaryIO]:
    """``path`` opened for reading in binary, or :class:`InputError` if it cannot be read or
    is not a regular file (``what`` names the file in the message: "URL list").

    Never blocks: a FIFO is opened without waiting for a writer, then refused; so is a device
    such as ``/dev/zero``, which would never end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{path}: is a directory, not a {what}")
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: is {file_kind(mode)}; a {what} must be a regular file")
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        try:
            yield handle
        except OSError as exc:
            raise InputError(f"{path}: cannot read the {what} ({exc.strerror})") from None


def _lines(path: Path, *, check: bool) -> Iterator[tuple[int, str]]:
    for lineno, text in list_lines(path):
        url = text.strip()
        if check and (problem := check_url(url)) is not None:
            shown = url if len(url) <= 80 else url[:77] + "..."
            raise InputError(f"{path}:{lineno}: {problem}: {shown!r}")
        yield lineno, url
