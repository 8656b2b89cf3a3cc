"""Indexes: one line per fetch under a key, and the registry that names them (gofetch's
"adding new indexes": implement :class:`Index`, register a factory, document it).

Shipped:

* ``sha384_checksum`` (canonical, always on): key = content checksum, line =
  ``{content_location}\\t{requested_link}\\t{final_link}\\t{fetch_start_datetime}\\t``
  ``{fetch_duration_ns}\\t{parser_name}``;
* ``url_sha384``: key = SHA-384 of the requested URL, line =
  ``{fetch_start_datetime}\\t{checksum}\\t{content_location}\\t{final_link}\\t{parser_name}``;
  on local disk in one append-only file per shard (``url_sha384/ab.tsv``, :mod:`._shards`),
  on S3 in a line set per URL (``url_sha384/ab/ab…``).

The checksum index lives at ``{root}/{program}/index/{name}/{key}`` and stores its lines through
the backend's line sets, which never lose a line (see :mod:`scrapeflow.storage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Callable, Iterable

from scrapeflow.errors import ConfigError, InputError
from scrapeflow.storage._shards import (
    SHARD_SUFFIX,
    append_record,
    compact_shard,
    read_shard,
    records_of,
)
from scrapeflow.storage._store import BlobStore
from scrapeflow.storage._types import (
    Index,
    IndexEntry,
    check_name,
    iso_utc,
    sha384_hex,
    split_lines,
    unique_lines,
)

__all__ = [
    "CANONICAL_INDEX",
    "ChecksumIndex",
    "IndexFactory",
    "IndexRegistry",
    "LineIndex",
    "UrlIndex",
    "index_names",
    "make_indexes",
    "register_index",
]

CANONICAL_INDEX = "sha384_checksum"
_OLD_KEY = re.compile(r"[0-9a-f]{96}")  # a by-URL file of the layouts with a file per URL

IndexFactory = Callable[[BlobStore], Index]


class LineIndex:
    """Base of indexes that add one tab-separated line per fetch under a key derived from it.

    A subclass sets ``name`` and implements :meth:`key_of` and :meth:`line_of`; storage,
    concurrency and compaction come from here::

        class ByHost(LineIndex):
            name = "host"

            def key_of(self, entry):
                return yarl.URL(entry.requested_link).host

            def line_of(self, entry):
                return entry.fields(entry.checksum, entry.requested_link)

        register_index("host", ByHost)
    """

    name: str = ""
    fan_out: int = 0
    """How many leading characters of a key name a subdirectory its file goes in (0: none, the
    file is ``{index}/{key}``; 2: ``{index}/{key[:2]}/{key}``). An index with many keys sets 2:
    256 directories instead of one holding a file per key, in which a local filesystem
    serialises concurrent creates (on ext4, two fetch processes creating files in one directory
    spent 3 to 5 times as long per file as in two directories). :class:`UrlIndex` goes further
    on local disk: no file per key at all."""

    def __init__(self, store: BlobStore) -> None:
        check_name("index name", self.name)
        self.store = store
        self._fetch_ids: set[str] = set()
        self._prefix = store.key("index", self.name)
        self._key_what = f"{self.name} index key"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r})"

    def key_of(self, entry: IndexEntry) -> str:
        """The key ``entry`` is recorded under."""
        raise NotImplementedError

    def line_of(self, entry: IndexEntry) -> str:
        """The line recorded for ``entry`` (no newline; build it with ``entry.fields``)."""
        raise NotImplementedError

    def location(self, key: str) -> str:
        """Where ``key``'s base object is (S3 line objects are under ``{location}.d/``)."""
        return self.store._backend.location(self._key(key))

    async def add(self, entry: IndexEntry) -> None:
        """Record one line for ``entry``. Concurrent writers, anywhere, never lose a line."""
        key, line = self._record(entry)
        await self.store._backend.add_line(self._key(key), (line + "\n").encode(), entry.fetch_id)

    def _record(self, entry: IndexEntry) -> tuple[str, str]:
        """``entry``'s key and line, checked."""
        if entry.fetch_duration_ns < 0:
            raise InputError(f"fetch duration of {entry.requested_link!r} is negative")
        fetch_id = entry.fetch_id
        if fetch_id not in self._fetch_ids:  # a run has one: checked once, not per line
            self._fetch_ids.add(check_name("fetch id", fetch_id))
        return self.key_of(entry), self.line_of(entry)

    async def lines(self, key: str) -> list[str]:
        """Every line under ``key``, each distinct line once, oldest first where known."""
        return [line.decode(errors="replace") for line in unique_lines(await self._raw(key))]

    async def _raw(self, key: str) -> list[bytes]:
        backend = self.store._backend
        raw = await backend.read_lines(self._key(key))
        if self.fan_out:  # lines a store written before the fan-out keeps at the flat key
            raw = await backend.read_lines(self._flat_key(key)) + raw
        return raw

    async def compact(self, key: str) -> int:
        """Fold ``key``'s S3 line objects into its base object; how many were folded (0 on
        local disk, where lines are appended in place). Safe alongside writers and other
        compactions."""
        backend = self.store._backend
        folded = await backend.compact_lines(self._key(key))
        if self.fan_out:
            folded += await backend.compact_lines(self._flat_key(key))
        return folded

    def _key(self, key: str) -> str:
        key = check_name(self._key_what, key)
        if self.fan_out:
            return f"{self._prefix}/{key[: self.fan_out]}/{key}"
        return f"{self._prefix}/{key}"

    def _flat_key(self, key: str) -> str:
        return f"{self._prefix}/{check_name(self._key_what, key)}"


class ChecksumIndex(LineIndex):
    """The canonical index (gofetch's): by content checksum, one line per fetch of it."""

    name = CANONICAL_INDEX

    def key_of(self, entry: IndexEntry) -> str:
        return entry.checksum

    def line_of(self, entry: IndexEntry) -> str:
        return entry.fields(
            entry.content_location,
            entry.requested_link,
            entry.final_link,
            iso_utc(entry.fetch_started),
            str(entry.fetch_duration_ns),
            entry.parser_name,
        )


class UrlIndex(LineIndex):
    """By requested URL (key: its SHA-384): what each fetch of a URL returned.

    On local disk, the lines of all the URLs whose key begins with the same two characters
    share one append-only file, ``url_sha384/{key[:2]}.tsv``, a ``{key}\\t{line}`` record a
    line (:mod:`._shards`): a fetch of a URL list makes 256 files at most, not one per URL. On
    S3, which has no append and no cost per object name, each URL keeps its own line set at
    ``url_sha384/{key[:2]}/{key}`` (see :attr:`LineIndex.fan_out`). A local store written with
    a file per URL (``url_sha384/{key[:2]}/{key}``, or the older flat ``url_sha384/{key}``) is
    read as well, and :meth:`compact` folds those files into the shard file.

    >>> lines = await UrlIndex(store).lines(UrlIndex.key_for(url))  # doctest: +SKIP
    """

    name = "url_sha384"
    fan_out = 2
    _KEY = rb"[0-9a-f]{96}"
    _LINE = rb"[^\t\n]*(?:\t[^\t\n]*){4}"  # five fields: one torn record plus a whole one has more

    def __init__(self, store: BlobStore) -> None:
        super().__init__(store)
        directory = store._backend.local_path(self._prefix)  # None on S3
        self._directory = directory
        self._made_dirs: set[str] = set()

    @staticmethod
    def key_for(url: str) -> str:
        """The key of ``url`` in this index."""
        return sha384_hex(url)

    def location(self, key: str) -> str:
        """Where ``key``'s lines are: its shard file on local disk, its base object on S3."""
        if self._directory is None:
            return super().location(key)
        return self._shard(key)

    async def add(self, entry: IndexEntry) -> None:
        if self._directory is None:
            await super().add(entry)
            return
        key, line = self._record(entry)
        record = f"{check_name(self._key_what, key)}\t{line}\n".encode()
        await append_record(self._shard(key), record, self._made_dirs)

    async def _raw(self, key: str) -> list[bytes]:
        old = await super()._raw(key)  # first: see compact_shard on why this order
        if self._directory is None:
            return old
        data = read_shard(self._shard(key))
        return old + [line for _, line in records_of(data, re.escape(key.encode()), self._LINE)]

    async def compact(self, key: str) -> int:
        """On S3, fold ``key``'s line objects into its base object. On local disk, rewrite the
        shard file of ``key`` (every URL whose key begins with the same two characters) without
        torn records or duplicate lines, with the files of the older layouts of that shard
        folded in and then deleted. Returns how many objects or files it folded. Atomic, and
        safe alongside writers, readers and other compactions."""
        if self._directory is None:
            return await super().compact(key)
        shard = check_name(self._key_what, key)[: self.fan_out]
        directory = self._directory

        def old_files() -> list[tuple[str, str]]:
            found: list[tuple[str, str]] = []
            for folder in (f"{directory}/{shard}", directory):
                with (
                    contextlib.suppress(FileNotFoundError, NotADirectoryError),
                    os.scandir(folder) as entries,
                ):
                    found += [
                        (e.name, e.path)
                        for e in entries
                        if e.name.startswith(shard) and _OLD_KEY.fullmatch(e.name) and e.is_file()
                    ]
            return found

        return await asyncio.to_thread(
            compact_shard, self._shard(key), self._KEY, self._LINE, old_files, split_lines
        )

    def _shard(self, key: str) -> str:
        return f"{self._directory}/{key[: self.fan_out]}{SHARD_SUFFIX}"

    def key_of(self, entry: IndexEntry) -> str:
        return self.key_for(entry.requested_link)

    def line_of(self, entry: IndexEntry) -> str:
        return entry.fields(
            iso_utc(entry.fetch_started),
            entry.checksum,
            entry.content_location,
            entry.final_link,
            entry.parser_name,
        )


class IndexRegistry:
    """Index names and the factories that build them for a store.

    The module-level :func:`register_index`, :func:`index_names` and :func:`make_indexes` use
    one shared registry; build your own (``IndexRegistry()``) to keep a test or a plugin apart.
    """

    def __init__(self) -> None:
        self._factories: dict[str, IndexFactory] = {
            ChecksumIndex.name: ChecksumIndex,
            UrlIndex.name: UrlIndex,
        }

    def register(self, name: str, factory: IndexFactory, *, replace: bool = False) -> None:
        """Make ``name`` available to :meth:`make`. An existing name needs ``replace=True``;
        the canonical index cannot be replaced."""
        check_name("index name", name)
        if name == CANONICAL_INDEX:
            raise ConfigError(f"index {name!r} is the canonical index and cannot be replaced")
        if name in self._factories and not replace:
            raise ConfigError(f"index {name!r} is already registered (pass replace=True)")
        self._factories[name] = factory

    def unregister(self, name: str) -> None:
        """Forget ``name`` (not the canonical index)."""
        if name == CANONICAL_INDEX:
            raise ConfigError(f"index {name!r} is the canonical index and cannot be removed")
        self._factories.pop(name, None)

    def names(self) -> list[str]:
        """Registered index names, sorted."""
        return sorted(self._factories)

    def make(self, names: Iterable[str], store: BlobStore) -> list[Index]:
        """The indexes called ``names`` for ``store``: the canonical one first, always, then
        the others in the order given, each once. An unknown name is a :class:`ConfigError`."""
        wanted = [CANONICAL_INDEX, *names]
        unknown = [n for n in wanted if n not in self._factories]
        if unknown:
            raise ConfigError(
                f"unknown index {unknown[0]!r}; registered: {', '.join(self.names())}"
            )
        indexes: list[Index] = []
        for name in dict.fromkeys(wanted):
            index = self._factories[name](store)
            if not isinstance(index, Index) or index.name != name:
                raise ConfigError(
                    f"the factory registered as {name!r} built {index!r}, not an Index named "
                    f"{name!r}"
                )
            indexes.append(index)
        return indexes


_REGISTRY = IndexRegistry()


def register_index(name: str, factory: IndexFactory, *, replace: bool = False) -> None:
    """Register an index factory (``factory(store) -> Index``) under ``name``, shared."""
    _REGISTRY.register(name, factory, replace=replace)


def index_names() -> list[str]:
    """The names :func:`make_indexes` accepts (shared registry), sorted."""
    return _REGISTRY.names()


def make_indexes(
    names: Iterable[str], store: BlobStore, *, registry: IndexRegistry | None = None
) -> list[Index]:
    """The indexes called ``names`` for ``store``, the canonical ``sha384_checksum`` first
    (it cannot be disabled). ``registry`` defaults to the shared one."""
    return (registry or _REGISTRY).make(names, store)
