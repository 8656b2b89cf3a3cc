"""The service on the procrastinate backend: it only submits; two `scrapeflow worker` processes
on the same PostgreSQL run the refreshes, and what they do reaches the service's status and its
event streams (LISTEN/NOTIFY) as if it ran there."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from scrapeflow.sandbox import Sandbox

from .conftest import BANKS, Service, service_env, start_service, start_worker, stop_service
from .test_events import read
from .test_refresh import wait_all_updated


@pytest.fixture
def distributed(tmp_path: Path, sandbox: Sandbox, pg_url: str) -> Iterator[Service]:
    env = service_env(tmp_path, sandbox, pg_url, customers=[1, 3], backend="procrastinate")
    process, url = start_service(env)
    running = Service(url, env, pg_url, process)
    try:
        yield running
    finally:
        stop_service(running.process)


def test_workers_run_the_refreshes_the_service_only_submits(distributed: Service) -> None:
    workers = [start_worker(distributed.env) for _ in range(2)]
    try:
        with distributed.client("read", "refresh") as client:
            jobs = {
                customer: client.post(f"/v1/customers/{customer}/refresh").json()
                for customer in ("cust-1", "cust-3")
            }
            events = read(client, "/v1/customers/cust-1/events", until="bank.all_updated")
            kinds = [e["event"] for e in events]
            assert kinds[0] == "job.queued"
            assert "job.running" in kinds  # told by the worker that ran it, in another process
            assert kinds.count("bank.access_finished") == len(BANKS)
            for customer, job in jobs.items():
                status = wait_all_updated(client, customer)
                assert {a["result"] for a in status["accesses"]} == {"success"}
                done = client.get(f"/v1/jobs/{job['id']}").json()
                assert done["state"] == "succeeded", done
            accounts = client.get("/v1/customers/cust-1/accounts").json()
            assert accounts and all(a["balance"] for a in accounts)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(timeout=60) for worker in workers]
        for worker in workers:
            for stream in (worker.stdout, worker.stderr):
                if stream is not None:
                    stream.close()
    assert codes == [0, 0]


def test_a_worker_refuses_to_start_without_the_distributed_backend(
    distributed: Service,
) -> None:
    env = {**distributed.env, "SCRAPEFLOW_JOBS_BACKEND": "embedded"}
    done = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "SCRAPEFLOW_JOBS_BACKEND=procrastinate" in done.stderr
    assert httpx.get(f"{distributed.url}/healthz").status_code == 200
