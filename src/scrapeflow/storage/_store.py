"""The content-addressed blob store: bodies stored unchanged under their SHA-384."""

from __future__ import annotations

import asyncio
import re
from types import TracebackType
from typing import Any

from scrapeflow.errors import InputError, ObjectNotFound
from scrapeflow.storage._backend import Backend, open_backend
from scrapeflow.storage._local import THREAD_THRESHOLD
from scrapeflow.storage._types import StoredContent, check_name, sha384_hex

__all__ = ["BlobStore"]

_CHECKSUM = re.compile(r"[0-9a-f]{96}")


class BlobStore:
    """Content stored unchanged at ``{root}/{program}/sha384_content/{sha384 hex}``.

    ``url`` is a directory (a plain path or ``file:///…``) or ``s3://bucket/prefix``;
    ``storage_options`` go to s3fs (``endpoint_url``, ``key``, ``secret``, ``token``,
    ``client_kwargs``…) and are never shown: not in the repr, not in an error message. Without
    them s3fs uses the standard ``AWS_*`` variables and files.

    A store holds one connection pool bound to the event loop that first uses it: create it,
    use it and close it (``async with``, or ``await store.aclose()``) in one loop, and make one
    per process.

    >>> async with BlobStore("s3://bucket/crawls", "gofetch") as store:  # doctest: +SKIP
    ...     stored = await store.put(b"<html>…</html>")
    ...     stored.location
    's3://bucket/crawls/gofetch/sha384_content/5f0c…'
    """

    def __init__(
        self, url: str, program: str, *, storage_options: dict[str, Any] | None = None
    ) -> None:
        self.program = check_name("program", program)
        self._backend: Backend = open_backend(url, storage_options)
        self.root = self._backend.root

    def __repr__(self) -> str:
        return f"BlobStore({self.root!r}, program={self.program!r})"

    async def __aenter__(self) -> BlobStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store's connections (S3). Safe to call twice."""
        await self._backend.aclose()

    async def check(self) -> None:
        """Raise :class:`StoreUnavailable` now, rather than at the first write, if the store
        cannot be used: a missing bucket, refused credentials, a directory that is not writable.
        """
        await self._backend.check()

    def key(self, *parts: str) -> str:
        """The store-relative key of ``{program}/{parts…}`` (used by indexes and logs)."""
        return "/".join((self.program, *parts))

    def location(self, checksum: str) -> str:
        """Where the content with ``checksum`` is (or would be): a path or an ``s3://`` URL."""
        return self._backend.location(self._content_key(checksum))

    async def put(self, body: bytes) -> StoredContent:
        """Store ``body`` unchanged under its SHA-384, once.

        If identical content is already stored, nothing is written and ``created`` is ``False``.
        The write is atomic: a reader never sees part of a body (temp file and rename on local
        disk; a single PUT, or a multipart upload completed in one step, on S3).
        """
        if not isinstance(body, bytes | bytearray | memoryview):
            raise InputError(f"put() takes bytes, not {type(body).__name__}")
        data = bytes(body)
        if len(data) > THREAD_THRESHOLD:  # hashlib releases the GIL: a real second core
            checksum = await asyncio.to_thread(sha384_hex, data)
        else:
            checksum = sha384_hex(data)
        key = self._content_key(checksum)
        created = await self._backend.create(key, data)
        return StoredContent(checksum, self._backend.location(key), created)

    async def exists(self, checksum: str) -> bool:
        """Whether content with ``checksum`` is stored."""
        return await self._backend.exists(self._content_key(checksum))

    async def get(self, checksum: str) -> bytes:
        """The stored body; :class:`ObjectNotFound` if there is none with ``checksum``."""
        data = await self._backend.read(self._content_key(checksum))
        if data is None:
            raise ObjectNotFound(f"no content {checksum} in {self.root}/{self.program}")
        return data

    def _content_key(self, checksum: str) -> str:
        if not isinstance(checksum, str) or not _CHECKSUM.fullmatch(checksum):
            raise InputError(f"{checksum!r} is not a SHA-384 checksum (96 lowercase hex digits)")
        return self.key("sha384_content", checksum)
