"""Tests of the storage layer (``scrapeflow.storage``) on local disk and a loopback S3 server.

The functions here run in child processes (multiprocessing, spawn): they live in the package
``__init__`` so a child imports them without pytest's fixtures, moto or boto3.
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime
from typing import Any


def entry(n: int, *, writer: str, checksum: str = "a" * 96, fetch_id: str = "run1") -> Any:
    """The index entry of the ``n``-th fetch of ``writer`` (distinct lines for distinct n)."""
    from scrapeflow.storage import IndexEntry

    return IndexEntry(
        checksum=checksum,
        content_location=f"s3://b/p/gofetch/sha384_content/{checksum}",
        requested_link=f"http://127.0.0.1/{writer}/{n}",
        final_link=f"http://127.0.0.1/{writer}/{n}?final",
        fetch_started=datetime(2024, 5, 1, 8, 0, 0, n, tzinfo=UTC),
        fetch_duration_ns=1_000_000 + n,
        parser_name="RSS",
        fetch_id=fetch_id,
    )


def add_index_lines(url: str, options: dict[str, Any] | None, writer: str, count: int) -> None:
    """A fetcher process: ``count`` lines for one checksum in the canonical index."""

    async def run() -> None:
        from scrapeflow.storage import BlobStore, ChecksumIndex

        async with BlobStore(url, "gofetch", storage_options=options) as store:
            index = ChecksumIndex(store)
            for n in range(count):
                await index.add(entry(n, writer=writer, fetch_id=writer))

    asyncio.run(run())


def write_log_then_die(
    url: str,
    options: dict[str, Any] | None,
    spool_dir: str,
    urls: list[str],
    kill: bool,
    barrier: Any = None,
) -> None:
    """A fetch-log writer process that is SIGKILLed after its writes (``kill``) or closes.
    With a ``barrier``, it waits after opening until every writer has opened the log."""

    async def run() -> None:
        from scrapeflow.storage import BlobStore, FetchLog, FetchRecord

        async with BlobStore(url, "gofetch", storage_options=options) as store:
            log = FetchLog(
                store,
                "crash",
                0,
                100,
                started=datetime(2024, 5, 1, tzinfo=UTC),
                spool_dir=spool_dir,
            )
            await log.open()
            if barrier is not None:
                barrier.wait(timeout=30)
            for n, requested in enumerate(urls):
                await log.write(
                    FetchRecord(
                        requested_url=requested,
                        started=datetime(2024, 5, 1, 8, 0, 0, n, tzinfo=UTC),
                        duration_ns=5,
                        status=200,
                        checksum=f"{n:096x}",
                    )
                )
            if kill:
                os.kill(os.getpid(), signal.SIGKILL)
            await log.close()

    asyncio.run(run())


def urls_in_shard(shard: str, writer: str, count: int) -> list[str]:
    """``count`` URLs of ``writer`` whose by-URL keys all begin with ``shard`` (two hex digits):
    their lines share one shard file on local disk."""
    import hashlib

    found: list[str] = []
    n = 0
    while len(found) < count:
        url = f"http://127.0.0.1/{writer}/{n}"
        if hashlib.sha384(url.encode()).hexdigest().startswith(shard):
            found.append(url)
        n += 1
    return found


def add_url_lines(url: str, writer: str, urls: list[str]) -> None:
    """A fetcher process: a by-URL line for each of ``urls``."""
    import dataclasses

    async def run() -> None:
        from scrapeflow.storage import BlobStore, UrlIndex

        async with BlobStore(url, "gofetch") as store:
            index = UrlIndex(store)
            for n, requested in enumerate(urls):
                fetched = entry(n, writer=writer, fetch_id=writer)
                await index.add(dataclasses.replace(fetched, requested_link=requested))

    asyncio.run(run())
