"""Bad input to ``run``, ``status``, ``demo`` and ``sandbox``, as a careless or hostile user
gives it: exit code 2, one line on stderr naming what is wrong, nothing created or changed, and
never a hang (every case runs under a timeout).

Each table row is ``(id, arguments, what the line must say)``. Arguments are templates filled
from the workspace of :func:`workspace`: ``{urls}`` a good URL list, ``{out}`` a directory that
does not exist yet, ``{fifo}`` a FIFO, ``{latin1}`` a file that is not UTF-8, and so on. A new
command's bad inputs go in a table of their own here, checked by the same function.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from scrapeflow.urllist import url_key
from tests._cli import run_cli

URL = "http://127.0.0.1:9/a"  # never fetched: every case is refused first
KEY = url_key(URL)


@pytest.fixture
def workspace(tmp_path: Path) -> dict[str, str]:
    """The files the rows refer to, all in ``tmp_path``."""
    (tmp_path / "urls.txt").write_text(f"# a list\n{URL}\n")
    (tmp_path / "latin1.txt").write_bytes("http://127.0.0.1:9/caf\xe9\n".encode("latin-1"))
    (tmp_path / "long.txt").write_text(f"{URL}\nhttp://127.0.0.1:9/{'a' * 70_000}\n")
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    (tmp_path / "ftp.txt").write_text("ftp://127.0.0.1/a\n")
    (tmp_path / "proxy-bad.txt").write_text("socks5://u:S3CRET@127.0.0.1:1080\n")
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    # Status directories whose "status file" for URL is not a file.
    for name, make in {
        "status-dir": lambda p: p.mkdir(),
        "status-fifo": os.mkfifo,
        "status-zero": lambda p: p.symlink_to("/dev/zero"),
    }.items():
        (tmp_path / name).mkdir()
        make(tmp_path / name / f"{KEY}.status.json")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x.status.json").write_text('{"not": "ours"}')
    names = [p.name for p in tmp_path.iterdir()]
    return {
        **{name.replace("-", "_").removesuffix(".txt"): str(tmp_path / name) for name in names},
        "out": str(tmp_path / "out"),
        "missing": str(tmp_path / "missing.txt"),
        "root": str(tmp_path),
    }


def tree(root: Path) -> dict[str, object]:
    """Every entry under ``root``: its type and, for a regular file, its bytes (FIFOs and
    devices are never opened)."""
    entries: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        entries[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), content)
    return entries


def check_refused(args: list[str], message: str, workspace: dict[str, str]) -> None:
    root = Path(workspace["root"])
    before = tree(root)
    filled = [arg.format(**workspace) for arg in args]
    result = run_cli(filled, timeout=30, env={**os.environ, "COLUMNS": "300"})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message.format(**workspace) in lines[0]
    assert "S3CRET" not in result.stderr
    assert tree(root) == before, "something was created or changed"


RUN = ["run", "{urls}", "--dir", "{out}"]
RUN_CASES = [
    # durations: not finite, not positive
    ("timeout nan", [*RUN, "--timeout", "nan"], "--timeout"),
    ("timeout inf", [*RUN, "--timeout", "inf"], "--timeout"),
    ("timeout 0", [*RUN, "--timeout", "0"], "--timeout"),
    ("timeout negative", [*RUN, "--timeout", "-1"], "--timeout"),
    ("delay nan", [*RUN, "--delay", "nan"], "--delay"),
    ("delay inf", [*RUN, "--delay", "inf"], "--delay"),
    ("delay negative", [*RUN, "--delay", "-0.5"], "--delay"),
    # counts: not positive, absurd, not an int
    ("parallelism 0", [*RUN, "--parallelism", "0"], "--parallelism"),
    ("parallelism over the cap", [*RUN, "--parallelism", "10001"], "--parallelism"),
    ("parallelism 1e20", [*RUN, "--parallelism", "1e20"], "--parallelism"),
    ("parallelism 20 digits", [*RUN, "--parallelism", "99999999999999999999"], "--parallelism"),
    ("per-host 0", [*RUN, "--per-host", "0"], "--per-host"),
    ("retries negative", [*RUN, "--retries", "-1"], "--retries"),
    ("retries 1e20", [*RUN, "--retries", "1e20"], "--retries"),
    ("rotate-after 0", [*RUN, "--rotate-after", "0"], "--rotate-after"),
    ("identity bogus", [*RUN, "--identity", "bogus"], "--identity"),
    ("force unknown", [*RUN, "--force", "parse"], "--force names no executor"),
    # the URL list
    ("list missing", ["run", "{missing}", "--dir", "{out}"], "missing.txt: no such file"),
    ("list a directory", ["run", "{adir}", "--dir", "{out}"], "adir: is a directory"),
    ("list a FIFO", ["run", "{fifo}", "--dir", "{out}"], "fifo: is a FIFO"),
    ("list a device", ["run", "/dev/zero", "--dir", "{out}"], "/dev/zero: is a device"),
    ("list not UTF-8", ["run", "{latin1}", "--dir", "{out}"], "latin1.txt:1: not UTF-8"),
    ("list line too long", ["run", "{long}", "--dir", "{out}"], "long.txt:2: line longer than"),
    ("list empty", ["run", "{empty}", "--dir", "{out}"], "no URL in the file"),
    ("list not http", ["run", "{ftp}", "--dir", "{out}"], "ftp.txt:1: not an http(s) URL"),
    # the proxy list
    ("proxies missing", [*RUN, "--proxies", "{missing}"], "missing.txt: no such file"),
    ("proxies not UTF-8", [*RUN, "--proxies", "{latin1}"], "the proxy list is not UTF-8"),
    ("proxies a FIFO", [*RUN, "--proxies", "{fifo}"], "fifo: is a FIFO"),
    ("proxies a device", [*RUN, "--proxies", "/dev/zero"], "/dev/zero: is a device"),
    ("proxies a directory", [*RUN, "--proxies", "{adir}"], "adir: is a directory"),
    ("proxies bad line", [*RUN, "--proxies", "{proxy_bad}"], "proxy-bad.txt:1: not a proxy URL"),
    # the status directory
    ("dir a file", ["run", "{urls}", "--dir", "{afile}"], "is not a directory"),
    ("dir under a file", ["run", "{urls}", "--dir", "{afile}/sub"], "cannot write status files"),
    (
        "status file a directory",
        ["run", "{urls}", "--dir", "{status_dir}"],
        f"{KEY}.status.json is a directory",
    ),
    ("status file a FIFO", ["run", "{urls}", "--dir", "{status_fifo}"], "is a FIFO"),
    ("status file a link to /dev/zero", ["run", "{urls}", "--dir", "{status_zero}"], "is a device"),
]

STATUS_CASES = [
    ("missing", ["status", "{out}"], "no such directory"),
    ("a file", ["status", "{afile}"], "not a directory"),
    ("a FIFO", ["status", "{fifo}"], "not a directory"),
    ("status file a directory", ["status", "{status_dir}"], f"{KEY}.status.json is a directory"),
    ("status file a FIFO", ["status", "{status_fifo}"], f"{KEY}.status.json is a FIFO"),
    ("status file a link to /dev/zero", ["status", "{status_zero}"], "is a device"),
    ("only foreign files", ["status", "{foreign}"], "no status files; skipped 1 file(s)"),
]

DEMO_CASES = [
    ("pages 1e20", ["demo", "--pages", "1e20"], "--pages"),
    ("pages 20 digits", ["demo", "--pages", "99999999999999999999"], "--pages"),
    ("pages over the cap", ["demo", "--pages", "100001"], "--pages"),
    ("pages 0", ["demo", "--pages", "0"], "--pages"),
    ("pages negative", ["demo", "--pages", "-3"], "--pages"),
    ("pages nan", ["demo", "--pages", "nan"], "--pages"),
    ("dir a file", ["demo", "--dir", "{afile}"], "--dir"),
    ("dir under a file", ["demo", "--dir", "{afile}/sub"], "--dir"),
]

SANDBOX_CASES = [
    ("host empty", ["sandbox", "--host", ""], "host '' is not a loopback address"),
    ("host every interface", ["sandbox", "--host", "0.0.0.0"], "'0.0.0.0' is not a loopback"),
    ("host every interface v6", ["sandbox", "--host", "::"], "'::' is not a loopback"),
    ("host private", ["sandbox", "--host", "10.0.0.1"], "--allow-remote"),
    ("host a name", ["sandbox", "--host", "example.com"], "--allow-remote"),
    ("customers 1e20", ["sandbox", "--customers", "1e20"], "--customers"),
    ("customers 0", ["sandbox", "--customers", "0"], "--customers"),
    ("customers over the cap", ["sandbox", "--customers", "1000000"], "--customers"),
    ("seed 1e20", ["sandbox", "--seed", "1e20"], "--seed"),
    ("latency inf", ["sandbox", "--latency-ms", "inf"], "--latency-ms"),
    ("latency nan", ["sandbox", "--latency-ms", "nan-5"], "--latency-ms"),
    ("latency reversed", ["sandbox", "--latency-ms", "9-1"], "--latency-ms"),
    ("hostility unknown", ["sandbox", "--hostility", "evil"], "unknown hostility profile"),
    ("switch unknown", ["sandbox", "--set", "nope=1"], "unknown hostility switch"),
    ("manifest a directory", ["sandbox", "--manifest", "{adir}"], "--manifest"),
    ("manifest under a file", ["sandbox", "--manifest", "{afile}/m.json"], "--manifest"),
    (
        "refused host, manifest not written",
        ["sandbox", "--host", "0.0.0.0", "--manifest", "{out}.json"],
        "not a loopback",
    ),
]


def table(cases: list[tuple[str, list[str], str]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(
        ("args", "message"),
        [(args, message) for _, args, message in cases],
        ids=[c[0] for c in cases],
    )


@table(RUN_CASES)
def test_run_refuses(workspace: dict[str, str], args: list[str], message: str) -> None:
    check_refused(args, message, workspace)


@table(STATUS_CASES)
def test_status_refuses(workspace: dict[str, str], args: list[str], message: str) -> None:
    check_refused(args, message, workspace)


@table(DEMO_CASES)
def test_demo_refuses(workspace: dict[str, str], args: list[str], message: str) -> None:
    check_refused(args, message, workspace)


@table(SANDBOX_CASES)
def test_sandbox_refuses(workspace: dict[str, str], args: list[str], message: str) -> None:
    check_refused(args, message, workspace)
