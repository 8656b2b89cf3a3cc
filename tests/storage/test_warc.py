"""WARC output: records any WARC reader (warcio's ArchiveIterator) can read, runs appended."""

from __future__ import annotations

import io
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from scrapeflow.errors import MissingExtra
from scrapeflow.storage import BlobStore, WarcWriter
from tests.storage.conftest import PROGRAM, Target

KEY = f"{PROGRAM}/warc/48213_0_500.warc.gz"
BIG = bytes(range(256)) * 8_000  # 2 MB: compressed off the event loop


def read_records(data: bytes) -> list[tuple[str, str | None, str | None, bytes]]:
    out = []
    for record in ArchiveIterator(io.BytesIO(data)):
        status = None
        if record.http_headers is not None:
            status = record.http_headers.statusline
            if record.rec_type == "request":  # warcio splits the method off as the "protocol"
                status = f"{record.http_headers.protocol} {status}"
        out.append(
            (
                record.rec_type,
                record.rec_headers.get_header("WARC-Target-URI"),
                status,
                record.content_stream().read(),
            )
        )
    return out


async def test_fetches_become_request_and_response_records(
    target: Target, store: BlobStore, tmp_path: Path
) -> None:
    async with WarcWriter(store, "48213", 0, 500, spool_dir=tmp_path / "spool") as warc:
        await warc.write(
            "http://127.0.0.1/feed",
            final_url="http://127.0.0.1/feed.xml",
            status=200,
            headers=[("Content-Type", "application/rss+xml"), ("Content-Encoding", "gzip")],
            body=b"<rss>items</rss>",
            request_headers=[("User-Agent", "scrapeflow")],
            started=datetime(2024, 5, 1, 8, 0, 0, tzinfo=UTC),
        )
        await warc.write("http://127.0.0.1/big", status=404, headers=[], body=BIG)
        assert KEY not in target.object_keys()  # built in a spool, published on close

    assert warc.location == f"{store.root}/{KEY}"
    assert target.object_keys() == [KEY]
    data = target.read(KEY)
    assert data[:2] == b"\x1f\x8b"  # gzip
    records = read_records(data)
    assert [(r[0], r[1], r[2]) for r in records] == [
        ("warcinfo", None, None),
        ("response", "http://127.0.0.1/feed.xml", "200 OK"),
        ("request", "http://127.0.0.1/feed.xml", "GET /feed.xml HTTP/1.1"),
        ("response", "http://127.0.0.1/big", "404 Not Found"),
        ("request", "http://127.0.0.1/big", "GET /big HTTP/1.1"),
    ]
    assert records[1][3] == b"<rss>items</rss>" and records[3][3] == BIG

    response, request = list(ArchiveIterator(io.BytesIO(data)))[1:3]
    assert request.rec_headers.get_header("WARC-Concurrent-To") == response.rec_headers.get_header(
        "WARC-Record-ID"
    )
    assert response.rec_headers.get_header("WARC-Date") == "2024-05-01T08:00:00Z"
    assert response.http_headers.get_header("Content-Encoding") is None  # body stored decoded
    assert response.http_headers.get_header("Content-Length") == "16"


async def test_a_later_run_of_the_shard_appends(
    target: Target, store: BlobStore, tmp_path: Path
) -> None:
    for n in range(2):
        async with WarcWriter(store, "48213", 0, 500, spool_dir=tmp_path / "spool") as warc:
            await warc.write(f"http://127.0.0.1/{n}", status=200, headers=[], body=b"page %d" % n)

    records = read_records(target.read(KEY))
    assert [r[3] for r in records if r[0] == "response"] == [b"page 0", b"page 1"]
    assert [r[0] for r in records].count("warcinfo") == 1


async def test_a_record_cut_by_a_crash_is_dropped(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with BlobStore(str(root), PROGRAM) as store:
        async with WarcWriter(store, "48213", 0, 500) as warc:
            await warc.write("http://127.0.0.1/1", status=200, headers=[], body=b"first")
        whole = (root / KEY).read_bytes()
        # A crashed run left its spool with a record cut half-way.
        spool = root / f"{KEY}.sf-tmp-spool"
        spool.write_bytes(whole + whole[: len(whole) // 2])

        async with WarcWriter(store, "48213", 0, 500) as warc:
            await warc.write("http://127.0.0.1/2", status=200, headers=[], body=b"second")

    records = read_records((root / KEY).read_bytes())
    assert [r[3] for r in records if r[0] == "response"] == [b"first", b"second"]
    assert not spool.exists()


def test_without_warcio_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "warcio", None)  # as if not installed

    with pytest.raises(MissingExtra) as caught:
        WarcWriter(BlobStore(str(tmp_path), PROGRAM), "48213", 0, 500)
    assert str(caught.value) == (
        "WARC output needs the 'warc' extra: pip install 'scrapeflow[warc]' "
        "(in a checkout: pip install -e '.[warc]')"
    )
    assert isinstance(caught.value, ImportError)
