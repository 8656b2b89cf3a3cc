"""Shared types of the storage package: what ``put`` returns, what an index records, the protocol
an index implements, and the checks every name that becomes part of a path goes through."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from scrapeflow.errors import ConfigError, InputError

__all__ = [
    "Index",
    "IndexEntry",
    "StoredContent",
    "check_name",
    "iso_utc",
    "sha384_hex",
    "split_lines",
    "unique_lines",
]

# Names that become one path segment (program, fetch id, index name, index key): no "/", no
# leading dot (no ".", "..", hidden files), nothing a shell or a URL would need to quote.
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
_FORBIDDEN_IN_FIELD = re.compile(r"[\t\r\n]")


def check_name(what: str, value: str) -> str:
    """``value`` if it is a safe path segment, else :class:`ConfigError` naming ``what``."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or value.endswith(".d"):
        raise ConfigError(
            f"{what} {value!r} is not usable in a storage path: use letters, digits, '.', '_' "
            "and '-' (not first '.', not ending in '.d'), at most 200 characters"
        )
    return value


def sha384_hex(data: bytes | str) -> str:
    """SHA-384 of ``data`` (a ``str`` is UTF-8 encoded), hex: the key of content and of URLs.

    >>> sha384_hex(b"")[:16]
    '38b060a751ac9638'
    """
    return hashlib.sha384(data.encode() if isinstance(data, str) else data).hexdigest()


_last_formatted: tuple[datetime | None, str] = (None, "")


def iso_utc(moment: datetime) -> str:
    """``moment`` as ISO 8601 in UTC with microseconds and a ``Z``: ``2024-05-01T08:00:00.000000Z``.

    A naive datetime is refused: a time without a zone cannot be put in UTC without guessing.
    """
    global _last_formatted
    last, text = _last_formatted  # a stored page's start is formatted for each index and its
    if moment is last:  # log line, one after the other: once is enough
        return text
    text = _format_utc(moment)
    _last_formatted = (moment, text)
    return text


def _format_utc(moment: datetime) -> str:
    if moment.tzinfo is not UTC:
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise InputError(
                f"datetime {moment.isoformat()} has no time zone; give an aware datetime"
            )
        moment = moment.astimezone(UTC)
    # isoformat, not strftime: a fetcher writes four of these per page, and it is twice as fast.
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"


def split_lines(data: bytes) -> list[bytes]:
    """The complete, non-empty lines of ``data``, without newlines. Text after the last newline
    is a line whose write is still under way (or was cut by a crash): it is not a line yet."""
    lines = data.split(b"\n")
    lines.pop()
    return [line for line in lines if line]


def unique_lines(lines: Iterable[bytes]) -> list[bytes]:
    """``lines`` in order, each exact duplicate after the first dropped."""
    seen: set[bytes] = set()
    out: list[bytes] = []
    for line in lines:
        if line not in seen:
            seen.add(line)
            out.append(line)
    return out


@dataclass(frozen=True, slots=True)
class StoredContent:
    """What :meth:`BlobStore.put` did: the body's SHA-384 (hex), where it is, and whether this
    call created the object (``False``: identical content was already stored, nothing written).
    """

    checksum: str
    location: str
    created: bool


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One fetch, as the indexes record it.

    ``content_location`` is :meth:`BlobStore.location` of ``checksum``; ``parser_name`` is the
    processor that will read the content (``Pubmed_XML``, ``RSS``) and ``parser_meta`` its extra
    information, which the shipped indexes do not record but custom ones may. ``fetch_id`` names
    the run (it prefixes S3 line objects, so a run's lines can be found).
    """

    checksum: str
    content_location: str
    requested_link: str
    final_link: str
    fetch_started: datetime
    fetch_duration_ns: int
    parser_name: str
    fetch_id: str
    parser_meta: Mapping[str, Any] = field(default_factory=dict)

    def fields(self, *values: str) -> str:
        """Join ``values`` with tabs into one index line, refusing a tab or newline inside one."""
        line = "\t".join(values)
        # One look at the joined line (as many tabs as joins, no line break), not one per field.
        if line.count("\t") != len(values) - 1 or "\n" in line or "\r" in line:
            bad = next(v for v in values if _FORBIDDEN_IN_FIELD.search(v))
            raise InputError(
                f"index field {bad!r} of {self.requested_link!r} holds a tab or a newline"
            )
        return line


@runtime_checkable
class Index(Protocol):
    """An index: a name, and lines under keys.

    ``add`` records one fetch under the key the index derives from it; ``lines`` returns every
    line recorded under ``key`` (exact duplicates once, see :mod:`scrapeflow.storage`), and
    ``compact`` folds an S3 key's line objects into its base object (a no-op on local disk),
    returning how many it folded. Register an implementation with :func:`register_index`.
    """

    name: str

    async def add(self, entry: IndexEntry) -> None:
        """Record ``entry``. Never loses or overwrites another writer's line."""
        ...

    async def lines(self, key: str) -> list[str]:
        """Every line recorded under ``key``, without the newline; ``[]`` if none."""
        ...

    async def compact(self, key: str) -> int:
        """Fold ``key``'s line objects into its base object; how many were folded."""
        ...
