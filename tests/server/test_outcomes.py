"""How a refresh ended, told the same way everywhere: the customer's status (its ``outcome``,
counts per result, the error of a refresh that could not start), the customer list, the refresh
job and its ``bank.all_updated`` event. ``all_updated`` keeps its meaning: finished."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scrapeflow.banking import Outcome, ResultCode, outcome_of
from scrapeflow.sandbox import Sandbox, SandboxAdmin

from .conftest import running_service, service_database
from .test_events import read
from .test_refresh import wait_all_updated


def refreshed(client: httpx.Client, customer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Refresh ``customer`` and wait for the end: (its status, its refresh job)."""
    return ended(client, customer, started(client, customer))


def started(client: httpx.Client, customer: str) -> str:
    """Start a refresh of ``customer``: its job's id."""
    posted = client.post(f"/v1/customers/{customer}/refresh")
    assert posted.status_code == 202, posted.text
    return str(posted.json()["id"])


def ended(
    client: httpx.Client, customer: str, job_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait for the end of ``customer``'s refresh job ``job_id``: (its status, the job)."""
    status = wait_all_updated(client, customer, seconds=120)
    for _ in range(100):  # the job ends just after the customer does
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] not in ("queued", "running"):
            return status, job
        time.sleep(0.1)
    raise AssertionError(f"the refresh job of {customer} did not end: {job}")


def finished_event(client: httpx.Client, customer: str, job_id: str) -> dict[str, Any]:
    """The ``bank.all_updated`` event of refresh job ``job_id``, from the customer's stream."""
    for event in read(client, f"/v1/customers/{customer}/events", until="job.succeeded"):
        if event["event"] == "bank.all_updated" and event["data"]["job_id"] == job_id:
            return dict(event["data"])
    raise AssertionError(f"no bank.all_updated for job {job_id}")


def test_each_mix_of_results_has_its_outcome(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, job_backend: str
) -> None:
    """On each job backend (a refresh in one job, or spread over a worker's access jobs)."""
    db_url = service_database(request, tmp_path, job_backend)
    # cust-1 reads every bank; cust-2's legacy bank asks for an SMS code; cust-13 is locked out
    # of every bank.
    customers = [1, 2, 13]
    # No HTTP retries: a bank in maintenance is given up after the scraper's own login
    # attempts, not after 30 s of the HTTP layer's backoff (this tests outcomes, not retries).
    env = {"SCRAPEFLOW_RETRIES": "0"}
    with (
        running_service(
            tmp_path, sandbox, db_url, customers=customers, backend=job_backend, env=env
        ) as service,
        service.client("read", "refresh") as client,
    ):
        expected = {
            "cust-1": ("succeeded", {"success": 3}),
            "cust-2": ("needs_action", {"success": 2, "two_factor_required": 1}),
            "cust-13": ("needs_action", {"user_locked": 3}),
        }
        jobs = {customer: started(client, customer) for customer in expected}  # all at once
        for customer, (outcome, results) in expected.items():
            status, job = ended(client, customer, jobs[customer])
            assert status["all_updated"] is True  # finished, whatever the outcome
            assert (status["outcome"], status["results"], status["error"]) == (
                outcome,
                results,
                None,
            ), customer
            assert job["state"] == "succeeded" and job["outcome"] == outcome  # a job's state
            event = finished_event(client, customer, job["id"])
            assert (event["outcome"], event["result_code"]) == (outcome, None)
        listed = {c["id"]: c["outcome"] for c in client.get("/v1/customers").json()["customers"]}
        assert listed == {customer: outcome for customer, (outcome, _) in expected.items()}
        assert client.get("/v1/customers/cust-2").json()["outcome"] == "needs_action"

        # One bank in maintenance: the others read, the refresh is partial.
        asyncio.run(_maintenance(sandbox, "legacybank", 1.0))
        status, job = refreshed(client, "cust-1")
        assert (status["outcome"], status["results"]) == (
            "partial",
            {"success": 2, "bank_unavailable": 1},
        )
        assert job["outcome"] == "partial"
        asyncio.run(_maintenance(sandbox, "legacybank", 0.0))


def test_a_refresh_that_cannot_start_is_the_customers_outcome(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """No URL for the legacy bank: the refresh job fails at once, and the customer's status
    says so (``failed``, the job's error) until a refresh ends."""
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
    manifest = sandbox.manifest()
    del manifest["sites"]["legacybank"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(manifest))
    env = {"SCRAPEFLOW_SANDBOX_MANIFEST": str(broken)}
    with (
        running_service(tmp_path, sandbox, db_url, customers=[1], env=env) as service,
        service.client("read", "refresh") as client,
    ):
        before = client.get("/v1/customers/cust-1/status").json()
        assert (before["outcome"], before["results"], before["error"]) == (None, {}, None)
        posted = client.post("/v1/customers/cust-1/refresh").json()
        for _ in range(300):
            job = client.get(f"/v1/jobs/{posted['id']}").json()
            if job["state"] not in ("queued", "running"):
                break
            time.sleep(0.1)
        assert job["state"] == "failed", job
        status = client.get("/v1/customers/cust-1/status").json()
        assert (status["outcome"], status["results"]) == ("failed", {})
        assert status["error"] == job["error"] and "legacybank" in status["error"]
        assert status["refresh_job"] is None


async def _maintenance(sandbox: Sandbox, bank: str, rate: float) -> None:
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(bank, maintenance_rate=rate)


def test_the_outcome_of_each_result() -> None:
    """Waiting for a person outweighs everything; nothing read is failed, some is partial."""
    cases = [
        ([ResultCode.SUCCESS, ResultCode.SUCCESS], Outcome.SUCCEEDED),
        ([], Outcome.SUCCEEDED),  # no access: nothing it had to read
        ([ResultCode.SUCCESS, ResultCode.SITE_CHANGED], Outcome.PARTIAL),
        ([ResultCode.TIMEOUT, ResultCode.BLOCKED, ResultCode.UNKNOWN], Outcome.FAILED),
        ([ResultCode.BANK_UNAVAILABLE, ResultCode.WRONG_CREDENTIALS], Outcome.NEEDS_ACTION),
        ([ResultCode.SUCCESS, ResultCode.USER_LOCKED], Outcome.NEEDS_ACTION),
    ]
    for codes, outcome in cases:
        assert outcome_of(codes) is outcome, codes
