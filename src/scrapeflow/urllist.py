"""URL lists: one URL per line, checked before anything is fetched.

Blank lines and lines starting with ``#`` are ignored. Each URL becomes a task whose key is the
MD5 of the URL (the seed's example ``name``) and whose params are ``{"url": url}``. A URL listed
twice is one task.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yarl

from scrapeflow.errors import InputError
from scrapeflow.status import Params

__all__ = ["UrlList", "check_url", "list_lines", "url_key"]


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
    if any(c.isspace() for c in url):
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
    comment, without its line end; :class:`InputError` names a file that cannot be read."""
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a URL list") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    with handle:
        try:
            for lineno, line in enumerate(handle, start=1):
                text = line.rstrip("\r\n")
                if text.strip() and not text.lstrip().startswith("#"):
                    yield lineno, text
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from None


def _lines(path: Path, *, check: bool) -> Iterator[tuple[int, str]]:
    for lineno, text in list_lines(path):
        url = text.strip()
        if check and (problem := check_url(url)) is not None:
            shown = url if len(url) <= 80 else url[:77] + "..."
            raise InputError(f"{path}:{lineno}: {problem}: {shown!r}")
        yield lineno, url
