"""A refresh spread over two workers, one access per job, and one worker SIGKILLed while it
scrapes, on the default heartbeats (the launcher's 30 s, the jobs' 5 s): the other worker takes
the killed access over and the refresh ends within 45 s, and the customer's rows end exact
against the sandbox's truth, none doubled."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from scrapeflow.banking import BANK_ACCESS, BANK_REFRESH
from scrapeflow.jobs import JobState, SqlJobStore
from scrapeflow.sandbox import Sandbox, SandboxAdmin
from tests.banking import _harness as h

from .conftest import (
    BANKS,
    Service,
    service_env,
    start_service,
    start_worker,
    stop_service,
    stop_worker,
)
from .test_refresh import wait_all_updated

CONCURRENCY = 4
_INTO_SCRAPE = timedelta(seconds=1)  # a part running this long is mid-scrape (slow banks)
RECOVERY_BOUND = 45.0  # a killed worker's job completes elsewhere within 45 s, on the defaults


async def running_part(db_url: str, refresh: str, bound: float = 60) -> tuple[str, int]:
    """A ``bank.access`` part of job ``refresh`` running (its scrape begun a moment ago): its
    id and its worker's pid. Fails with what the jobs were if none is seen within ``bound``."""
    store = SqlJobStore(db_url)
    await store.open()
    try:
        deadline = asyncio.get_running_loop().time() + bound
        while asyncio.get_running_loop().time() < deadline:
            for job in await store.find(kind=BANK_ACCESS, states=(JobState.RUNNING,)):
                begun = job.started_at and datetime.now(UTC) - job.started_at > _INTO_SCRAPE
                if job.owner and (job.progress.get("accounts") or begun):
                    return job.id, int(job.owner.split(":")[1])
            parent = await store.get(refresh)
            if parent is None or parent.state.final:
                break
            await asyncio.sleep(0.05)
        seen = [(j.id, j.state.value, j.progress) for j in await store.find(kind=BANK_ACCESS)]
        raise AssertionError(f"no part caught running: refresh {parent}, parts {seen}")
    finally:
        await store.close()


def test_a_killed_workers_access_is_scraped_again_elsewhere_to_exact_rows(
    tmp_path: Path, sandbox: Sandbox, pg_url: str
) -> None:
    env = service_env(tmp_path, sandbox, pg_url, customers=[1], backend="procrastinate")
    for setting in ("SCRAPEFLOW_HEARTBEAT", "SCRAPEFLOW_JOB_HEARTBEAT"):  # the defaults
        assert setting not in env
    for bank in BANKS:  # slow enough that a scrape is caught in the middle
        sandbox.sites[bank].guard.latency_ms = (150.0, 250.0)
    workers = [
        start_worker(env, concurrency=CONCURRENCY, log=tmp_path / f"worker{n}.log")
        for n in range(2)
    ]
    process, url = start_service(env)
    service = Service(url, env, pg_url, process)
    try:
        with service.client("read", "refresh") as client:
            answer = client.post("/v1/customers/cust-1/refresh")
            assert answer.status_code == 202, answer.text
            refresh = answer.json()
            part, pid = asyncio.run(running_part(pg_url, refresh["id"]))
            victim = next(w for w in workers if w.pid == pid)
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            killed_at = time.monotonic()
            for bank in BANKS:
                sandbox.sites[bank].guard.latency_ms = (0.0, 2.0)
            status = wait_all_updated(client, "cust-1", seconds=RECOVERY_BOUND)
            done = wait_job(client, refresh["id"], killed_at + RECOVERY_BOUND)
        with service.client("admin") as admin:  # a refresh's parts are the service's own
            listed = admin.get("/v1/jobs", params={"kind": BANK_ACCESS}).json()["jobs"]
            parts = [admin.get(f"/v1/jobs/{p['id']}").json() for p in listed]  # with params
            again = admin.get(f"/v1/jobs/{part}").json()
    finally:
        stop_service(service.process)
        for running in workers:
            stop_worker(running)

    assert done["state"] == "succeeded" and done["kind"] == BANK_REFRESH
    assert [a["result"] for a in done["result"]["accesses"]] == ["success"] * len(BANKS)
    assert {a["result"] for a in status["accesses"]} == {"success"}, (status, done, parts)
    assert len(parts) == len(BANKS)  # one job per access, the killed one run again, not twice
    assert {p["params"]["refresh"] for p in parts} == {refresh["id"]}
    assert (again["state"], again["attempts"]) == ("succeeded", 2)
    assert asyncio.run(compare_with_truth(sandbox, pg_url)) > 0


def wait_job(client: httpx.Client, job_id: str, deadline: float) -> dict[str, Any]:
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] not in ("queued", "running") or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


async def compare_with_truth(sandbox: Sandbox, db_url: str) -> int:
    """The stored rows of cust-1's accesses (ids 1-3, one per bank) against the sandbox's
    truth; how many movements were compared."""
    since = sandbox.clock.now().date() - timedelta(days=14)
    compared = 0
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        for access_id, bank in enumerate(BANKS, start=1):
            login = await admin.customer(bank, 1)
            accounts, movements = await h.stored(db_url, access_id)
            expected = await h.truth(sandbox, bank, login["username"], since=since)
            compared += h.assert_exact(accounts, movements, expected, since=since)
    return compared
