"""The bulk fetcher against the sandbox, into local disk and S3 (moto's server on loopback)."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiohttp import web

from scrapeflow.errors import InputError, MissingSetting
from scrapeflow.fetch import FetchSettings, read_items, run_fetch
from scrapeflow.sandbox import serve_in_thread
from scrapeflow.storage import BlobStore, ChecksumIndex, UrlIndex, read_fetch_log, sha384_hex
from tests.fetch.conftest import REDIS_URL
from tests.storage.conftest import Target, make_s3_target


def settings_for(target: Target, **values: object) -> FetchSettings:
    env = {}
    if target.kind == "s3":
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL": target.options["endpoint_url"],
        }
    flags = {"store": target.url, "fetch_id": "48213", "max_cpus": 1, **values}
    return FetchSettings.resolve(flags, environ=env)


def write_list(path: Path, lines: list[str]) -> Path:
    path.write_text("# a list\n" + "\n".join(lines) + "\n")
    return path


async def open_store(target: Target) -> BlobStore:
    store = BlobStore(target.url, "gofetch", storage_options=target.options or None)
    return await store.__aenter__()


def fetch(settings: FetchSettings, path: Path):
    items = read_items(path, offset=settings.offset, limit=settings.limit)
    return run_fetch(settings, items)


async def test_layout_dedup_indexes_and_log(target: Target, site: str, tmp_path: Path) -> None:
    urls = [f"{site}/page/{n}" for n in range(30)]
    urls += [
        f"{site}/redirect/3",
        f"{site}/status/404",
        f"{site}/bytes/5000",
        f"{site}/bytes/5000?again",
    ]
    listing = write_list(
        tmp_path / "urls.tsv", [f'{u}\tRSS\t{{"source": "n{i}"}}' for i, u in enumerate(urls)]
    )
    settings = settings_for(target)

    report = await asyncio.to_thread(fetch, settings, listing)

    assert (report.stored, report.duplicates, report.failed) == (31, 2, 1)
    store = await open_store(target)
    try:
        body = await store.get(sha384_hex(await _page(site, 7)))
        assert b'data-page="7"' in body
        checksum = sha384_hex(body)
        assert store.location(checksum).endswith(f"gofetch/sha384_content/{checksum}")
        lines = await ChecksumIndex(store).lines(checksum)
        assert len(lines) == 1
        location, requested, final, started, duration, parser = lines[0].split("\t")
        assert (location, requested, final, parser) == (
            store.location(checksum),
            urls[7],
            urls[7],
            "RSS",
        )
        assert int(duration) > 0 and started.endswith("Z")
        # The redirect's content is page 3's: one object, two index lines, final link recorded.
        page3 = sha384_hex(await _page(site, 3))
        finals = sorted(line.split("\t")[2] for line in await ChecksumIndex(store).lines(page3))
        assert finals == [urls[3], urls[3]]
        by_url = await UrlIndex(store).lines(sha384_hex(f"{site}/redirect/3"))
        assert by_url[0].split("\t")[1] == page3
        [log_name] = await _log_names(store)
        records = {r.requested_url: r for r in await read_fetch_log(store, log_name)}
        assert log_name.endswith("_48213_0_34")
        assert (
            records[f"{site}/status/404"].status == 404 and not records[f"{site}/status/404"].stored
        )
        assert records[urls[5]].meta == {"source": "n5"} and records[urls[5]].processor == "RSS"
        assert not await store.exists(sha384_hex(b"status 404"))
    finally:
        await store.aclose()


async def _page(site: str, n: int) -> bytes:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(f"{site}/page/{n}") as r:
        return await r.read()


async def _log_names(store: BlobStore) -> list[str]:
    from scrapeflow.storage import fetch_log_names

    return await fetch_log_names(store, "48213", 0, 34)


async def test_the_same_fetch_id_resumes(target: Target, site: str, tmp_path: Path) -> None:
    listing = write_list(tmp_path / "urls.txt", [f"{site}/page/{n}" for n in range(20)])
    first = await asyncio.to_thread(fetch, settings_for(target, limit=12), listing)
    assert first.stored == 12
    again = await asyncio.to_thread(fetch, settings_for(target, limit=12), listing)
    assert (again.skipped, again.stored) == (12, 0)
    other_shard = await asyncio.to_thread(fetch, settings_for(target, offset=12), listing)
    assert (other_shard.skipped, other_shard.stored) == (0, 8)


def test_a_body_cut_by_a_dropped_connection_is_never_stored(tmp_path: Path) -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b"x" * 500)
        request.transport.abort()
        return response

    def make_app() -> web.Application:
        app = web.Application()
        app.router.add_get("/cut", cut)
        return app

    with serve_in_thread(make_app) as url:
        store_dir = tmp_path / "store"
        settings = FetchSettings.resolve({"store": str(store_dir), "fetch_id": "1", "max_cpus": 1})
        report = fetch(settings, write_list(tmp_path / "u.txt", [f"{url}/cut"]))
    assert report.failed == 1 and report.stored == 0
    assert not (store_dir / "gofetch" / "sha384_content").exists() or not any(
        (store_dir / "gofetch" / "sha384_content").iterdir()
    )


async def test_stored_items_are_pushed_to_redis(site: str, tmp_path: Path, redis_stream) -> None:
    # The machine's Redis is shared with other test processes (xdist workers, other checkouts):
    # a program of this test's own gives it a stream no one else writes to.
    program = f"pushtest-{uuid.uuid4().hex[:12]}"
    stream = f"scrapeflow:{program}:fetched"
    listing = write_list(
        tmp_path / "urls.jsonl",
        [
            json.dumps({"url": f"{site}/page/{n}", "processor": "Pubmed_XML", "meta": {"n": n}})
            for n in range(5)
        ],
    )
    settings = FetchSettings.resolve(
        {
            "store": str(tmp_path / "s"),
            "program": program,
            "fetch_id": "7",
            "max_cpus": 1,
            "redis_url": REDIS_URL,
        }
    )
    try:
        await asyncio.to_thread(fetch, settings, listing)
        entries = redis_stream.xrange(stream)
    finally:
        redis_stream.delete(stream)
    assert len(entries) == 5
    fields = {k.decode(): v.decode() for k, v in entries[0][1].items()}
    assert fields["processor"] == "Pubmed_XML"
    assert fields["location"].endswith(f"{program}/sha384_content/{fields['checksum']}")
    assert json.loads(fields["meta"]) == {"n": int(fields["requested_url"].rsplit("/", 1)[1])}


def test_warc_records_are_readable_by_warcio(site: str, tmp_path: Path) -> None:
    from warcio.archiveiterator import ArchiveIterator

    settings = FetchSettings.resolve(
        {"store": str(tmp_path / "s"), "fetch_id": "9", "max_cpus": 1, "warc": True}
    )
    fetch(settings, write_list(tmp_path / "u.txt", [f"{site}/page/{n}" for n in range(4)]))
    warc = tmp_path / "s" / "gofetch" / "warc" / "9_0_4.warc.gz"
    with open(warc, "rb") as f:
        responses = [r for r in ArchiveIterator(f) if r.rec_type == "response"]
    assert sorted(r.rec_headers.get_header("WARC-Target-URI") for r in responses) == sorted(
        f"{site}/page/{n}" for n in range(4)
    )
    with gzip.open(warc) as unzipped:
        assert unzipped.read(4) == b"WARC"


def test_settings_from_gofetch_variables_and_errors(tmp_path: Path) -> None:
    env = {
        "FETCH_ID": "31337",
        "FETCH_OFFSET": "10",
        "FETCH_LIMIT": "50",
        "CONCURRENT_FETCHES": "7",
        "CONCURRENT_S3WRITERS": "2",
        "MAX_CPUS": "3",
        "AWS_STORAGE_BUCKET_NAME": "crawl",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
    }
    s = FetchSettings.resolve({}, environ=env)
    assert (
        s.fetch_id,
        s.offset,
        s.limit,
        s.concurrent_fetches,
        s.concurrent_writers,
        s.max_cpus,
    ) == ("31337", 10, 50, 7, 2, 3)
    assert s.store == "s3://crawl"
    assert "s3cr3t" not in repr(s)
    with pytest.raises(MissingSetting, match="AWS_SECRET_ACCESS_KEY"):
        FetchSettings.resolve(
            {}, environ={"AWS_STORAGE_BUCKET_NAME": "crawl", "AWS_ACCESS_KEY_ID": "k"}
        )
    with pytest.raises(MissingSetting, match="--store"):
        FetchSettings.resolve({}, environ={})
    with pytest.raises(Exception, match="CONCURRENT_FETCHES must be a whole number"):
        FetchSettings.resolve({"store": "x"}, environ={"CONCURRENT_FETCHES": "many"})
    config = tmp_path / "fetch.toml"
    config.write_text(
        '[fetch]\nprogram = "pubmed"\nconcurrent_fetches = 9\nindexes = ["url_sha384"]\n'
    )
    s = FetchSettings.resolve({"store": "x", "config": config}, environ={"CONCURRENT_FETCHES": "4"})
    assert (s.program, s.concurrent_fetches, s.indexes) == (
        "pubmed",
        4,
        ("sha384_checksum", "url_sha384"),
    )


def test_bad_list_lines_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"u.tsv:3: the processor meta is not JSON"):
        read_items(
            write_list(
                tmp_path / "u.tsv", ["http://127.0.0.1/a\tRSS", "http://127.0.0.1/b\tRSS\t{oops"]
            )
        )
    with pytest.raises(InputError, match=r"u.jsonl:2: a JSON line needs a \"url\" string"):
        read_items(write_list(tmp_path / "u.jsonl", ['{"link": "http://127.0.0.1/a"}']))
    with pytest.raises(InputError, match="ftp://x"):
        read_items(write_list(tmp_path / "u.txt", ["ftp://x/"]))


def test_cli_fetch_with_two_processes_then_resume(site: str, tmp_path: Path) -> None:
    listing = write_list(tmp_path / "u.txt", [f"{site}/page/{n}" for n in range(60)])
    env = {
        **os.environ,
        "FETCH_ID": "555",
        "MAX_CPUS": "2",
        "CONCURRENT_FETCHES": "5",
        "COLUMNS": "150",
    }
    command = [
        sys.executable,
        "-m",
        "scrapeflow",
        "fetch",
        str(listing),
        "--store",
        str(tmp_path / "s"),
    ]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "fetch id 555: 60 URLs" in first.stderr
    content = list((tmp_path / "s" / "gofetch" / "sha384_content").iterdir())
    assert len(content) == 60
    for path in content[:5]:
        assert hashlib.sha384(path.read_bytes()).hexdigest() == path.name
    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0
    assert "done in an earlier run" in second.stdout and "60" in second.stdout
    nope = [*command[:4], str(tmp_path / "nope.txt"), *command[5:]]
    missing = subprocess.run(nope, capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "nope.txt: no such file" in missing.stderr


def test_cli_fetch_without_an_id_says_the_id_it_made_and_how_to_resume(
    site: str, tmp_path: Path
) -> None:
    """gofetch's meaning: no id, a new fetch each time; the id made is told first, with the
    command that resumes it."""
    listing = write_list(tmp_path / "u.txt", [f"{site}/page/{n}" for n in range(8)])
    env = {k: v for k, v in os.environ.items() if k != "FETCH_ID"} | {"COLUMNS": "200"}
    command = [sys.executable, "-m", "scrapeflow", "fetch", str(listing), "--store"]
    command.append(str(tmp_path / "s"))
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    told = re.search(
        r"a new fetch, id (\d{5}): resume it with the same command and --fetch-id \1",
        first.stderr,
    )
    assert told, first.stderr
    assert first.stderr.index("a new fetch") < first.stderr.index(f"fetch id {told.group(1)}:")
    again = [*command, "--fetch-id", told.group(1)]
    resumed = subprocess.run(again, capture_output=True, text=True, env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "a new fetch" not in resumed.stderr
    assert f"fetch id {told.group(1)}: 8 URLs" in resumed.stderr
    assert "(8 done in an earlier run)" in resumed.stderr


def test_cli_fetch_into_s3_with_gofetch_variables_only(
    site: str, s3_endpoint: str, tmp_path: Path
) -> None:
    target = make_s3_target(s3_endpoint)
    listing = write_list(tmp_path / "u.txt", [f"{site}/page/{n}" for n in range(25)])
    env = {
        **os.environ,
        "AWS_STORAGE_BUCKET_NAME": target.bucket,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": s3_endpoint,
        "FETCH_ID": "4242",
        "FETCH_OFFSET": "5",
        "FETCH_LIMIT": "10",
        "MAX_CPUS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "fetch", str(listing)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    listed = target.s3_client().list_objects_v2(Bucket=target.bucket)  # the bucket's root
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert len([k for k in keys if k.startswith("gofetch/sha384_content/")]) == 10
    [log_key] = [k for k in keys if k.startswith("gofetch/logs/")]
    assert log_key.endswith("_4242_5_10")
    assert "testing" not in result.stdout + result.stderr
    no_secret = {k: v for k, v in env.items() if k != "AWS_SECRET_ACCESS_KEY"}
    refused = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "fetch", str(listing)],
        capture_output=True,
        text=True,
        env=no_secret,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("error: missing setting AWS_SECRET_ACCESS_KEY")
