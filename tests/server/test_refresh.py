"""Refreshing a customer through the API, as the seed's UI does: 202 at once, poll until "all
updated", then read accounts and movements page by page; a refresh and its cancel on each job
backend (the service runs it, or a worker process does)."""

from __future__ import annotations

import asyncio
import time
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from scrapeflow.sandbox import Sandbox, SandboxAdmin

from .conftest import BANKS, Service

# The 2 s documented (a job run elsewhere: procrastinate's abort at once, or its worker's look
# at the cancel flags every second), and half a second for a loaded machine.
CANCEL_BOUND = 2.5


def wait_all_updated(client: httpx.Client, customer: str, seconds: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = client.get(f"/v1/customers/{customer}/status").json()
        if status["all_updated"]:
            return status
        time.sleep(0.1)
    raise AssertionError(f"{customer} not all updated after {seconds} s: {status}")


async def truth(sandbox: Sandbox, n: int) -> dict[str, Any]:
    since = sandbox.clock.now().date() - timedelta(days=14)
    found: dict[str, Any] = {}
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        for bank in BANKS:
            login = await admin.customer(bank, n)
            found[bank] = await admin.truth(bank, login["username"], since=since)
    return found


def test_refresh_is_answered_at_once_then_all_updated_with_the_banks_data(
    job_service: Service, sandbox: Sandbox
) -> None:
    with job_service.client("refresh", "read") as client:
        before = client.get("/v1/customers/cust-1/status").json()
        assert before["all_updated"] is False  # never refreshed
        started = client.post("/v1/customers/cust-1/refresh")
        assert started.status_code == 202
        job = started.json()
        assert job["state"] in ("queued", "running")
        assert started.headers["location"] == f"/v1/jobs/{job['id']}"
        again = client.post("/v1/customers/cust-1/refresh")
        assert again.status_code == 202
        assert again.json()["id"] == job["id"]  # the refresh under way, not a second one

        status = wait_all_updated(client, "cust-1")
        assert {a["bank"] for a in status["accesses"]} == set(BANKS)
        assert {a["result"] for a in status["accesses"]} == {"success"}
        # What each access read, the database holds: stored against read, per access.
        for access in status["accesses"]:
            assert access["accounts_stored"] == access["accounts"] > 0
            assert access["movements_stored"] == access["movements"] > 0
        done = client.get(f"/v1/jobs/{job['id']}").json()
        assert done["state"] == "succeeded"
        assert done["result"]["ok"] is True
        assert done["progress"]["accesses_done"] == 3

        accounts = client.get("/v1/customers/cust-1/accounts").json()
        expected = asyncio.run(truth(sandbox, 1))
        assert len(accounts) == sum(len(t["accounts"]) for t in expected.values())
        balances = {(a["bank"], a["bank_ref"]): Decimal(a["balance"]) for a in accounts}
        for bank, bank_truth in expected.items():
            for account in bank_truth["accounts"]:
                # exact to the cent: money travels as a decimal string, never a float
                assert balances[bank, account["id"]] == Decimal(account["balance"])

        everything = client.get("/v1/customers/cust-1/movements", params={"limit": 1000}).json()
        assert everything["next_cursor"] is None
        paged: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 7}
            if cursor:
                params["cursor"] = cursor
            page = client.get("/v1/customers/cust-1/movements", params=params).json()
            paged += page["movements"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert paged == everything["movements"]  # no gap, no duplicate
        # Each movement names the access it was read through, as its account does.
        access_of = {(a["bank"], a["bank_ref"]): a["access_id"] for a in accounts}
        assert all(m["access_id"] == access_of[m["bank"], m["account_ref"]] for m in paged)
        keys = [(m["account_ref"], m["key"]) for m in paged]
        assert len(set(keys)) == len(keys) > 0
        total = sum(len(m) for t in expected.values() for m in t["movements"].values())
        assert len(paged) == total

        recent = client.get(
            "/v1/customers/cust-1/movements",
            params={"since": str(date.fromisoformat(paged[0]["operation_date"])), "limit": 1000},
        ).json()["movements"]
        assert recent and all(m["operation_date"] == paged[0]["operation_date"] for m in recent)


def test_bad_inputs_are_problems_naming_what_is_wrong(service: Service) -> None:
    with service.client("refresh", "read") as client:
        cases = [
            ("GET", "/v1/customers/nobody/status", 404, "customer-not-found"),
            ("POST", "/v1/customers/nobody/refresh", 404, "customer-not-found"),
            ("GET", "/v1/customers/cust-1/movements?limit=0", 422, "invalid-request"),
            ("GET", "/v1/customers/cust-1/movements?since=yesterday", 422, "invalid-request"),
            (
                "GET",
                "/v1/customers/cust-1/movements?since=2026-02-02&until=2026-01-01",
                422,
                "invalid-request",
            ),
            ("GET", "/v1/customers/cust-1/movements?cursor=bm9wZQ", 422, "invalid-cursor"),
            ("GET", "/v1/jobs?state=sleeping", 422, "invalid-request"),
            ("GET", "/v1/jobs/unknown-job", 404, "job-not-found"),
            ("GET", "/v1/nowhere", 404, "not-found"),
            ("DELETE", "/v1/jobs", 405, "method-not-allowed"),
        ]
        for method, path, status, type in cases:
            answer = client.request(method, path)
            assert answer.status_code == status, (path, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["type"] == type, path


@pytest.mark.parametrize("stop_when", ["running", "claimed"])
def test_cancel_stops_a_refresh_within_two_seconds(
    job_service: Service, sandbox: Sandbox, stop_when: str
) -> None:
    """Stopped as soon as it runs (wherever that lands: before, during or just after its claim)
    or once it holds the customer's accesses: cancelled in time, and nothing stays claimed;
    on procrastinate, the service asks and the worker that runs the job stops it."""
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (300.0, 400.0)  # a slow bank
    with job_service.client("refresh", "read") as client:
        job = client.post("/v1/customers/cust-3/refresh").json()
        deadline = time.monotonic() + 20
        while client.get(f"/v1/jobs/{job['id']}").json()["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        while stop_when == "claimed" and not all(
            a["state"] == "in_progress"
            for a in client.get("/v1/customers/cust-3/status").json()["accesses"]
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        running = client.get("/v1/customers/cust-3/status").json()
        assert running["all_updated"] is False
        assert (running["refresh_job"]["id"], running["refresh_job"]["state"]) == (
            job["id"],
            "running",
        )
        started = time.monotonic()
        cancelled = client.post(f"/v1/jobs/{job['id']}/cancel")
        assert cancelled.status_code == 200
        while client.get(f"/v1/jobs/{job['id']}").json()["state"] != "cancelled":
            assert time.monotonic() - started < CANCEL_BOUND, "not cancelled in time"
            time.sleep(0.05)
        # The launcher's own bookkeeping of the stop (each access's end, shielded from the
        # cancel; a claim caught mid-write is given back once it lands) lands by then or just
        # after: nothing stays claimed.
        deadline = time.monotonic() + 10
        while True:
            status = client.get("/v1/customers/cust-3/status").json()
            if status["state"] != "in_progress" and all(
                a["state"] == "idle" for a in status["accesses"]
            ):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
        assert status["refresh_job"] is None
        if stop_when == "claimed":
            # At 300-400 ms a request the stop finds accesses at work; each says it was stopped.
            stopped = [a for a in status["accesses"] if a["result"] != "success"]
            assert stopped, status
            assert all(a["detail"] == "the launch was stopped" for a in stopped), status
        again = client.post("/v1/customers/cust-3/refresh").json()
        assert again["id"] != job["id"]  # a new refresh may start
        assert wait_all_updated(client, "cust-3")["accesses"]  # and runs to its end
