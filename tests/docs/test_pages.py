"""Every block a reader would paste from the README and docs/*.md runs, and prints what its page
shows (the rules: ``tests/docs/_markdown.py``, ``_expect.py``, ``_session.py``).

One test per page: its shell and Python blocks run in order in one shell, in a fresh
directory, with ``scrapeflow`` and ``python`` of this checkout first on ``PATH`` and a clean
environment, as a reader's terminal. The page starts what it needs (``scrapeflow sandbox …
&``, ``scrapeflow serve … &``) as it tells the reader to; the one change made to what a page
says is the service's port: a page's ``localhost:8000`` becomes a free port, so that pages run
side by side.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests._servers import unavailable
from tests._venv import child_environment
from tests.docs._expect import fits
from tests.docs._markdown import Step, parse_page, steps_of
from tests.docs._session import Outcome, ShellSession, StepTimeout

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
_OWN_ENVIRONMENT = {"docs/writing-a-bank.md"}
"""Pages whose reader runs ``pip install``: they get an environment of their own that sees
this one's packages (``tests/_venv.py``), so that what they install stays there."""
_PORT_8000 = re.compile(r"(localhost:|127\.0\.0\.1:|--port )8000\b")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _environment(home: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SCRAPEFLOW_", "PYTEST_", "COV_"))
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "120"
    env.pop("VIRTUAL_ENV", None)
    return env


def _report(step: Step, message: str, output: str) -> str:
    shown = output if len(output) < 6000 else output[:2000] + "\n[…]\n" + output[-3500:]
    return f"{step.where}: {message}\n--- the step ---\n{step.code}\n--- its output ---\n{shown}"


def _printed(expected: str, outcome: Outcome, step: Step) -> bool:
    """The step printed ``expected``; a step that leaves a process in the background (``… &``)
    is given up to 60 s for that process to print it."""
    notes = True
    deadline = time.monotonic() + (60 if step.code.rstrip().endswith("&") else 0)
    while True:
        output = outcome.output_file.read_text(encoding="utf-8", errors="replace")
        if fits(expected, output, notes=notes):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def run_page(page: str, directory: Path, *, root: Path = ROOT) -> None:
    """Run every step of ``page`` in ``directory``; fail at the first that does not work."""
    steps, _ = steps_of(parse_page(root / page, page))
    port = str(_free_port())
    failures: list[str] = []
    # DOCS_KEEP_GOING=1: report every step that fails, not only the first (for fixing a page)
    keep_going = os.environ.get("DOCS_KEEP_GOING") == "1"

    def fail(message: str) -> None:
        failures.append(message)
        if not keep_going:
            pytest.fail(message)

    environment = _environment(directory)
    if page in _OWN_ENVIRONMENT:  # it installs a package: into an environment of its own
        own = child_environment(directory.parent / f"{directory.name}-env")
        environment["PATH"] = f"{own}{os.pathsep}{environment['PATH']}"
    with ShellSession(directory, environment) as shell:
        for step in steps:
            code = _PORT_8000.sub(rf"\g<1>{port}", step.code)
            expected = (
                None if step.expected is None else _PORT_8000.sub(rf"\g<1>{port}", step.expected)
            )
            if step.kind == "toml":
                try:
                    tomllib.loads(code)
                except tomllib.TOMLDecodeError as exc:
                    fail(f"{step.where}: not TOML: {exc}")
                continue
            if step.kind == "file":
                assert step.name is not None
                (directory / step.name).write_text(code, encoding="utf-8")
                continue
            if step.kind == "python":
                script = directory / f".docs-{step.line}.py"
                script.write_text(code, encoding="utf-8")
                code = f"python {script}"  # by its full name: the page may have changed directory
            try:
                outcome = shell.run(code, lenient=step.kind == "console")
            except StepTimeout as exc:
                fail(f"{step.where}: {exc}")
                break
            if step.kind != "console" and outcome.status != 0:
                where = step.where
                if outcome.failed_line is not None and step.kind == "shell":
                    where = f"{step.page}:{step.line + outcome.failed_line - 1}"
                command = outcome.failed_command or code
                fail(
                    _report(
                        step,
                        f"exit status {outcome.status} at {where}: {command}",
                        outcome.output,
                    )
                )
            if expected is not None and not _printed(expected, outcome, step):
                fail(
                    _report(
                        step,
                        f"the output differs from the page's (line {step.expected_line}):\n"
                        f"{expected}",
                        outcome.output,
                    )
                )

    if failures:
        pytest.fail("\n\n".join(failures))


# what the pages use besides scrapeflow, as a reader's machine has them
_PROGRAMS = ("bash", "curl", "jq", "tinyproxy")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES)
def test_page(page: str, tmp_path: Path) -> None:
    missing = [program for program in _PROGRAMS if shutil.which(program) is None]
    if missing:
        unavailable(f"the docs' examples need {', '.join(missing)}: not on PATH")
    run_page(page, tmp_path)
