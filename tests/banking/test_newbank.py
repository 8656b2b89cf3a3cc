"""``scrapeflow bank new``: a package for a new bank that installs with ``pip install -e`` and
passes its own test at once, then reads the sandbox bank it starts from, live."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scrapeflow.sandbox import Sandbox
from tests._venv import child_environment

from .test_bank_cli import Cli, credentials


def test_a_new_bank_of_each_kind_installs_passes_its_test_and_reads_its_bank(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    cli = Cli(tmp_path, sandbox)
    for name, kind in (("acme_api", "api"), ("acme_html", "html")):
        done = cli("new", name, "--kind", kind, "--directory", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        assert "pip install -e ." in done.stdout
        package = tmp_path / name
        assert (package / "src" / f"scrapeflow_bank_{name}" / "scraper.py").exists()
        assert (package / "tests" / f"test_{name}.py").exists()
        assert (package / "tests" / "recordings" / "session.har").exists()
    python = child_environment(tmp_path / "env") / "python"
    installed = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "-e",
            str(tmp_path / "acme_api"),
            "-e",
            str(tmp_path / "acme_html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    for name in ("acme_api", "acme_html"):
        tested = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path / name,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert tested.returncode == 0, tested.stdout[-3000:]
        assert "1 passed" in tested.stdout
    listed = subprocess.run(
        [python, "-m", "scrapeflow", "bank", "scrapers"], capture_output=True, text=True
    )
    assert "acme_api" in listed.stdout and "acme_html" in listed.stdout
    # The new scraper reads the sandbox bank it starts from, live.
    login = credentials(cli, "apibank", 7)
    tried = subprocess.run(
        [
            python,
            "-m",
            "scrapeflow",
            "bank",
            "--sandbox",
            str(cli.manifest),
            "try",
            "acme_api",
            "--bank-url",
            sandbox.urls["apibank"],
            "--login",
            login["username"],
            "--password-stdin",
        ],
        input=login["password"] + "\n",
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=90,
    )
    assert tried.returncode == 0, tried.stderr[-2000:]
    assert "acme_api: success" in tried.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("new", "Acme"), "bank name 'Acme'"),
        (("new", "a"), "bank name 'a'"),
        (("new", "acme", "--kind", "soap"), "--kind 'soap'"),
        (("new", "apibank"), "installed already"),
        (("new", "acme", "--directory", "{full}"), "not an empty directory"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_makes_nothing(
    tmp_path: Path, sandbox: Sandbox, args: tuple[str, ...], says: str
) -> None:
    cli = Cli(tmp_path, sandbox)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "bank", *(a.format(full=full) for a in args)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli.env,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (full / "keep.txt").read_text() == "mine"
