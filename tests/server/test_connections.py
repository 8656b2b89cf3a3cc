"""Connections and client addresses on the default settings: ``X-Forwarded-For`` from a peer not
in ``forwarded_allow_ips`` is ignored (the limiter and the access log use the peer's address);
failed keys slow down failed keys only; an idle keep-alive connection is closed after
``api_keep_alive`` (5 s) and one whose request head does not come whole within
``api_header_timeout`` (10 s) is closed too; the API docs, when turned on, come from this origin
under the dashboard's Content-Security-Policy."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from scrapeflow.sandbox import Sandbox, SandboxConfig

from .conftest import Service, service_env, stop_service

KEEP_ALIVE = 5.0
HEADER_TIMEOUT = 10.0
"""The settings' defaults (docs/configuration.md): the tests run on them, not shortened ones."""


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service on default connection settings, its log (JSON, INFO) in ``service.log``."""
    tmp = tmp_path_factory.mktemp("connections")
    config = SandboxConfig(hostility="none", latency_ms=(0, 2), customers=1000)
    with Sandbox.in_thread(config) as sandbox:
        db_url = f"sqlite+aiosqlite:///{tmp / 'service.db'}"
        env = service_env(tmp, sandbox, db_url, customers=[1], backend="embedded")
        env |= {"SCRAPEFLOW_LOG_LEVEL": "INFO", "SCRAPEFLOW_LOG_JSON": "true"}
        env |= {"SCRAPEFLOW_API_DOCS": "true"}  # the docs test; nothing else depends on it
        with (tmp / "service.log").open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "scrapeflow", "serve", "--port", "0"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert process.stdout is not None
        line = process.stdout.readline()
        try:
            assert line.startswith("serving on "), (tmp / "service.log").read_text()[-2000:]
            yield Service(line.split()[-1], env, db_url, process)
        finally:
            stop_service(process)


def log_lines(service: Service) -> list[dict[str, object]]:
    log = Path(service.env["SCRAPEFLOW_LOG_DIR"]).parent / "service.log"
    rows = [json.loads(row) for row in log.read_text().splitlines() if row.startswith("{")]
    return [row for row in rows if row.get("logger") == "scrapeflow.server.access"]


def test_forwarded_headers_from_an_untrusted_peer_are_ignored_and_a_valid_key_passes(
    service: Service,
) -> None:
    url = f"{service.url}/v1/customers"
    statuses = []
    for n in range(50):  # each "from" another address, as a rotating attacker would say
        spoofed = {
            "Authorization": f"Bearer sf_000000000000_guess{n}",
            "X-Forwarded-For": f"203.0.113.{n + 1}",
            "Forwarded": f"for=198.51.100.{n + 1}",
        }
        statuses.append(httpx.get(url, headers=spoofed).status_code)
    # The peer's address (127.0.0.1) counts: past 10 failures, the next failures wait.
    assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}, statuses
    with service.client("read") as right:  # same address, valid key: never refused
        assert right.get("/v1/customers").status_code == 200
        assert right.post("/v1/customers/cust-1/refresh").status_code == 403  # scope, not 429
    clients = {row["client"] for row in log_lines(service)}
    assert clients == {"127.0.0.1"}, clients


def test_idle_and_slow_connections_are_closed_on_the_defaults(service: Service) -> None:
    parts = urlsplit(service.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    results: dict[str, tuple[float, bytes]] = {}

    def idle_keep_alive() -> None:
        # One request, its answer read, then nothing: closed KEEP_ALIVE after the answer.
        with socket.create_connection((host, port), timeout=30) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while not got.endswith(b'"status":"ok"}'):
                got += conn.recv(65536)
            answered = time.monotonic()
            rest = conn.recv(65536)
            results["keep-alive"] = (time.monotonic() - answered, got + rest)

    def slow_headers() -> None:
        # A request head a few bytes a second, never finished: closed HEADER_TIMEOUT after
        # connecting (each byte would reset an idle timer; this one is not reset).
        with socket.create_connection((host, port), timeout=30) as conn:
            start = time.monotonic()
            try:
                for chunk in (b"GET /healthz HTTP/1.1\r\n", *(b"X-A: b\r\n",) * 30):
                    conn.sendall(chunk)
                    time.sleep(1.0)
                    conn.setblocking(False)
                    try:
                        if conn.recv(1) == b"":
                            break
                    except BlockingIOError:
                        pass
                    finally:
                        conn.setblocking(True)
            except (BrokenPipeError, ConnectionResetError):
                pass
            results["slow headers"] = (time.monotonic() - start, b"")

    def silent() -> None:
        # Connects and sends nothing: closed HEADER_TIMEOUT after connecting.
        with socket.create_connection((host, port), timeout=30) as conn:
            start = time.monotonic()
            rest = conn.recv(65536)
            results["silent"] = (time.monotonic() - start, rest)

    threads = [threading.Thread(target=f) for f in (idle_keep_alive, slow_headers, silent)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=40)
    assert set(results) == {"keep-alive", "slow headers", "silent"}, results
    waited, _ = results["keep-alive"]
    assert KEEP_ALIVE - 0.5 <= waited <= KEEP_ALIVE + 2.0, waited
    for name in ("slow headers", "silent"):
        waited, said = results[name]
        assert HEADER_TIMEOUT - 0.5 <= waited <= HEADER_TIMEOUT + 2.5, (name, waited)
        assert said == b""
    assert httpx.get(f"{service.url}/healthz").status_code == 200  # the service is fine


def test_the_api_docs_come_from_this_origin_under_the_dashboards_policy(service: Service) -> None:
    for path in ("/docs", "/redoc"):
        page = httpx.get(service.url + path)
        assert page.status_code == 200, path
        policy = page.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
        assert "<script>" not in page.text  # no inline script
        for line in page.text.splitlines():
            assert "http://" not in line and "https://" not in line, line
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "start.js"):
        answer = httpx.get(f"{service.url}/docs/assets/{asset}")
        assert answer.status_code == 200 and len(answer.content) > 100, asset
    assert httpx.get(f"{service.url}/docs/assets/..%2F_app.py").status_code == 404
