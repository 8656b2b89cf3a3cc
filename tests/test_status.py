"""The status store, read_status and status_summary."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from scrapeflow.errors import MissingExtra, StatusCorrupt, StatusError
from scrapeflow.executor import execute_async
from scrapeflow.scrape import scrape
from scrapeflow.status import JsonDirStore, StatusStore, read_status, status_summary, summarize


async def scraped_dir(tmp_path: Path, site) -> Path:
    tasks = {f"p{n}": {"url": site.page_url(n)} for n in range(4)}
    tasks["gone"] = {"url": f"{site.url}/status/404"}
    await execute_async([scrape], tmp_path, tasks)
    return tmp_path


async def test_read_status_is_one_row_per_task(tmp_path: Path, plain_site) -> None:
    directory = await scraped_dir(tmp_path, plain_site)
    frame = read_status(directory)
    assert sorted(frame.index) == ["gone", "p0", "p1", "p2", "p3"]
    assert frame.loc["p1", "params"] == {"url": plain_site.page_url(1)}
    assert frame.loc["p1", "scrape_status"] == "SUCCESS"
    assert frame.loc["gone", "scrape_status"] == "ERROR HTTPStatusError::HTTP response 404"


async def test_status_summary_is_a_histogram_per_executor(tmp_path: Path, plain_site) -> None:
    directory = await scraped_dir(tmp_path, plain_site)
    summary = status_summary(directory)
    assert list(summary.columns) == ["scrape"]
    assert summary.loc["SUCCESS", "scrape"] == 4
    assert summary.loc["ERROR HTTPStatusError::HTTP response 404", "scrape"] == 1
    await execute_async([scrape], directory, [f"p{n}" for n in range(4)])
    assert status_summary(directory).loc["SKIPPED", "scrape"] == 4


def test_without_pandas_the_error_says_how_to_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingExtra, match=r"pip install 'scrapeflow\[pandas\]'"):
        read_status(tmp_path)


async def test_corrupt_status_file_is_reported_and_left_alone(tmp_path: Path, plain_site) -> None:
    bad = tmp_path / "cut.status.json"
    bad.write_text('{"name": "cut", "params": {"url": ')
    with pytest.raises(StatusCorrupt, match=r"cut\.status\.json"):
        await execute_async([scrape], tmp_path, {"cut": {"url": plain_site.page_url(1)}})
    with pytest.raises(StatusCorrupt):
        summarize(tmp_path)
    assert bad.read_text() == '{"name": "cut", "params": {"url": '


async def test_save_is_atomic_and_stale_temp_files_are_swept(tmp_path: Path) -> None:
    store = JsonDirStore(tmp_path)
    assert isinstance(store, StatusStore)
    await store.prepare()
    await store.save("k", {"name": "k", "params": {}})
    # A temp file of a writer that died (pid 2**22 + 1 is above Linux's pid_max default range).
    dead = tmp_path / f"k.status.json.sf-tmp-{2**22 + 1}-0"
    dead.write_text("{half")
    live = tmp_path / f"j.status.json.sf-tmp-{os.getpid()}-7"
    mine = tmp_path / "notes.tmp-12345"  # a user's file that only looks like one
    mine.write_text("keep me")
    live.write_text("{being written")
    await store.prepare()
    assert not dead.exists()
    assert live.exists()
    assert mine.read_text() == "keep me"
    assert await store.keys() == ["k"]
    assert json.loads((tmp_path / "k.status.json").read_text()) == {"name": "k", "params": {}}


async def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(StatusError, match="cannot write status files"):
        await execute_async([scrape], not_a_dir / "sub", {"a": {"url": "http://127.0.0.1:1/"}})


def test_summarize_on_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StatusError, match="not a directory"):
        summarize(tmp_path / "missing")


def test_the_task_set_check_refuses_before_anything_is_written(tmp_path: Path) -> None:
    from scrapeflow.errors import InputError, TaskConflict
    from scrapeflow.status import check_task_set, dump_status

    tasks = [("a", {"url": "http://127.0.0.1:1/a"}), ("b", {"url": "http://127.0.0.1:1/b"})]
    fresh = tmp_path / "new" / "deeper"
    check_task_set(fresh, tasks, executors=["scrape"])
    assert not (tmp_path / "new").exists()  # checked, not created

    with pytest.raises(InputError, match="--force names no executor of this run: parse"):
        check_task_set(fresh, tasks, executors=["scrape"], force=["parse"])
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(StatusError, match="is not a writable directory"):
        check_task_set(a_file / "sub", tasks, executors=["scrape"])
    with pytest.raises(StatusError, match="exists and is not a directory"):
        check_task_set(a_file, tasks, executors=["scrape"])

    used = tmp_path / "used"
    used.mkdir()
    (used / "a.status.json").write_bytes(dump_status({"name": "a", "params": {"url": "x"}}))
    with pytest.raises(TaskConflict, match="is for other params"):
        check_task_set(used, tasks, executors=["scrape"])
    with pytest.raises(StatusError, match="different task set"):
        check_task_set(used, [("c", {"url": "y"})], executors=["scrape"])
    (used / "a.status.json").write_text("{")
    with pytest.raises(StatusCorrupt):
        check_task_set(used, tasks, executors=["scrape"])
    assert sorted(p.name for p in used.iterdir()) == ["a.status.json"]


@pytest.mark.parametrize(
    ("kind", "make"),
    [
        ("a directory", lambda path: path.mkdir()),
        ("a FIFO", os.mkfifo),  # reading it would wait for a writer forever
        ("a device", lambda path: path.symlink_to("/dev/zero")),  # reading it never ends
    ],
)
async def test_a_status_file_that_is_not_a_file_is_refused_never_read(
    tmp_path: Path, kind: str, make
) -> None:
    (tmp_path / "ok.status.json").write_text('{"name": "ok", "params": {}, "a_status": "SUCCESS"}')
    make(tmp_path / "odd.status.json")
    with pytest.raises(StatusError, match=f"odd.status.json is {kind}, not a status file"):
        summarize(tmp_path)
    # ... and not skipped as a foreign file either: it is not one scrapeflow could have written
    with pytest.raises(StatusError, match=kind):
        summarize(tmp_path, on_skip=lambda path, problem: None)
    with pytest.raises(StatusError, match=kind):
        await execute_async([scrape], tmp_path, {"odd": {"url": "http://127.0.0.1:1/"}})


async def test_the_store_writes_owner_only_files_in_owner_only_directories(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        store = JsonDirStore(tmp_path / "a" / "b")
        await store.prepare()
        await store.save("k", {"name": "k", "params": {}})
        await store.save("k", {"name": "k", "params": {}, "more": 1})  # replaced
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path("k").stat().st_mode) == 0o600


async def test_keys_is_async_and_lists_only_status_files(tmp_path: Path) -> None:
    store = JsonDirStore(tmp_path / "run")
    assert await store.keys() == []  # nothing made yet: no keys, no error
    await store.prepare()
    await store.save("b", {"name": "b", "params": {}})
    await store.save("a", {"name": "a", "params": {}})
    (store.directory / "a.scrape").write_bytes(b"<html>")  # a body, not a status
    (store.directory / ".hidden.status.json").write_text("{}")
    assert sorted(await store.keys()) == ["a", "b"]
