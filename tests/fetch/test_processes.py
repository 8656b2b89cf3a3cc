"""``scrapeflow fetch`` as processes: kill -9, a second run of the same shard, Ctrl-C and SIGTERM,
and what the store holds afterwards. Every run is the real command in its own process, against
the sandbox's plain site on loopback with 20-60 ms per page (so a run can be cut mid-way)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from scrapeflow.fetch import GRACE_SECONDS, FetchSettings, fetch_items, read_items
from tests._servers import RunningSite
from tests.fetch._tools import (
    alive,
    children,
    fetch_command,
    log_lines,
    run,
    stalling_redis,
    store_lines,
    wait_for,
    write_list,
)


def _listing(site: RunningSite, tmp_path: Path, pages: int = 260) -> tuple[Path, int]:
    """Pages, and 40 of them again under another URL (same content: two checksum lines)."""
    urls = [site.page_url(n) for n in range(pages)] + [
        f"{site.page_url(n)}?copy" for n in range(40)
    ]
    return write_list(tmp_path / "urls.txt", urls), len(urls)


class _Started:
    """``scrapeflow fetch`` running in the background, its output in files: a worker that
    outlives it cannot keep a pipe open and hang the test."""

    def __init__(self, command: list[str], directory: Path) -> None:
        self._out = open(directory / "stdout.txt", "w+")  # noqa: SIM115 - closed in finish()
        self._err = open(directory / "stderr.txt", "w+")  # noqa: SIM115 - closed in finish()
        self.process = subprocess.Popen(
            command,
            stdout=self._out,
            stderr=self._err,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
            start_new_session=True,  # a signal to its group reaches it and its workers, as Ctrl-C
        )
        self.pid = self.process.pid

    def finish(self, timeout: float) -> tuple[int, str]:
        """Wait for it (kill it after ``timeout``); its exit code and stderr."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self._err.seek(0)
            err = self._err.read()
            self._out.close()
            self._err.close()
        return code, err


def _clean_run(listing: Path, tmp_path: Path, fetch_id: str) -> dict[str, list[tuple[str, ...]]]:
    clean = tmp_path / "clean"
    done = run(
        fetch_command(listing, clean, "--fetch-id", fetch_id, "--cpus", "1", "--concurrency", "50")
    )
    assert done.returncode == 0, done.stderr
    return store_lines(clean)


def _survivors(processes: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The processes still running 5 s from now (multiprocessing's resource tracker leaves a
    moment after the last worker, when its pipe closes)."""
    deadline = time.monotonic() + 5
    while any(alive(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in processes if alive(p)]


def _leftovers(store: Path) -> list[str]:
    """The lock file and journal a finished run must not leave behind."""
    return sorted(p.name for p in (store / "gofetch" / "logs").glob(".*"))


def test_kill_9_takes_the_workers_and_a_resume_leaves_exactly_a_clean_runs_lines(
    slow_site: RunningSite, tmp_path: Path
) -> None:
    listing, count = _listing(slow_site, tmp_path)
    store = tmp_path / "store"
    command = fetch_command(listing, store, "--fetch-id", "77", "--cpus", "2", "--concurrency", "4")
    first = _Started(command, tmp_path)
    try:
        wait_for(lambda: log_lines(store) >= 60, 30, "the first run to log 60 URLs")
        workers = children(first.pid)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.finish(10)
    assert log_lines(store) < count, "the run ended before it was killed: nothing was tested"
    assert len(workers) >= 3, f"the fork server and two workers to watch, found {workers}"

    # Every process the killed run started dies with it (the kernel's parent-death signal).
    assert _survivors(workers) == []

    resumed = run(command)
    assert resumed.returncode == 0, resumed.stderr
    assert "done in an earlier run" in resumed.stderr
    assert store_lines(store) == _clean_run(listing, tmp_path, "77")
    assert len(store_lines(store)["logs"]) == count
    assert _leftovers(store) == []


def test_a_second_run_of_the_shard_is_refused_while_the_first_runs(
    plain_site: RunningSite, tmp_path: Path
) -> None:
    """The first run's writers are held inside their items (a Redis that never answers XADD),
    so it is surely running when the second starts; then SIGTERM stops it within its grace."""
    listing, _count = _listing(plain_site, tmp_path, pages=40)
    store = tmp_path / "store"
    command = fetch_command(listing, store, "--fetch-id", "78", "--cpus", "2")
    with stalling_redis() as (redis_url, stalled):
        first = _Started([*command, "--redis-url", redis_url], tmp_path)
        stopped_at = time.monotonic()
        try:
            wait_for(stalled.is_set, 30, "the first run's writers to be inside an item")
            second = run(command)
            stopped_at = time.monotonic()
            os.kill(first.pid, signal.SIGTERM)
        finally:
            code, err = first.finish(30)
        took = time.monotonic() - stopped_at
    assert second.returncode == 2, second.stderr
    [line] = second.stderr.splitlines()
    assert line.startswith("error: fetch 78 (offset 0, limit 80) is already running")
    assert f"pid {first.pid}" in line
    assert code == 130, err
    assert took < GRACE_SECONDS + 5  # stuck writers are given their grace, then killed
    resumed = run(command)
    assert resumed.returncode == 0, resumed.stderr
    assert store_lines(store) == _clean_run(listing, tmp_path, "78")
    assert _leftovers(store) == []


@pytest.mark.parametrize(
    ("how", "cpus"),
    [("SIGTERM", "2"), ("SIGTERM", "1"), ("Ctrl-C", "2")],
)
def test_sigterm_and_ctrl_c_stop_a_fetch_within_seconds_and_it_resumes(
    slow_site: RunningSite, tmp_path: Path, how: str, cpus: str
) -> None:
    listing, count = _listing(slow_site, tmp_path)
    store = tmp_path / "store"
    command = fetch_command(
        listing, store, "--fetch-id", "79", "--cpus", cpus, "--concurrency", "4"
    )
    first = _Started(command, tmp_path)
    stopped_at = time.monotonic()
    try:
        wait_for(lambda: log_lines(store) >= 30, 30, "the run to log 30 URLs")
        workers = children(first.pid)
        stopped_at = time.monotonic()
        if how == "SIGTERM":
            os.kill(first.pid, signal.SIGTERM)  # the parent only, as a supervisor does
        else:
            os.killpg(first.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole group
    finally:
        code, err = first.finish(15)
    took = time.monotonic() - stopped_at
    assert code == 130, err
    assert "interrupted" in err
    assert took < 10
    assert _survivors(workers) == []
    assert log_lines(store) < count
    resumed = run(command)
    assert resumed.returncode == 0, resumed.stderr
    assert store_lines(store) == _clean_run(listing, tmp_path, "79")


def test_an_item_cut_between_its_index_lines_and_its_log_line_is_completed_once(
    plain_site: RunningSite, tmp_path: Path
) -> None:
    """The writer stops inside an item (a Redis that never answers XADD: after the item's index
    lines, before its log line); kill -9 there; the resume completes it, fetching it no more."""
    listing = write_list(tmp_path / "urls.txt", [plain_site.page_url(n) for n in range(5)])
    store = tmp_path / "store"
    base = fetch_command(
        listing, store, "--fetch-id", "80", "--cpus", "1", "--concurrency", "1", "--writers", "1"
    )
    with stalling_redis() as (redis_url, stalled):
        cut = _Started([*base, "--redis-url", redis_url], tmp_path)
        try:
            wait_for(stalled.is_set, 30, "the writer to push its first item")
            os.kill(cut.pid, signal.SIGKILL)
        finally:
            cut.finish(10)
    url_index = store / "gofetch" / "index" / "url_sha384"
    url_files = [p for p in url_index.rglob("*") if p.is_file()]
    assert len(url_files) == 1 and log_lines(store) == 0  # cut inside the item

    resumed = run(base)
    assert resumed.returncode == 0, resumed.stderr
    assert plain_site.hits("/page/0") == 1  # completed, not fetched again
    assert store_lines(store) == _clean_run(listing, tmp_path, "80")
    assert _leftovers(store) == []
    assert "(1 done in an earlier run, 1 of them completed now)" in resumed.stderr


def test_the_store_is_owner_only(plain_site: RunningSite, tmp_path: Path) -> None:
    listing = write_list(tmp_path / "urls.txt", [plain_site.page_url(n) for n in range(6)])
    store = tmp_path / "store"
    previous = os.umask(0o022)  # the usual umask: it would make everything world-readable
    try:
        done = run(fetch_command(listing, store, "--fetch-id", "81", "--warc"))
    finally:
        os.umask(previous)
    assert done.returncode == 0, done.stderr
    paths = [store, *store.rglob("*")]
    kinds = {"file": 0, "dir": 0}
    for path in paths:
        mode = path.stat().st_mode & 0o777
        if path.is_dir():
            kinds["dir"] += 1
            assert mode == 0o700, f"{path} is {mode:o}"
        else:
            kinds["file"] += 1
            assert mode == 0o600, f"{path} is {mode:o}"
    # bodies, checksum lines, by-URL shard files (one per key prefix), log, WARC
    assert kinds["file"] >= 6 + 6 + 1 + 2 and kinds["dir"] >= 6


async def test_no_more_fetchers_or_writers_than_urls(plain_site: RunningSite, tmp_path: Path):
    """The maximums, for two URLs: two fetchers and two writers, not 10,000 and 1,000."""
    listing = write_list(tmp_path / "urls.txt", [plain_site.page_url(n) for n in range(2)])
    settings = FetchSettings.resolve(
        {
            "store": str(tmp_path / "store"),
            "fetch_id": "82",
            "max_cpus": 1024,
            "concurrent_fetches": 10_000,
            "concurrent_writers": 1_000,
        },
        environ={},
    )
    assert settings.processes <= (os.cpu_count() or 1)
    most = 0

    def count(outcome: str) -> None:
        nonlocal most
        most = max(most, len(asyncio.all_tasks()))

    report = await fetch_items(settings, read_items(listing), log_limit=2, on_progress=count)
    assert report.stored == 2
    assert most < 20  # this test, two fetchers, two writers and the HTTP layer's own few
