"""Bad input to ``scrapeflow fetch``, as a careless or hostile user gives it: every case ends with
exit code 2 and one line on stderr naming what was wrong, at once (a FIFO is not waited on), and
nothing is written — not the store, not its log, not a spool.

One row per case; a new flag, variable or config key gets its rows here. The command runs as a
user runs it (``python -m scrapeflow fetch``), in a clean environment, against a test's own
directory (the spool directory, ``$XDG_CACHE_HOME``, is inside it too).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests._cli import run_cli


@dataclass(frozen=True)
class Case:
    """One bad input. ``says`` is a regular expression the stderr line must contain."""

    id: str
    says: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    toml: str | None = None  # a gofetch TOML file, given with fetch --config
    root_toml: str | None = None  # scrapeflow's own config file, given before the command
    listing: str = "urls.txt"  # see _make_listing
    store: str = "store"  # under the test's directory, unless absolute or "UNWRITABLE"


def _toml(key: str, value: str, says: str) -> Case:
    return Case(f"toml-{key}-{value}", says, toml=f"[fetch]\n{key} = {value}\n")


CASES = [
    # -- the store -------------------------------------------------------------------------
    Case("store-is-a-file", r"cannot create directory .*afile: a file is there", store="afile"),
    Case("store-is-dev-null", r"/dev/null: a file is there", store="/dev/null"),
    Case("store-unwritable", r"cannot create directory|is not writable", store="UNWRITABLE"),
    Case("store-empty", r"--store is empty", args=("--store", "")),
    Case("store-tab", r"--store must not hold a tab", args=("--store", "a\tb")),
    # -- a gofetch TOML file: every key of the wrong type or out of bounds -----------------
    _toml("fetch_id", "123", r"fetch\.toml: fetch_id must be a string, got 123 \(quote it"),
    _toml("redis_url", "7", r"fetch\.toml: redis_url must be a string, got 7"),
    _toml("log_level", '"NOPE"', r"fetch\.toml: log_level must be one of DEBUG, INFO"),
    _toml("default_processor", '["RSS"]', r"fetch\.toml: default_processor must be a string"),
    _toml("default_processor", '"R\\tS"', r"default_processor must not hold a tab"),
    _toml("indexes", '"url_sha384"', r"fetch\.toml: indexes must be a list of index names"),
    _toml("indexes", '["nope"]', r"fetch\.toml: indexes: unknown index 'nope'; registered"),
    _toml("indexes", "[1]", r"fetch\.toml: indexes: unknown index 1"),
    _toml("warc", '"yes"', r"fetch\.toml: warc must be true or false"),
    _toml("concurrent_fetches", "1e20", r"concurrent_fetches must be a whole number"),
    _toml("concurrent_fetches", "100001", r"concurrent_fetches must be between 1 and 10,000"),
    _toml("concurrent_writers", "true", r"concurrent_writers must be a whole number"),
    _toml("max_cpus", "0", r"fetch\.toml: max_cpus must be between 1 and 1,024"),
    _toml("offset", '"5"', r"fetch\.toml: offset must be a whole number"),
    _toml("program", '"../up"', r"fetch\.toml: program: program '\.\./up' is not usable"),
    _toml("store", "5", r"fetch\.toml: store must be a string"),
    _toml("bucket", "[]", r"fetch\.toml: bucket must be a string"),
    _toml("nonsense", "1", r"fetch\.toml: unknown key\(s\) nonsense"),
    Case("toml-not-toml", r"fetch\.toml: not a TOML config file", toml="[fetch\n"),
    Case(
        "root-config-fetch-id",
        r"scrapeflow\.toml \[fetch\]: fetch_id must be a string",
        root_toml="[fetch]\nfetch_id = 123\n",
    ),
    # -- flags -----------------------------------------------------------------------------
    Case(
        "concurrency-absurd",
        r"--concurrency must be between 1 and 10,000, got 99999999999999999999",
        args=("--concurrency", "99999999999999999999"),
    ),
    Case("concurrency-zero", r"--concurrency must be between 1", args=("--concurrency", "0")),
    Case("writers-absurd", r"--writers must be between 1 and 1,000", args=("--writers", "1000001")),
    Case("cpus-absurd", r"--cpus must be between 1 and 1,024", args=("--cpus", "99999")),
    Case("cpus-negative", r"--cpus must be between 1", args=("--cpus", "-1")),
    Case("offset-negative", r"--offset must be between 0", args=("--offset", "-1")),
    Case("limit-zero", r"--limit must be between 1", args=("--limit", "0")),
    Case("fetch-id-path", r"--fetch-id must be letters, digits", args=("--fetch-id", "a/../b")),
    Case("program-empty", r"--program: program '' is not usable", args=("--program", "")),
    Case(
        "redis-url-not-redis",
        r"--redis-url must be a redis://, rediss:// or unix:// URL",
        args=("--redis-url", "http://127.0.0.1:6379"),
    ),
    Case(
        "redis-unreachable",
        r"cannot reach Redis at redis://127\.0\.0\.1:1",
        args=("--redis-url", "redis://127.0.0.1:1/0"),
    ),
    Case("config-missing", r"nope\.toml: no such config file", args=("--config", "nope.toml")),
    # -- gofetch's variables ---------------------------------------------------------------
    Case(
        "env-concurrent-fetches-absurd",
        r"CONCURRENT_FETCHES must be between 1 and 10,000",
        env={"CONCURRENT_FETCHES": "99999999999999999999"},
    ),
    Case(
        "env-concurrent-fetches-words",
        r"CONCURRENT_FETCHES must be a whole number, got 'many'",
        env={"CONCURRENT_FETCHES": "many"},
    ),
    Case(
        "env-writers-zero",
        r"CONCURRENT_S3WRITERS must be between 1",
        env={"CONCURRENT_S3WRITERS": "0"},
    ),
    Case("env-max-cpus", r"MAX_CPUS must be between 1 and 1,024", env={"MAX_CPUS": "100000"}),
    Case("env-log-level", r"LOG_LEVEL must be one of", env={"LOG_LEVEL": "NOPE"}),
    Case("env-fetch-id", r"FETCH_ID must be letters", env={"FETCH_ID": "a.b"}),
    Case("env-fetch-limit", r"FETCH_LIMIT must be between 1", env={"FETCH_LIMIT": "0"}),
    Case("env-redis-url", r"REDIS_URL must be a redis://", env={"REDIS_URL": "nope"}),
    # -- the URL list ----------------------------------------------------------------------
    Case("list-fifo", r"urls\.fifo: is a FIFO, not a URL list file", listing="urls.fifo"),
    Case("list-dev-zero", r"/dev/zero: is a character device", listing="/dev/zero"),
    Case("list-link-to-dev-zero", r"zero\.txt: is a character device", listing="zero.txt"),
    Case("list-directory", r"is a directory, not a URL list", listing="adir"),
    Case("list-missing", r"missing\.txt: no such file", listing="missing.txt"),
    Case("list-processor-tab", r"urls\.jsonl:2: the processor name holds a tab", listing="tab"),
    Case("list-not-a-url", r"urls\.txt:4: not an http\(s\) URL", listing="ftp"),
]


def _make_listing(case: Case, directory: Path) -> str:
    if case.listing in ("urls.txt", "ftp"):
        urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
        if case.listing == "ftp":
            urls.append("ftp://127.0.0.1/c")
        (directory / "urls.txt").write_text("# a list\n" + "\n".join(urls) + "\n")
        return str(directory / "urls.txt")
    if case.listing == "urls.fifo":
        os.mkfifo(directory / "urls.fifo")
    elif case.listing == "zero.txt":
        (directory / "zero.txt").symlink_to("/dev/zero")
    elif case.listing == "adir":
        (directory / "adir").mkdir()
    elif case.listing == "tab":
        rows = [
            '{"url": "http://127.0.0.1:9/a"}',
            '{"url": "http://127.0.0.1:9/b", "processor": "R\\tS"}',
        ]
        (directory / "urls.jsonl").write_text("\n".join(rows) + "\n")
        return str(directory / "urls.jsonl")
    return case.listing if case.listing.startswith("/") else str(directory / case.listing)


def _make_store(case: Case, directory: Path) -> str:
    if case.store == "UNWRITABLE":
        if os.geteuid() == 0:  # permissions do not stop root: a directory the kernel refuses
            return "/sys/kernel"
        locked = directory / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return str(locked)
    if case.store == "afile":
        (directory / "afile").write_text("not a directory")
    return case.store if case.store.startswith("/") else str(directory / case.store)


def _snapshot(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``directory`` with its mode, size and modification time."""
    found = {}
    for path in [directory, *directory.rglob("*")]:
        info = path.lstat()
        found[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case: Case, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    listing = _make_listing(case, work)
    store = _make_store(case, work)
    root: list[str] = []
    if case.root_toml is not None:
        (work / "scrapeflow.toml").write_text(case.root_toml)
        root = ["--config", str(work / "scrapeflow.toml")]
    command = [*root, "fetch", listing, "--fetch-id", "1"]
    if "--store" not in case.args:
        command += ["--store", store]
    if case.toml is not None:
        (work / "fetch.toml").write_text(case.toml)
        command += ["--config", str(work / "fetch.toml")]
    command += list(case.args)
    before = _snapshot(tmp_path)

    result = run_cli(
        command, cwd=work, env={**os.environ, "COLUMNS": "300", **case.env}, timeout=20
    )

    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(case.says, lines[0]), lines[0]
    assert _snapshot(tmp_path) == before  # nothing made, nothing changed
