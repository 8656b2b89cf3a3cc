"""``scrapeflow serve`` in several processes over one database: one per core by default; a
refresh started through one process streams through another; a revoked key is refused by
every process within a second; the daily run is planned once; a process that dies is started
again; SIGTERM stops them all."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
import sqlalchemy as sa

from scrapeflow.sandbox import Sandbox
from tests.server.conftest import (
    Service,
    running_service,
    service_database,
    service_env,
    start_service,
    stop_service,
)

TWO = {"SCRAPEFLOW_API_PROCESSES": "2"}


def _serving(service: Service, count: int) -> list[psutil.Process]:
    """The service's processes, once there are ``count`` of them answering."""
    deadline = time.monotonic() + 60
    while True:
        children = psutil.Process(service.process.pid).children()
        if len(children) == count:
            return children
        assert time.monotonic() < deadline, f"{len(children)} processes, not {count}"
        time.sleep(0.1)


def _connection_to(service: Service, process: psutil.Process) -> HTTPConnection:
    """A connection that ``process`` accepted (the kernel gives each to one of them)."""
    address = urlsplit(service.url)
    assert address.hostname is not None
    for _ in range(200):
        connection = HTTPConnection(address.hostname, address.port, timeout=60)
        connection.connect()
        assert connection.sock is not None
        port = connection.sock.getsockname()[1]
        for _ in range(50):
            owners = [
                p
                for p in psutil.Process(service.process.pid).children()
                if any(c.raddr and c.raddr.port == port for c in p.net_connections("tcp"))
            ]
            if owners:
                break
            time.sleep(0.01)
        if owners == [process]:
            return connection
        connection.close()
    raise AssertionError(f"no connection reached process {process.pid}")


def _get(connection: HTTPConnection, path: str, token: str) -> HTTPResponse:
    connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    return connection.getresponse()


def test_the_default_is_a_process_per_core_and_sigterm_stops_them_all(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    db_url = service_database(request, tmp_path, "embedded")
    env = service_env(tmp_path, sandbox, db_url, customers=[1], backend="embedded")
    del env["SCRAPEFLOW_API_PROCESSES"]  # the default
    process, url = start_service(env)
    try:
        service = Service(url, env, db_url, process)
        children = _serving(service, os.cpu_count() or 1)
        with service.client("read") as client:
            for _ in range(20):
                assert client.get("/v1/customers/cust-1/status").status_code == 200
    finally:
        stop_service(process)
    assert process.returncode == 0
    assert not [p.pid for p in children if p.is_running() and p.status() != "zombie"]


def test_a_refresh_started_through_one_process_streams_through_another(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    db_url = service_database(request, tmp_path, "embedded")
    with running_service(tmp_path, sandbox, db_url, customers=[1], env=TWO) as service:
        one, other = _serving(service, 2)
        token = service.key("read", "refresh")
        watching = _connection_to(service, one)
        stream = _get(watching, "/v1/customers/cust-1/events?after=latest", token)
        assert stream.status == 200
        asking = _connection_to(service, other)
        asking.request(
            "POST", "/v1/customers/cust-1/refresh", headers={"Authorization": f"Bearer {token}"}
        )
        answer = asking.getresponse()
        assert answer.status == 202
        job = json.loads(answer.read())["id"]
        seen: list[tuple[str, dict[str, object]]] = []
        kind = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = stream.readline().decode().rstrip("\r\n")
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                seen.append((kind, json.loads(line.split(":", 1)[1])))
                if kind == "job.succeeded" and seen[-1][1].get("job_id") == job:
                    break
        kinds = [k for k, data in seen if data.get("job_id") == job]
        assert "bank.accounts" in kinds and kinds[-1] == "job.succeeded", kinds
        watching.close()
        asking.close()


def test_a_revoked_key_is_refused_by_every_process_within_a_second(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    db_url = service_database(request, tmp_path, "embedded")
    with running_service(tmp_path, sandbox, db_url, customers=[1], env=TWO) as service:
        processes = _serving(service, 2)
        doomed = service.key("read")
        connections = [_connection_to(service, p) for p in processes]
        for connection in connections:  # each process has the key in its cache
            response = _get(connection, "/v1/customers/cust-1/status", doomed)
            assert response.status == 200
            response.read()
        key_id = doomed.split("_")[1]
        with service.client("admin") as admin:
            assert admin.delete(f"/v1/keys/{key_id}").status_code == 204
        revoked = time.monotonic()
        refused: dict[int, float] = {}
        while len(refused) < len(connections) and time.monotonic() - revoked < 5:
            for place, connection in enumerate(connections):
                if place in refused:
                    continue
                response = _get(connection, "/v1/customers/cust-1/status", doomed)
                response.read()
                if response.status == 401:
                    refused[place] = time.monotonic() - revoked
            time.sleep(0.05)
        assert len(refused) == 2, refused
        assert max(refused.values()) < 1.5, refused  # a second, and a request's time
        for connection in connections:
            connection.close()


def test_the_daily_run_is_planned_once_by_all_the_processes(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    fired = datetime.now(UTC) - timedelta(minutes=1)
    schedule = {
        **TWO,
        "SCRAPEFLOW_SCHEDULE": f"{fired.minute} {fired.hour} * * *",
        "SCRAPEFLOW_SCHEDULE_WINDOW": "0",  # all at once: made up at start
    }
    db_url = service_database(request, tmp_path, "embedded")
    with running_service(tmp_path, sandbox, db_url, customers=[1, 3, 4], env=schedule) as svc:
        _serving(svc, 2)
        engine = sa.create_engine(db_url.replace("+aiosqlite", ""))
        try:
            deadline = time.monotonic() + 60
            with engine.connect() as connection:
                while True:
                    jobs = connection.execute(
                        sa.text("SELECT customer FROM scrapeflow_jobs WHERE kind = 'bank.refresh'")
                    ).all()
                    if len(jobs) >= 3 or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
            time.sleep(3)  # the other process had its chance to plan the day again
            with engine.connect() as connection:
                jobs = connection.execute(
                    sa.text("SELECT customer FROM scrapeflow_jobs WHERE kind = 'bank.refresh'")
                ).all()
                runs = connection.execute(sa.text("SELECT * FROM scrapeflow_schedule_runs")).all()
        finally:
            engine.dispose()
        assert sorted(c for (c,) in jobs) == ["cust-1", "cust-3", "cust-4"]
        assert len(runs) == 1


def test_a_service_process_that_dies_is_started_again(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    db_url = service_database(request, tmp_path, "embedded")
    with running_service(tmp_path, sandbox, db_url, customers=[1], env=TWO) as service:
        victim, survivor = _serving(service, 2)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        with httpx.Client(base_url=service.url, timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:  # the survivor answers meanwhile, the new one soon
                assert client.get("/healthz").status_code == 200
                children = psutil.Process(service.process.pid).children()
                if len(children) == 2 and victim.pid not in [p.pid for p in children]:
                    break
                assert time.monotonic() < deadline, "the process was not started again"
                time.sleep(0.2)
        # ... and the new one serves: a request that it accepted is answered. Left before it
        # serves, the test's SIGTERM would reach the supervisor while that process starts, and
        # the stop would wait out its 20 s timeout.
        [reborn] = [p for p in children if p.pid != survivor.pid]
        while True:
            try:
                connection = _connection_to(service, reborn)
                break
            except AssertionError:  # not accepting yet: the survivor took every connection
                assert time.monotonic() < deadline, "the new process never served"
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
        connection.close()
        assert survivor.is_running()


def test_sigterm_while_a_process_is_started_again_stops_the_service(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    """SIGTERM reaches the supervisor while the process it starts again after a death starts:
    that one stops too, and the service exits 0 (the supervisor used to wait for it forever)."""
    db_url = service_database(request, tmp_path, "embedded")
    env = service_env(tmp_path, sandbox, db_url, customers=[1], backend="embedded") | TWO
    process, url = start_service(env)
    try:
        victim, survivor = _serving(Service(url, env, db_url, process), 2)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        supervisor = psutil.Process(process.pid)
        deadline = time.monotonic() + 30
        while {p.pid for p in supervisor.children()} <= {survivor.pid}:
            assert time.monotonic() < deadline, "the process was not started again"
            time.sleep(0.01)
        [reborn] = [p for p in supervisor.children() if p.pid != survivor.pid]
        process.terminate()  # the new process is starting: it serves only a second later
        assert process.wait(timeout=60) == 0
    finally:
        stop_service(process)
    assert not [p.pid for p in (reborn, survivor) if p.is_running() and p.status() != "zombie"]
