"""WARC output (optional extra ``warc``: warcio): each fetch as a request and a response record.

At ``{root}/{program}/warc/{fetch_id}_{offset}_{limit}.warc.gz``: one gzip member per record,
so the file can be appended to, and read by any WARC tool (``warcio.ArchiveIterator``,
pywb, …). It is built in a spool file (next to it on local disk, under the spool directory for
S3) and published whole (rename, or one upload) when the run's last writer closes it; a run of
the same shard later appends to it.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from types import ModuleType, TracebackType

from scrapeflow._util.atomic import TMP_MARK
from scrapeflow.errors import ConfigError, MissingExtra
from scrapeflow.storage._fetchlog import spool_path
from scrapeflow.storage._local import THREAD_THRESHOLD
from scrapeflow.storage._private import write_private
from scrapeflow.storage._spool import SharedAppendFile, trim_cut_gzip
from scrapeflow.storage._store import BlobStore
from scrapeflow.storage._types import check_name

__all__ = ["WarcWriter"]

# The body is stored as received after decoding: the headers that described the wire form go.
_WIRE_HEADERS = {"content-encoding", "transfer-encoding", "content-length"}


def _warcio() -> tuple[ModuleType, ModuleType]:
    try:
        from warcio import statusandheaders, warcwriter
    except ImportError as exc:
        raise MissingExtra("WARC output", "warc") from exc
    return warcwriter, statusandheaders


class WarcWriter:
    """Append fetches to the shard's WARC file. Every process of a run may open one.

    >>> async with WarcWriter(store, "48213", 0, 500) as warc:  # doctest: +SKIP
    ...     await warc.write("http://a.example/", status=200, headers=hdrs, body=body)

    Without warcio installed, construction raises :class:`MissingExtra`.
    """

    def __init__(
        self,
        store: BlobStore,
        fetch_id: str,
        offset: int,
        limit: int,
        *,
        spool_dir: str | Path | None = None,
    ) -> None:
        self._warcwriter, self._headers = _warcio()
        check_name("fetch id", fetch_id)
        for what, value in (("offset", offset), ("limit", limit)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"WARC {what} must be an integer >= 0, not {value!r}")
        self.store = store
        self.name = f"{fetch_id}_{offset}_{limit}.warc.gz"
        self._key = store.key("warc", self.name)
        self.location = store._backend.location(self._key)
        self._spool_dir = spool_dir
        self._file: SharedAppendFile | None = None
        self.written = 0

    def __repr__(self) -> str:
        return f"WarcWriter({self.location!r}, written={self.written})"

    async def open(self) -> WarcWriter:
        """Start appending (after the records of earlier runs of the shard)."""
        local = self.store._backend.local_path(self._key)
        path = (
            f"{local}{TMP_MARK}spool"
            if local
            else spool_path(self.store, self._key, self._spool_dir)
        )
        self._file = await SharedAppendFile.open(path, seed=self._seed, trim=trim_cut_gzip)
        return self

    async def write(
        self,
        url: str,
        *,
        status: int,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        final_url: str | None = None,
        method: str = "GET",
        request_headers: Iterable[tuple[str, str]] = (),
        started: datetime | None = None,
    ) -> None:
        """Record one fetch: a ``request`` and a ``response`` record for ``final_url`` (the
        URL that answered, default ``url``), linked by ``WARC-Concurrent-To``."""
        if self._file is None:
            raise ConfigError(f"{self!r} is not open: use 'async with' or await open()")
        args = (final_url or url, status, list(headers), body, method, list(request_headers))
        moment = (started or datetime.now(UTC)).astimezone(UTC)
        if len(body) > THREAD_THRESHOLD:  # zlib releases the GIL while compressing
            data = await asyncio.to_thread(self._records, *args, moment)
        else:
            data = self._records(*args, moment)
        self._file.append(data)  # both records in one write: never split by another process
        self.written += 1

    async def close(self) -> None:
        """Stop writing; the run's last writer publishes the file."""
        file, self._file = self._file, None
        if file is not None:
            await file.close(self._publish)

    async def __aenter__(self) -> WarcWriter:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _records(
        self,
        url: str,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        method: str,
        request_headers: list[tuple[str, str]],
        moment: datetime,
    ) -> bytes:
        sah = self._headers.StatusAndHeaders
        out = io.BytesIO()
        writer = self._warcwriter.WARCWriter(out, gzip=True)
        date = {"WARC-Date": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}
        kept = [(k, v) for k, v in headers if k.lower() not in _WIRE_HEADERS]
        kept.append(("Content-Length", str(len(body))))
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        response = writer.create_warc_record(
            url,
            "response",
            payload=io.BytesIO(body),
            length=len(body),
            warc_headers_dict=date,
            http_headers=sah(f"{status} {reason}", kept, protocol="HTTP/1.1"),
        )
        target = url.split("://", 1)[-1].partition("/")[2]
        request = writer.create_warc_record(
            url,
            "request",
            payload=io.BytesIO(b""),
            length=0,
            warc_headers_dict={
                **date,
                "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
            },
            http_headers=sah(
                f"{method} /{target} HTTP/1.1", list(request_headers), is_http_request=True
            ),
        )
        writer.write_record(response)
        writer.write_record(request)
        return out.getvalue()

    async def _seed(self, tmp: str) -> bool:
        if await self.store._backend.download(self._key, tmp):
            return True
        out = io.BytesIO()
        writer = self._warcwriter.WARCWriter(out, gzip=True)
        info = {"software": "scrapeflow", "format": "WARC File Format 1.0"}
        writer.write_record(writer.create_warcinfo_record(self.name, info))
        write_private(tmp, out.getvalue())
        return True

    async def _publish(self, path: str) -> None:
        local = self.store._backend.local_path(self._key)
        if local is not None:
            os.replace(path, local)  # same directory: atomic
        else:
            await self.store._backend.upload(path, self._key)
