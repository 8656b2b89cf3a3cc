"""The scrapeflow command, run as a user runs it: a subprocess."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiohttp import web

from scrapeflow.sandbox import serve_in_thread
from scrapeflow.status import load_status_file
from tests._cli import run_cli
from tests._tinyproxy import free_port


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_cli(args, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scrapeflow", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def write_urls(path: Path, urls: list[str]) -> Path:
    path.write_text("# pages of the sandbox\n\n" + "\n".join(urls) + "\n")
    return path


def snapshot(directory: Path) -> dict[str, bytes]:
    return (
        {p.name: p.read_bytes() for p in sorted(directory.iterdir())} if directory.exists() else {}
    )


def test_run_scrapes_every_url_then_resumes_with_nothing_to_do(tmp_path: Path, plain_site) -> None:
    urls = [plain_site.page_url(n) for n in range(30)] + [plain_site.page_url(3)]
    urls_file = write_urls(tmp_path / "urls.txt", urls)
    out = tmp_path / "out"

    first = cli("run", str(urls_file), "--dir", str(out), "--parallelism", "7")

    assert first.returncode == 0, first.stderr
    assert re.search(r"succeeded\s*│\s*30 │", first.stdout)
    assert "1 duplicate URL line" in first.stderr
    for url in urls:
        status = json.loads((out / f"{md5(url)}.status.json").read_text())
        assert status["params"] == {"url": url}
        assert status["scrape_status"] == "SUCCESS"
    assert plain_site.hits("/page/3") == 1

    second = cli("run", str(urls_file), "--dir", str(out))
    assert second.returncode == 0
    assert sum(plain_site.site.hits.values()) == 30
    assert all(
        json.loads(p.read_text())["scrape_status"] == "SKIPPED" for p in out.glob("*.status.json")
    )

    forced = cli("run", str(urls_file), "--dir", str(out), "--force", "all")
    assert forced.returncode == 0
    assert sum(plain_site.site.hits.values()) == 60


def test_failures_give_exit_1_and_a_summary_by_error(tmp_path: Path, plain_site) -> None:
    urls = [plain_site.page_url(1), f"{plain_site.url}/status/404", f"{plain_site.url}/status/500"]
    result = cli("run", str(write_urls(tmp_path / "u.txt", urls)), "--dir", str(tmp_path / "o"))
    assert result.returncode == 1
    assert "scrape: ERROR HTTPStatusError" in result.stdout
    status = cli("status", str(tmp_path / "o"))
    assert status.returncode == 0
    assert "ERROR HTTPStatusError::HTTP response 404" in status.stdout
    assert "SUCCESS" in status.stdout
    as_json = json.loads(cli("status", str(tmp_path / "o"), "--json").stdout)
    assert as_json == {
        "scrape": {
            "SUCCESS": 1,
            "ERROR HTTPStatusError::HTTP response 404": 1,
            "ERROR HTTPStatusError::HTTP response 500": 1,
        }
    }


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            ["http://127.0.0.1/a", "ftp://127.0.0.1/b"],
            "urls.txt:4: not an http(s) URL: 'ftp://127.0.0.1/b'",
        ),
        (["http://127.0.0.1/a", "just words"], "urls.txt:4: not an http(s) URL"),
        (["http:///nohost"], "urls.txt:3: URL has no host"),
        ([], "urls.txt: no URL in the file"),
    ],
)
def test_malformed_url_list_is_refused_and_nothing_touched(
    tmp_path: Path, plain_site, lines: list[str], expected: str
) -> None:
    out = tmp_path / "out"
    cli("run", str(write_urls(tmp_path / "seed.txt", [plain_site.page_url(1)])), "--dir", str(out))
    before = snapshot(out)
    result = cli("run", str(write_urls(tmp_path / "urls.txt", lines)), "--dir", str(out))
    assert result.returncode == 2
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(out) == before


def test_bad_paths_are_one_line_errors(tmp_path: Path, plain_site) -> None:
    urls_file = write_urls(tmp_path / "urls.txt", [plain_site.page_url(1)])
    missing = cli("run", str(tmp_path / "missing.txt"), "--dir", str(tmp_path / "o"))
    assert missing.returncode == 2
    assert "missing.txt: no such file" in missing.stderr

    a_file = tmp_path / "afile"
    a_file.write_text("")
    unwritable = cli("run", str(urls_file), "--dir", str(a_file / "sub"))
    assert unwritable.returncode == 2
    assert unwritable.stderr.startswith("error: cannot write status files")  # no progress bar
    assert len(unwritable.stderr.strip().splitlines()) == 1

    not_dir = cli("run", str(urls_file), "--dir", str(a_file))
    assert not_dir.returncode == 2
    assert "is not a directory" in not_dir.stderr

    no_status = cli("status", str(tmp_path / "nowhere"))
    assert no_status.returncode == 2
    assert "no such directory" in no_status.stderr

    bad_proxy = tmp_path / "proxies.txt"
    bad_proxy.write_text("socks5://u:secret@127.0.0.1:1080\n")
    proxied = cli("run", str(urls_file), "--dir", str(tmp_path / "o"), "--proxies", str(bad_proxy))
    assert proxied.returncode == 2
    assert "not a proxy URL" in proxied.stderr
    assert "secret" not in proxied.stderr
    assert not (tmp_path / "o").exists()


def test_status_files_of_another_task_set_are_refused(tmp_path: Path, plain_site) -> None:
    out = tmp_path / "out"
    first = write_urls(tmp_path / "a.txt", [plain_site.page_url(n) for n in range(3)])
    assert cli("run", str(first), "--dir", str(out)).returncode == 0
    before = snapshot(out)
    other = write_urls(tmp_path / "b.txt", [plain_site.page_url(n) for n in range(10, 13)])
    result = cli("run", str(other), "--dir", str(out))
    assert result.returncode == 2
    assert "different task set" in result.stderr
    assert snapshot(out) == before
    # A list that grows (shares URLs with the directory) is a resume, not another task set.
    grown = write_urls(tmp_path / "c.txt", [plain_site.page_url(n) for n in range(5)])
    assert cli("run", str(grown), "--dir", str(out)).returncode == 0
    assert len(list(out.glob("*.status.json"))) == 5


def test_unknown_force_name_is_refused(tmp_path: Path, plain_site) -> None:
    urls_file = write_urls(tmp_path / "urls.txt", [plain_site.page_url(1)])
    result = cli("run", str(urls_file), "--dir", str(tmp_path / "o"), "--force", "parse")
    assert result.returncode == 2
    assert (
        result.stderr.strip() == "error: --force names no executor of this run: parse (scrape, all)"
    )
    assert not (tmp_path / "o").exists()


def wait_for_status_files(directory: Path, at_least: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if directory.exists() and len(list(directory.glob("*.status.json"))) >= at_least:
            return
        if proc.poll() is not None:
            pytest.fail(f"run ended early: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.01)
    pytest.fail(f"fewer than {at_least} status files after 30 s")


def check_consistent(directory: Path) -> set[str]:
    """Every status file parses; every SUCCESS has its whole body. Returns the SUCCESS keys."""
    done = set()
    for path in directory.glob("*.status.json"):
        status = load_status_file(path)  # raises StatusCorrupt on a cut file
        assert status is not None
        if status["scrape_status"] in ("SUCCESS", "SKIPPED"):
            body = (directory / f"{status['name']}.scrape").read_bytes()
            assert hashlib.md5(body).hexdigest() == status["scrape"]["content"]
            done.add(status["name"])
    return done


def test_kill_9_at_any_moment_loses_nothing_and_refetches_nothing(
    tmp_path: Path, slow_site
) -> None:
    urls = [slow_site.page_url(n) for n in range(600)]
    urls_file = write_urls(tmp_path / "urls.txt", urls)
    out = tmp_path / "out"
    done_before_kill: set[str] = set()
    hits_when_done: dict[str, int] = {}
    kills = 0
    for threshold in (40, 200, 420):
        proc = start("run", str(urls_file), "--dir", str(out), "--parallelism", "10")
        wait_for_status_files(out, threshold, proc)
        time.sleep(0.037 * kills)  # vary the moment within the write cycle
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        kills += 1
        done = check_consistent(out)
        assert done >= done_before_kill, "a finished task was lost"
        for url in urls:
            if md5(url) in done and md5(url) not in done_before_kill:
                hits_when_done[url] = slow_site.hits(url.removeprefix(slow_site.url))
        done_before_kill = done

    final = cli("run", str(urls_file), "--dir", str(out), "--parallelism", "10")
    assert final.returncode == 0, final.stderr
    assert check_consistent(out) == {md5(u) for u in urls}
    for url, hits in hits_when_done.items():
        path = url.removeprefix(slow_site.url)
        assert slow_site.hits(path) == hits, f"{path} fetched again after it succeeded"
    # Only the requests in flight at each kill (at most --parallelism) were sent twice.
    assert sum(slow_site.site.hits.values()) <= len(urls) + kills * 10
    assert not list(out.glob("*.sf-tmp-*")), "the next run sweeps temp files of dead runs"


def test_ctrl_c_stops_cleanly_and_a_second_run_resumes(tmp_path: Path, slow_site) -> None:
    urls = [slow_site.page_url(n) for n in range(400)]
    urls_file = write_urls(tmp_path / "urls.txt", urls)
    out = tmp_path / "out"
    proc = start("run", str(urls_file), "--dir", str(out), "--parallelism", "10")
    wait_for_status_files(out, 50, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert "interrupted" in stderr and "run the same command to resume" in stderr
    done = check_consistent(out)
    assert 50 <= len(done) < 400

    final = cli("run", str(urls_file), "--dir", str(out))
    assert final.returncode == 0
    assert check_consistent(out) == {md5(u) for u in urls}
    for url in urls:
        if md5(url) in done:
            assert slow_site.hits(url.removeprefix(slow_site.url)) == 1, "refetched after success"


@pytest.mark.parametrize(
    "line",
    [
        "1.2.3.4:8080:bob:S3CRET",
        "bob:S3CRET@1.2.3.4:8080",
        "http://bob:S3/CRET@1.2.3.4",
        "socks5://bob:S3CRET@1.2.3.4:1080",
    ],
)
def test_a_bad_proxy_line_is_named_but_never_shown(tmp_path: Path, plain_site, line: str) -> None:
    proxies = tmp_path / "proxies.txt"
    proxies.write_text(f"# mine\n{line}\n")
    urls_file = write_urls(tmp_path / "urls.txt", [plain_site.page_url(1)])
    result = cli("run", str(urls_file), "--dir", str(tmp_path / "o"), "--proxies", str(proxies))
    assert result.returncode == 2
    assert "proxies.txt:2: not a proxy URL" in result.stderr
    assert "S3" not in result.stderr and "CRET" not in result.stderr


def test_file_names_with_brackets_are_printed_as_they_are(tmp_path: Path) -> None:
    result = cli("run", str(tmp_path / "x[/y].txt"), "--dir", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "x[/y].txt: no such file" in result.stderr


def test_a_corrupt_status_of_the_list_stops_the_run_before_any_fetch(
    tmp_path: Path, plain_site
) -> None:
    urls = [plain_site.page_url(n) for n in range(10)]
    urls_file = write_urls(tmp_path / "urls.txt", urls)
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{md5(urls[0])}.status.json").write_text(
        json.dumps({"name": md5(urls[0]), "params": {"url": urls[0]}})
    )
    (out / f"{md5(urls[7])}.status.json").write_text('{"name": "cut')
    before = snapshot(out)
    result = cli("run", str(urls_file), "--dir", str(out))
    assert result.returncode == 2
    assert f"{md5(urls[7])}.status.json is not valid JSON" in result.stderr
    assert snapshot(out) == before
    assert sum(plain_site.site.hits.values()) == 0


def test_status_skips_and_reports_foreign_files(tmp_path: Path, plain_site) -> None:
    out = tmp_path / "out"
    cli("run", str(write_urls(tmp_path / "u.txt", [plain_site.page_url(1)])), "--dir", str(out))
    (out / "x.status.json").write_text('{"not": "ours", "html": "[/div]"}')
    result = cli("status", str(out))
    assert result.returncode == 0
    assert (
        "skipped 1 file(s) that are not scrapeflow statuses (first: x.status.json)" in result.stderr
    )
    assert "SUCCESS" in result.stdout


def test_bad_log_level_is_refused() -> None:
    result = cli("--log-level", "verbose", "status", ".")
    assert result.returncode == 2
    assert "verbose" in result.stderr


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_what_a_run_writes_is_readable_by_its_owner_only(tmp_path: Path, plain_site) -> None:
    """Status files and bodies are 0600 and the directories the run makes 0700, whatever the
    umask; a directory that was there keeps its mode."""
    urls_file = write_urls(tmp_path / "urls.txt", [plain_site.page_url(n) for n in range(3)])
    kept = tmp_path / "kept"
    kept.mkdir(mode=0o755)
    out = kept / "made" / "by" / "run"
    command = [sys.executable, "-m", "scrapeflow", "run", str(urls_file), "--dir", str(out)]
    # then again, forced: replaced files (a temp file renamed over each) too
    for extra in ([], ["--force", "all"]):
        result = subprocess.run(
            [*command, *extra], capture_output=True, text=True, timeout=60, umask=0o022
        )
        assert result.returncode == 0, result.stderr
    files = sorted(out.iterdir())
    assert len(files) == 6  # 3 status files, 3 bodies
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    for made in (out, out.parent, out.parent.parent):
        assert mode(made) == 0o700, made
    assert mode(kept) == 0o755  # it was there: left as it was


@pytest.fixture
def hanging_site() -> Iterator[tuple[str, threading.Event]]:
    """A site whose one page never answers; the event is set when it is asked for."""
    asked, release = threading.Event(), threading.Event()

    async def hang(request: web.Request) -> web.Response:
        asked.set()
        while not release.is_set():  # until the test ends: the server then stops at once
            await asyncio.sleep(0.05)
        return web.Response()

    def make_app() -> web.Application:
        app = web.Application()
        app.router.add_get("/hang", hang)
        return app

    with serve_in_thread(make_app) as url:
        yield f"{url}/hang", asked
        release.set()


def test_sigterm_stops_a_run_at_once_with_long_urls_and_huge_parallelism(
    tmp_path: Path, hanging_site
) -> None:
    """Long URLs that fail are redacted in linear time: the event loop stays free to see the
    signal (quadratic redaction held it for minutes, and the run ignored SIGTERM)."""
    hang_url, asked = hanging_site
    closed = f"http://127.0.0.1:{free_port()}"
    long_urls = [f"{closed}/{n}/{'a' * 60_000}" for n in range(4)]  # under the 64 KiB limit
    urls_file = write_urls(tmp_path / "urls.txt", [hang_url, *long_urls])
    proc = start(
        "run",
        str(urls_file),
        "--dir",
        str(tmp_path / "o"),
        "--parallelism",
        "10000",
        "--retries",
        "0",
    )
    try:
        asked.wait(timeout=10)  # the run is under way
        time.sleep(1.0)  # the long URLs have failed by now: their errors are being recorded
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert time.monotonic() - started < 10
    assert "interrupted" in stderr
    assert asked.is_set()  # it was stopped in the middle of the run


def test_sigterm_while_the_inputs_are_checked_is_an_interrupt_too(tmp_path: Path) -> None:
    # A list of 400,000 URLs takes a while to check; SIGTERM then is exit 130, not a kill.
    urls_file = tmp_path / "urls.txt"
    urls_file.write_text("".join(f"http://127.0.0.1:1/{n}\n" for n in range(400_000)))
    out = tmp_path / "o"
    proc = start("run", str(urls_file), "--dir", str(out))
    try:
        deadline = time.monotonic() + 60
        while not catches(proc.pid, signal.SIGTERM):  # the command has begun
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)
        assert not out.exists()  # the run has not: the inputs are being checked
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert not out.exists()


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (Linux's SigCgt)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


def test_version_and_a_bare_group_print_what_was_asked() -> None:
    from importlib.metadata import version

    shown = cli("--version")
    assert (shown.returncode, shown.stdout, shown.stderr) == (
        0,
        f"scrapeflow {version('scrapeflow')}\n",
        "",
    )
    bare = cli("bank")  # its help, as help: on stdout, no "error:"
    assert bare.returncode == 2
    assert bare.stdout.startswith("Usage: ") and "scrapeflow bank [OPTIONS]" in bare.stdout
    assert "add-access" in bare.stdout
    assert bare.stderr == ""


def test_a_prompt_at_the_end_of_input_is_bad_input_naming_what_is_missing(tmp_path: Path) -> None:
    def bank(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "scrapeflow",
                "bank",
                "--db",
                f"sqlite+aiosqlite:///{db}",
                *args,
            ],
            stdin=subprocess.DEVNULL,  # at its end at once
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SCRAPEFLOW_VAULT_KEYS": "", **env},
        )

    db = tmp_path / "bank.db"
    missing = bank("add-access", "cust-1", "formbank", "bob")
    assert missing.returncode == 2
    assert "make a key with `scrapeflow bank new-key`" in missing.stderr  # not a Python call
    key = bank("new-key").stdout.strip()
    no_password = bank("add-access", "cust-1", "formbank", "bob", SCRAPEFLOW_VAULT_KEYS=key)
    assert no_password.returncode == 2  # was 130, as if interrupted, and said nothing
    assert no_password.stderr.strip().splitlines()[-1] == (
        "error: no password given: standard input ended (pipe it with --password-stdin)"
    )
    no_code = bank("otp", "1", SCRAPEFLOW_VAULT_KEYS=key)
    assert no_code.returncode == 2
    assert "no code given: standard input ended" in no_code.stderr


def test_a_global_option_after_its_command_says_where_it_goes() -> None:
    for args, option, where in [
        (("run", "--log-level", "INFO", "urls.txt"), "--log-level", "run"),
        (("bank", "status", "--log-json", "cust-1"), "--log-json", "bank status"),
    ]:
        done = cli(*args)
        assert done.returncode == 2
        assert done.stderr == f"error: {option} is a global option: put it before {where}\n"


def test_every_help_is_in_words() -> None:
    """No Python types (``<int>``, ``<list[str]>``), no ``[default: (100)]``, no
    reStructuredText backticks, no summary cut with an ellipsis, in any command's help."""

    def commands_of(help_text: str) -> list[str]:
        listed = help_text.split("\nCommands:\n", 1)
        if len(listed) == 1:
            return []
        names = []
        for line in listed[1].splitlines():
            if not line.strip() or not line.startswith("  "):
                break
            if not line.startswith("   "):  # a command's line, not a wrapped summary
                names.append(line.split()[0])
        return names

    def helps(path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
        shown = cli(*path, "--help")
        assert shown.returncode == 0, (path, shown.stderr)
        yield path, shown.stdout
        with ThreadPoolExecutor(4) as threads:
            below = list(
                threads.map(lambda name: list(helps((*path, name))), commands_of(shown.stdout))
            )
        for found in below:
            yield from found

    every = dict(helps(()))
    assert len(every) > 25 and ("bank", "movements") in every and ("keys", "rotate") in every
    for path, text in every.items():
        where = " ".join(("scrapeflow", *path))
        assert not re.search(r"<(int|float|str|path|file|directory|bool|list\[)", text), where
        assert "[default: (" not in text and "``" not in text and "{" not in text, where
        assert not re.search(r"^ {2,}.*\w\.\.\.$", text, re.MULTILINE), where  # cut short
    runs = every[("run",)]
    assert "Usage: scrapeflow run [OPTIONS] URLS_FILE" in runs
    assert re.search(
        r"--parallelism N +Concurrent tasks \(at most 10,000\)\.  \[default: 100\]", runs
    )
    assert "  Fetch a URL list into a content-addressed store (gofetch): bodies" in every[()]


def test_a_worker_without_postgresql_or_its_extra_exits_2_at_once(tmp_path: Path) -> None:
    """Like serve: refused with a line naming what is missing, never retried forever."""
    env = {
        **os.environ,
        "SCRAPEFLOW_JOBS_BACKEND": "procrastinate",
        "SCRAPEFLOW_DB_URL": f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}",
    }
    sqlite = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "worker"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert sqlite.returncode == 2
    assert sqlite.stderr.strip() == (
        "error: SCRAPEFLOW_JOBS_BACKEND: 'procrastinate' runs on PostgreSQL: db_url must be "
        f"postgresql://…, got 'sqlite+aiosqlite:///{tmp_path / 'jobs.db'}'"
    )
    # procrastinate not installed (its import refused, as on a machine without the extra)
    without = "import sys; sys.modules['procrastinate'] = None; import runpy; "
    without += "runpy.run_module('scrapeflow', run_name='__main__')"
    missing = subprocess.run(
        [sys.executable, "-c", without, "worker"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env | {"SCRAPEFLOW_DB_URL": "postgresql://127.0.0.1:1/nowhere"},
    )
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.strip() == (
        "error: the procrastinate job backend needs the 'distributed' extra: pip install "
        "'scrapeflow[distributed]' (in a checkout: pip install -e '.[distributed]')"
    )
