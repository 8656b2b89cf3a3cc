"""``scrapeflow demo`` run as the README runs it: a subprocess, with the service inside it.

The bank half goes through the service's API; these tests read what a user reads (the
terminal), then, with ``--serve``, use the service the demo leaves up, as a user would.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from scrapeflow.sandbox import Sandbox, SandboxAdmin, SandboxConfig

CUSTOMERS = ("demo-1", "demo-2", "demo-3", "demo-7")
BANKS = ("formbank", "apibank", "legacybank", "neobank")
ENV = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


def demo(*args: str) -> list[str]:
    return [sys.executable, "-m", "scrapeflow", "demo", *args]


@pytest.fixture(scope="module")
def passwords() -> list[str]:
    """The demo customers' bank passwords: the demo's sandbox is seeded, so this one has the
    same."""

    async def read(sandbox: Sandbox) -> list[str]:
        async with SandboxAdmin.from_sandbox(sandbox) as admin:
            return [
                (await admin.customer(bank, int(c.split("-")[1])))["password"]
                for c in CUSTOMERS
                for bank in BANKS
            ]

    with Sandbox.in_thread(SandboxConfig(hostility="none")) as sandbox:
        return asyncio.run(read(sandbox))


class Lines:
    """A running process's stdout, line by line, each wait bounded."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(process,), daemon=True).start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def until(self, pattern: str, seconds: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found
        raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(self.seen)}")

    def rest(self) -> str:
        while (line := self._lines.get(timeout=30)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[str]]]:
    """Demo processes a test starts; killed if the test leaves one running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def start(running: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        demo(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    running.append(process)
    return process


def test_the_demo_refreshes_customers_through_the_service_and_exits_0(
    passwords: list[str],
) -> None:
    result = subprocess.run(demo(), capture_output=True, text=True, timeout=180, env=ENV)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "hot restart: 320 of 320 tasks skipped" in out
    assert re.search(r"the service listens on http://127\.0\.0\.1:\d+", out)
    # live, from the event streams: balances per access, results, the SMS code given
    for customer in CUSTOMERS:
        for bank in BANKS:
            first = rf"{customer}\s+{bank}\s+first balances in: \d+ account\(s\)"
            assert len(re.findall(first, out)) == 1  # each fact once, not once a batch
            assert re.search(
                rf"{customer}\s+{bank}\s+success \(\d+ accounts?, \d+ movements?\)", out
            )
    assert re.search(r"demo-2\s+legacybank\s+two_factor_required: the bank sent a code", out)
    assert re.search(r"demo-2\s+legacybank\s+POST …/accesses/\d+/otp", out)
    # the summary, read back from the API, beside the seed's targets
    assert "the seed's targets: balances in 10 s, movements in 30 s" in out
    rows = {
        m["customer"]: m
        for m in re.finditer(
            r"│ (?P<customer>demo-\d+)\s+│ (?P<accounts>\d+)\s+│ (?P<movements>\d+)\s+│ "
            r"(?P<result>\w+)\s+│ (?P<balances>[\d.]+)\s+│ (?P<updated>[\d.]+)\s+│",
            out,
        )
    }
    assert sorted(rows) == list(CUSTOMERS)
    assert all(row["result"] == "success" and int(row["movements"]) > 0 for row in rows.values())
    assert rows["demo-7"]["accounts"] == str(32 * len(BANKS))  # 32 at each bank
    for row in rows.values():
        assert 0 < float(row["balances"]) <= float(row["updated"])
    for customer in CUSTOMERS:
        assert re.search(rf"{customer} holds EUR [\d,]+\.\d\d", out)
    assert "--dir DIR keeps the database and the launch logs" in out
    workdir = re.search(r"feed profiles into (\S+)", out)
    assert workdir is not None and not Path(workdir[1]).exists()  # the temp dir is gone
    assert not any(p in out or p in result.stderr for p in passwords)


def test_demo_serve_leaves_the_service_up_with_a_key_until_sigterm(
    tmp_path: Path, passwords: list[str], running: list[subprocess.Popen[str]]
) -> None:
    workdir = tmp_path / "demo"
    process = start(running, "--serve", "--pages", "40", "--dir", str(workdir))
    lines = Lines(process)
    url = lines.until(r"^dashboard: (http://127\.0\.0\.1:\d+)/$")[1]
    key = lines.until(r"admin API key \(shown once, stored hashed\): (sf_\S+)$")[1]
    lines.until("run until Ctrl-C")

    with httpx.Client(base_url=url, timeout=30) as client:
        answer = client.get("/v1/customers", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200
        assert [c["id"] for c in answer.json()["customers"]] == list(CUSTOMERS)
        assert {c["state"] for c in answer.json()["customers"]} == {"all_updated"}
        assert client.get("/v1/customers").status_code == 401
        dashboard = client.get("/")
        assert dashboard.status_code == 200
        assert dashboard.headers["content-type"].startswith("text/html")

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0  # stops within the bound, or the test fails
    out = lines.rest()
    assert "stopping the service and the sandbox" in out
    stderr = process.stderr.read() if process.stderr else ""
    assert "Traceback" not in stderr
    # one log per launch: four refreshes and the access resumed with its code
    assert len(list((workdir / "logs").iterdir())) == 4 + 1
    # the key is for the terminal: no file holds it; no password is shown or logged
    kept = [p.read_bytes() for p in workdir.rglob("*") if p.is_file()]
    assert not any(key.encode() in data for data in kept)
    logs = b"".join(p.read_bytes() for p in (workdir / "logs").iterdir())
    assert not any(p in out or p in stderr or p.encode() in logs for p in passwords)


def test_ctrl_c_stops_the_demo_during_the_refresh(
    tmp_path: Path, running: list[subprocess.Popen[str]]
) -> None:
    process = start(running, "--pages", "40", "--dir", str(tmp_path / "demo"))
    Lines(process).until(r"first balances in: \d+ account\(s\)")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 130
    assert "Traceback" not in (process.stderr.read() if process.stderr else "")


@pytest.mark.parametrize("port", ["taken", "70000"])
def test_demo_refuses_a_port_it_cannot_listen_on(port: str, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        chosen = str(held.getsockname()[1]) if port == "taken" else port
        result = subprocess.run(
            demo("--port", chosen, "--dir", str(tmp_path / "demo")),
            capture_output=True,
            text=True,
            timeout=60,
            env=ENV,
        )
    assert result.returncode == 2
    assert "--port" in result.stderr
    assert not (tmp_path / "demo").exists()  # refused before anything started
