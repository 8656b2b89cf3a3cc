"""Running the service: readiness, Prometheus metrics, the dashboard's stats and the access log,
read from a real ``scrapeflow serve`` as an operator and Prometheus see them."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from alembic.script import ScriptDirectory
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from scrapeflow.banking import MIGRATIONS_DIR
from scrapeflow.db import create_engine
from scrapeflow.sandbox import Sandbox
from scrapeflow.server._problems import Problem
from scrapeflow.server.routes.operations import readyz

from .conftest import BANKS, Service, stop_service


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics``, parsed: each sample by name and labels."""
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, found), value in samples.items()
        if sample == name and set(labels.items()) <= set(found)
    )


def bank_hosts(sandbox: Sandbox) -> set[str]:
    return {f"{URL(sandbox.urls[bank]).host}:{URL(sandbox.urls[bank]).port}" for bank in BANKS}


def refresh(service: Service, customer: str) -> dict[str, Any]:
    """Refresh ``customer`` through the API; the job once it ended."""
    with service.client("refresh", "read") as client:
        job = client.post(f"/v1/customers/{customer}/refresh").json()
        return poll(lambda: _ended(client.get(f"/v1/jobs/{job['id']}").json()), 90)


def _ended(job: dict[str, Any]) -> dict[str, Any] | None:
    return job if job["state"] not in ("queued", "running") else None


def raw_request(url: str, method: str, path: str) -> bytes:
    """One request as sent on the wire (any method token, as h11 takes), its whole answer."""
    host, port = URL(url).host, URL(url).port
    assert host is not None and port is not None
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def poll(check: Callable[[], Any], seconds: float = 15) -> Any:
    """``check()`` until it gives something truthy, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"still {found!r} after {seconds} s")
        time.sleep(0.05)


def test_readyz_is_ready_then_names_migrations_behind(service: Service) -> None:
    assert httpx.get(f"{service.url}/readyz").json() == {"status": "ready"}

    # Another deployment rolled the database back one migration under the running service.
    scripts = ScriptDirectory(str(MIGRATIONS_DIR))
    head = scripts.get_current_head()
    assert head is not None
    previous = scripts.get_revision(head).down_revision
    assert isinstance(previous, str)
    database = service.db_url.removeprefix("sqlite+aiosqlite:///")
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (previous,))
    try:
        behind = httpx.get(f"{service.url}/readyz")
        assert behind.status_code == 503
        assert behind.headers["content-type"] == "application/problem+json"
        assert behind.json()["type"] == "not-ready"
        assert behind.json()["detail"] == f"migrations behind: at {previous}, head is {head}"
        assert httpx.get(f"{service.url}/healthz").json() == {"status": "ok"}  # still up
    finally:
        with sqlite3.connect(database) as connection:
            connection.execute("UPDATE alembic_version SET version_num = ?", (head,))
    assert httpx.get(f"{service.url}/readyz").status_code == 200


def test_readyz_says_only_database_unreachable_and_logs_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    url = f"postgresql+asyncpg://alice:pw-s3cret@127.0.0.1:{port}/bank"

    async def ask() -> Problem:
        engine = create_engine(url)
        try:
            await readyz(SimpleNamespace(settings=SimpleNamespace(db_url=url), engine=engine))
        except Problem as problem:
            return problem
        finally:
            await engine.dispose()
        raise AssertionError("ready with no database")

    caplog.set_level(logging.WARNING, logger="scrapeflow.server")
    problem = asyncio.run(ask())
    assert (problem.status, problem.type, problem.detail) == (
        503,
        "not-ready",
        "database unreachable",
    )
    [record] = [r for r in caplog.records if r.name.startswith("scrapeflow.server")]
    assert record.levelno == logging.WARNING
    assert record.msg["event"] == "database unreachable"
    assert record.msg["reason"]  # the driver's, for the operator
    assert "pw-s3cret" not in record.getMessage()


def test_metrics_parse_and_move_with_a_real_refresh(service: Service, sandbox: Sandbox) -> None:
    hosts = bank_hosts(sandbox)
    with service.client("metrics") as prometheus:
        before = scrape(prometheus)
        assert total(before, "scrapeflow_customers") == 3
        assert total(before, "scrapeflow_machine_memory_total_bytes") > 0
        assert 0 <= total(before, "scrapeflow_machine_memory_percent") <= 100
        assert total(before, "scrapeflow_process_resident_memory_bytes") > 0
        assert total(before, "scrapeflow_process_open_fds") > 0
        assert total(before, "scrapeflow_process_uptime_seconds") > 0
        assert ("scrapeflow_machine_load1", ()) in before
        assert total(before, "scrapeflow_webhook_backlog") == 0
        assert total(before, "scrapeflow_write_queue_depth") == 0

        job = refresh(service, "cust-1")
        assert job["state"] == "succeeded", (job["error"], job["result"])
        after = scrape(prometheus)

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("scrapeflow_jobs", kind="bank.refresh", state="succeeded") == 1
    assert total(after, "scrapeflow_jobs", kind="bank.refresh", state="running") == 0
    for host in hosts:  # every bank was scraped, from the service's own process
        assert moved("scrapeflow_http_requests_total", host=host) > 0
        assert moved("scrapeflow_http_latency_seconds_count", host=host) > 0
        assert moved("scrapeflow_http_latency_seconds_sum", host=host) > 0
        assert ("scrapeflow_http_retries_total", (("host", host),)) in after
        assert ("scrapeflow_http_bans_total", (("host", host),)) in after
    refreshed = {"method": "POST", "route": "/v1/customers/{customer}/refresh", "status": "202"}
    assert moved("scrapeflow_api_requests_total", **refreshed) == 1
    polled = {"method": "GET", "route": "/v1/jobs/{job_id}"}
    assert moved("scrapeflow_api_requests_total", **polled) >= 1
    assert (
        total(after, "scrapeflow_api_request_duration_seconds_count", route="/v1/jobs/{job_id}")
        >= 1
    )
    # the first scrape is counted by the time of the second
    assert total(after, "scrapeflow_api_requests_total", route="/metrics", status="200") >= 1


def test_unknown_methods_count_as_one_series(service: Service) -> None:
    # Methods the HTTP parser knows and no route takes: each would be a series of its own. A
    # method it does not know is refused before the app (400), never counted.
    for method in ("PROPFIND", "MKCOL", "LOCK", "UNLOCK", "PURGE"):
        assert raw_request(service.url, method, "/nope").startswith(b"HTTP/1.1 404 ")
    assert raw_request(service.url, "X0", "/nope").startswith(b"HTTP/1.1 400 ")
    with service.client("metrics") as prometheus:
        # counted once answered, which the client may see first
        poll(
            lambda: total(scrape(prometheus), "scrapeflow_api_requests_total", method="other") == 5
        )
        samples = scrape(prometheus)
    methods = {
        dict(labels)["method"]
        for name, labels in samples
        if name == "scrapeflow_api_requests_total"
    }
    assert methods == {"GET", "other"}  # the scrapes, and every other method
    assert total(samples, "scrapeflow_api_requests_total", method="other", route="unmatched") == 5


def test_stats_have_the_dashboards_shape_and_move(service: Service, sandbox: Sandbox) -> None:
    with service.client("read") as reader:
        # A receiver that is down: its deliveries wait in the outbox.
        hook = reader.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/down"})
        assert hook.status_code == 201, hook.text
    with service.client("metrics") as dashboard:
        before = dashboard.get("/v1/stats").json()
        assert set(before) == {
            "jobs",
            "jobs_by_kind",
            "customers",
            "sse_clients",
            "webhook_backlog",
            "write_queue_depth",
            "http",
            "api",
            "machine",
            "uptime_seconds",
        }
        assert set(before["jobs"]) == {"queued", "running", "succeeded", "failed", "cancelled"}
        assert set(before["http"]) == {"requests", "retries", "bans", "hosts"}
        assert set(before["api"]) == {"requests", "errors"}
        assert set(before["machine"]) == {"cpu_percent", "memory_percent", "load", "rss_bytes"}
        assert len(before["machine"]["load"]) == 3
        assert before["machine"]["rss_bytes"] > 0
        assert before["customers"] == 3
        assert before["sse_clients"] == 0
        assert before["uptime_seconds"] > 0
        assert before["api"]["requests"] >= 1  # the webhook's creation

        refresh(service, "cust-2")  # a one-time code at legacybank: it ends all the same
        after = dashboard.get("/v1/stats").json()
        assert after["jobs"]["queued"] == after["jobs"]["running"] == 0
        ended = sum(after["jobs"][s] for s in ("succeeded", "failed", "cancelled"))
        assert ended == sum(before["jobs"].values()) + 1
        by_kind = after["jobs_by_kind"]["bank.refresh"]
        assert (
            sum(by_kind.values())
            == sum(before["jobs_by_kind"].get("bank.refresh", {}).values()) + 1
        )
        assert after["http"]["requests"] > before["http"]["requests"]
        assert after["http"]["hosts"] >= len(bank_hosts(sandbox))
        assert after["api"]["requests"] > before["api"]["requests"]
        assert after["api"]["errors"] == 0
        assert after["webhook_backlog"] > 0  # the job's events, for the receiver that is down
        assert after["write_queue_depth"] == 0  # the refresh's writes are all done

        with service.client("read") as watcher:
            with watcher.stream("GET", "/v1/customers/cust-2/events") as stream:
                assert stream.status_code == 200
                poll(lambda: dashboard.get("/v1/stats").json()["sse_clients"] == 1)
            poll(lambda: dashboard.get("/v1/stats").json()["sse_clients"] == 0)


def test_access_log_names_the_key_never_the_token(service: Service, tmp_path: Path) -> None:
    stop_service(service.process)
    log = tmp_path / "service.log"
    env = {**service.env, "SCRAPEFLOW_LOG_LEVEL": "INFO", "SCRAPEFLOW_LOG_JSON": "true"}
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "scrapeflow", "serve", "--port", "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    service.process = process  # the fixture stops it
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("serving on "), log.read_text()[-2000:]
    url = line.split()[-1]

    token = service.key("read")
    key_id = token.split("_")[1]
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{url}/v1/customers/cust-1", headers=headers).status_code == 200
    movements = httpx.get(
        f"{url}/v1/customers/cust-1/movements", params={"cursor": "c2VjcmV0"}, headers=headers
    )
    assert movements.status_code == 422  # not a cursor this API gave
    forged = f"sf_{key_id}_not-the-secret"
    assert (
        httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {forged}"}).status_code
        == 401
    )
    assert httpx.get(f"{url}/healthz").status_code == 200
    assert raw_request(url, "PROPFIND", "/nope").startswith(b"HTTP/1.1 404 ")
    assert raw_request(url, "SECRET-VERB", "/nope").startswith(b"HTTP/1.1 400 ")
    stop_service(process)

    text = log.read_text()
    assert token not in text
    assert token.split("_", 2)[2] not in text  # the secret, alone
    assert "not-the-secret" not in text
    assert "c2VjcmV0" not in text  # no query string
    assert "authorization" not in text.lower()
    lines = [json.loads(row) for row in text.splitlines() if row.startswith("{")]
    access = [row for row in lines if row.get("logger") == "scrapeflow.server.access"]
    seen = {(row["method"], row["route"], row["status"], row["key_id"]) for row in access}
    assert seen == {
        ("GET", "/v1/customers/{customer}", 200, key_id),
        ("GET", "/v1/customers/{customer}/movements", 422, key_id),
        ("GET", "/v1/jobs", 401, None),
        ("GET", "/healthz", 200, None),
        ("other", "unmatched", 404, None),
    }
    assert "SECRET-VERB" not in text and "PROPFIND" not in text
    for row in access:
        assert row["level"] == "info"
        assert row["client"] == "127.0.0.1"
        assert isinstance(row["duration_ms"], int | float)
        assert row["duration_ms"] >= 0
