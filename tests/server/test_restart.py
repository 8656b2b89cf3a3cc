"""kill -9 of the service mid-refresh: restarted, the job is found by its stopped heartbeat and
run again, and the data ends exact, with nothing doubled."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time

from scrapeflow.sandbox import Sandbox

from .conftest import BANKS, Service, start_service, stop_service
from .test_refresh import truth, wait_all_updated


def test_a_refresh_cut_by_kill_9_completes_after_the_restart(
    service: Service, sandbox: Sandbox
) -> None:
    """On the default heartbeats (the launcher's 30 s, the jobs' 5 s): the restarted service
    runs the cut refresh again, which takes over what the dead run held at once, and the
    customer is all updated within 45 s of the restart."""
    stop_service(service.process)
    env = service.env
    for setting in ("SCRAPEFLOW_HEARTBEAT", "SCRAPEFLOW_JOB_HEARTBEAT"):  # the defaults
        assert setting not in env
    process, url = start_service(env)
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (150.0, 250.0)
    service.url = url
    try:
        with service.client("refresh", "read") as client:
            job = client.post("/v1/customers/cust-1/refresh").json()
            deadline = time.monotonic() + 30
            while not client.get(f"/v1/jobs/{job['id']}").json()["progress"].get("accounts"):
                assert time.monotonic() < deadline, "no account landed"
                time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        stop_service(process)

    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (0.0, 2.0)
    process, service.url = start_service(env)
    service.process = process
    with service.client("refresh", "read") as client:
        status = wait_all_updated(client, "cust-1", seconds=45)
        done = client.get(f"/v1/jobs/{job['id']}").json()
        assert done["state"] == "succeeded", done
        assert done["attempts"] == 2
        assert {a["result"] for a in status["accesses"]} == {"success"}
        movements = client.get("/v1/customers/cust-1/movements", params={"limit": 1000}).json()
        accounts = client.get("/v1/customers/cust-1/accounts").json()
    expected = asyncio.run(truth(sandbox, 1))
    keys = [(m["bank"], m["account_ref"], m["key"]) for m in movements["movements"]]
    assert len(keys) == len(set(keys))  # nothing doubled
    assert len(keys) == sum(len(m) for t in expected.values() for m in t["movements"].values())
    assert len(accounts) == sum(len(t["accounts"]) for t in expected.values())


def test_sigterm_stops_the_service_cleanly_and_the_cut_refresh_runs_after_the_restart(
    service: Service, sandbox: Sandbox
) -> None:
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (300.0, 400.0)
    with service.client("refresh", "read") as client:
        job = client.post("/v1/customers/cust-1/refresh").json()
        deadline = time.monotonic() + 30
        while client.get(f"/v1/jobs/{job['id']}").json()["state"] != "running":
            assert time.monotonic() < deadline, "the refresh never started"
            time.sleep(0.05)
    service.process.send_signal(signal.SIGTERM)
    # uvicorn stops gracefully, then ends by the signal it got
    assert service.process.wait(timeout=30) in (0, -signal.SIGTERM)
    stop_service(service.process)  # it has ended: this closes its pipes
    database = sqlite3.connect(service.db_url.removeprefix("sqlite+aiosqlite:///"))
    try:
        [(left,)] = database.execute(
            "SELECT state FROM scrapeflow_jobs WHERE id = ?", (job["id"],)
        ).fetchall()
    finally:
        database.close()
    # Finished within the grace period, or put back at its end: never left "running" for a
    # watchdog to find.
    assert left in ("succeeded", "queued")
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (0.0, 2.0)
    service.process, service.url = start_service(service.env)
    with service.client("refresh", "read") as client:
        status = wait_all_updated(client, "cust-1", seconds=60)
        assert {a["result"] for a in status["accesses"]} == {"success"}
        assert client.get(f"/v1/jobs/{job['id']}").json()["state"] == "succeeded"
