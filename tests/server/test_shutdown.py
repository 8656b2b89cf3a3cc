"""SIGTERM, as an operator's supervisor sends it: the service stops taking requests and jobs at
once, open event streams end at once (they held the stop for uvicorn's whole 10 s), running
jobs get their 10 s of grace counted from the signal, then go back to the queue; a queued job
never starts after the signal."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from scrapeflow.sandbox import Sandbox

from .conftest import BANKS, running_service, service_database, start_service, stop_service
from .test_refresh import wait_all_updated

GRACE = 10.0  # the documented grace of running jobs


def test_sigterm_ends_streams_at_once_and_gives_running_jobs_their_grace_from_the_signal(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    db_url = service_database(request, tmp_path, "embedded")
    env = {"SCRAPEFLOW_REFRESH_CONCURRENCY": "1"}  # one refresh runs, the next one waits
    with running_service(tmp_path, sandbox, db_url, customers=[1, 3], env=env) as service:
        for bank in BANKS:  # a refresh far longer than the grace
            sandbox.sites[bank].guard.latency_ms = (1500.0, 2000.0)
        with service.client("refresh", "read") as client:
            first = client.post("/v1/customers/cust-1/refresh").json()
            waiting = client.post("/v1/customers/cust-3/refresh").json()
            deadline = time.monotonic() + 30
            while client.get(f"/v1/jobs/{first['id']}").json()["state"] != "running":
                assert time.monotonic() < deadline, "the refresh never started"
                time.sleep(0.05)
            assert client.get(f"/v1/jobs/{waiting['id']}").json()["state"] == "queued"
        stream_ended: list[float] = []

        def follow() -> None:
            with (
                service.client("read") as reader,
                reader.stream("GET", "/v1/customers/cust-1/events", timeout=60) as events,
            ):
                for _ in events.iter_lines():
                    pass
            stream_ended.append(time.monotonic())

        follower = threading.Thread(target=follow)
        follower.start()
        time.sleep(1.0)  # the stream is open
        signalled = time.monotonic()
        service.process.send_signal(signal.SIGTERM)
        assert service.process.wait(timeout=40) in (0, -signal.SIGTERM)
        ended = time.monotonic() - signalled
        follower.join(timeout=10)
        stop_service(service.process)

        assert stream_ended and stream_ended[0] - signalled < 3.0  # not uvicorn's 10 s
        # The running refresh had its grace, counted from the signal, not 10 s more after the
        # streams: the service ended when the grace did.
        assert GRACE - 1.0 < ended < GRACE + 5.0, ended
        database = sqlite3.connect(db_url.removeprefix("sqlite+aiosqlite:///"))
        try:
            states = dict(
                database.execute(
                    "SELECT id, state || ':' || attempts FROM scrapeflow_jobs WHERE id IN (?, ?)",
                    (first["id"], waiting["id"]),
                ).fetchall()
            )
        finally:
            database.close()
        assert states[first["id"]] == "queued:1"  # put back at the end of its grace
        assert states[waiting["id"]] == "queued:0"  # never started after the signal

        for bank in BANKS:
            sandbox.sites[bank].guard.latency_ms = (0.0, 2.0)
        service.process, service.url = start_service(service.env)
        with service.client("read") as client:
            for customer in ("cust-1", "cust-3"):
                status = wait_all_updated(client, customer, seconds=60)
                assert {a["result"] for a in status["accesses"]} == {"success"}
