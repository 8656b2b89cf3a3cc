"""What a storage backend does, and which backend a store URL names.

Keys are relative, ``/``-separated paths under the store's root (``prog/sha384_content/ab12…``);
a backend maps them to a local path or an S3 key. Two backends: local disk (:mod:`._local`) and
S3 through s3fs (:mod:`._s3`). Each keeps its own way of adding index lines, because local disk
can append and S3 cannot.
"""

from __future__ import annotations

from typing import Any, Protocol

from scrapeflow._util.redact import redact
from scrapeflow.errors import ConfigError

__all__ = ["Backend", "open_backend"]

_LOCAL = {"file", "local"}
_S3 = {"s3", "s3a"}


class Backend(Protocol):
    """The operations the store, the indexes, the fetch log and the WARC writer build on."""

    root: str  # the store's root as locations show it: an absolute path or s3://bucket/prefix

    def location(self, key: str) -> str:
        """Where ``key`` is, as a user would open it (path or ``s3://`` URL)."""
        ...

    def local_path(self, key: str) -> str | None:
        """The local file of ``key`` when the store is on local disk, else ``None``."""
        ...

    async def check(self) -> None:
        """Raise :class:`StoreUnavailable` unless the store can be used (bucket, directory)."""
        ...

    async def exists(self, key: str) -> bool: ...

    async def read(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` if there is no such object."""
        ...

    async def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` at ``key`` unless something is there; ``False`` if it was. Atomic."""
        ...

    async def replace(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key`` whole, replacing what was there. Atomic."""
        ...

    async def upload(self, path: str, key: str) -> None:
        """Copy the local file ``path`` to ``key`` whole, replacing what was there. Atomic."""
        ...

    async def download(self, key: str, path: str) -> bool:
        """Copy ``key`` to the local file ``path``; ``False`` (nothing written) if absent."""
        ...

    async def list_names(self, key: str) -> list[str]:
        """Names of the objects directly under ``key`` (a "directory"), sorted; ``[]`` if none."""
        ...

    async def add_line(self, key: str, line: bytes, tag: str) -> None:
        """Add ``line`` (ending in a newline) to the line set ``key``; never loses another's."""
        ...

    async def read_lines(self, key: str) -> list[bytes]:
        """Every line of the line set ``key`` (with duplicates; order: base, then additions)."""
        ...

    async def compact_lines(self, key: str) -> int:
        """Fold separately stored additions of ``key`` into its base; how many were folded."""
        ...

    async def aclose(self) -> None: ...


def split_protocol(url: str) -> tuple[str | None, str]:
    """``("s3", "bucket/prefix")`` of ``s3://bucket/prefix``; ``(None, path)`` of a plain path.

    As fsspec's function of that name, without importing fsspec (tens of milliseconds that
    every ``scrapeflow fetch`` to local disk would pay at start-up)."""
    protocol, sep, path = url.partition("://")
    if sep and len(protocol) > 1:  # one letter: a Windows drive, not a scheme
        return protocol, path
    if url.startswith("data:"):
        return "data", url[5:]
    return None, url


def open_backend(url: str, storage_options: dict[str, Any] | None) -> Backend:
    """The backend for ``url``: ``file://…`` or a plain path, or ``s3://bucket[/prefix]``."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(
            "store URL is empty: give a directory, file:///path or s3://bucket/prefix"
        )
    protocol, path = split_protocol(url)
    shown = redact(url)
    if protocol is None or protocol in _LOCAL:
        if storage_options:
            raise ConfigError(f"store {shown}: storage_options apply to s3:// stores only")
        from scrapeflow.storage._local import LocalBackend

        return LocalBackend(path)
    if protocol in _S3:
        from scrapeflow.storage._s3 import S3Backend

        return S3Backend(path, shown, dict(storage_options or {}))
    raise ConfigError(
        f"store URL {shown} has scheme {protocol!r}; supported: a local path, file://, s3://"
    )
