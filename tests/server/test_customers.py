"""Customers and accesses through the API (credentials write-only), and the one-time code that
resumes a two-factor access."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from scrapeflow.sandbox import Sandbox, SandboxAdmin

from .conftest import Service
from .test_events import read


def wait_job(client, job_id: str, seconds: float = 60) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {job['state']} after {seconds} s")


def test_a_customer_added_through_the_api_is_refreshed_and_resumed_with_its_code(
    service: Service, sandbox: Sandbox, tmp_path: Path
) -> None:
    async def login(n: int) -> dict:  # type: ignore[type-arg]
        async with SandboxAdmin.from_sandbox(sandbox) as admin:
            return dict(await admin.customer("legacybank", n))

    two_factor = asyncio.run(login(2))
    with service.client("admin") as client:
        made = client.post("/v1/customers", json={"id": "ana", "name": "Ana"})
        assert made.status_code == 201, made.text
        assert made.json() == {
            "id": "ana",
            "name": "Ana",
            "state": "idle",
            "outcome": None,
            "last_refresh_at": None,
        }
        assert client.post("/v1/customers", json={"id": "ana"}).status_code == 409
        bad = client.post("/v1/customers", json={"id": "a\nb"})
        assert bad.status_code == 422

        access = client.post(
            "/v1/customers/ana/accesses",
            json={
                "bank": "legacybank",
                "login": two_factor["username"],
                "password": two_factor["password"],
            },
        )
        assert access.status_code == 201, access.text
        assert "password" not in access.text and two_factor["password"] not in access.text
        access_id = access.json()["access_id"]
        unknown = client.post(
            "/v1/customers/ana/accesses", json={"bank": "nobank", "login": "x", "password": "y"}
        )
        assert unknown.status_code == 422 and unknown.json()["type"] == "unknown-bank"

        job = client.post("/v1/customers/ana/refresh").json()
        ended = wait_job(client, job["id"])
        assert ended["state"] == "succeeded"
        [result] = ended["result"]["accesses"]
        assert result["result"] == "two_factor_required"

        # A code given while a refresh of the customer is under way is refused, not queued.
        # The bank is slowed so that the refresh is surely still running at the second call.
        sandbox.sites["legacybank"].guard.latency_ms = (1_000.0, 1_200.0)
        again = client.post("/v1/customers/ana/refresh").json()
        busy = client.post(f"/v1/customers/ana/accesses/{access_id}/otp", json={"code": "123456"})
        sandbox.sites["legacybank"].guard.latency_ms = (0.0, 2.0)
        assert busy.status_code == 409, busy.text
        assert busy.json()["type"] == "refresh-in-progress"
        assert wait_job(client, again["id"])["result"]["accesses"][0]["result"] == (
            "two_factor_required"
        )

        async def code() -> str:
            async with SandboxAdmin.from_sandbox(sandbox) as admin:
                return await admin.otp("legacybank", two_factor["username"])

        sms = asyncio.run(code())
        wrong = client.post(f"/v1/customers/ana/accesses/{access_id}/otp", json={"code": "12x"})
        assert wrong.status_code == 422
        missing = client.post("/v1/customers/ana/accesses/9999/otp", json={"code": "123456"})
        assert missing.status_code == 404
        resumed = client.post(f"/v1/customers/ana/accesses/{access_id}/otp", json={"code": sms})
        assert resumed.status_code == 202
        assert sms not in resumed.text  # the code is sealed in the job, never shown
        assert "sealed" not in resumed.text  # nor its sealed form
        assert "sealed" not in client.get(f"/v1/jobs/{resumed.json()['id']}").text
        done = wait_job(client, resumed.json()["id"])
        assert done["state"] == "succeeded", done
        assert done["result"]["result"] == "success"
        assert done["outcome"] == "succeeded"  # a code's job tells its outcome, as a refresh's
        # ... and its states are on the customer's stream, as a refresh's are: after the
        # refresh's end, the code's job queued, running, succeeded.
        path, jobs, last = "/v1/customers/ana/events", [], {}
        while ("job.succeeded", "bank.otp") not in jobs and len(jobs) < 30:
            told = read(client, path, until="job.succeeded", **last)
            jobs += [(e["event"], e["data"]["kind"]) for e in told if e["event"].startswith("job.")]
            last = {"Last-Event-ID": told[-1]["id"]}
        mine = [event for event, kind in jobs if kind == "bank.otp"]
        assert mine == ["job.queued", "job.running", "job.succeeded"], jobs
        status = client.get("/v1/customers/ana/status").json()
        assert [a["result"] for a in status["accesses"]] == ["success"]
        assert client.get("/v1/customers/ana/accounts").json()

    stored = Path(service.db_url.removeprefix("sqlite+aiosqlite:///")).read_bytes()
    assert two_factor["password"].encode() not in stored
    assert sms.encode() not in stored


def test_a_restricted_key_lists_only_its_customers(service: Service) -> None:
    with service.client("read", customer="cust-2") as client:
        assert [c["id"] for c in client.get("/v1/customers").json()["customers"]] == ["cust-2"]
    with service.client("read") as client:
        assert [c["id"] for c in client.get("/v1/customers").json()["customers"]] == [
            "cust-1",
            "cust-2",
            "cust-3",
        ]


def test_a_customer_is_renamed_and_an_access_gets_a_new_password_not_a_second_post(
    service: Service, sandbox: Sandbox
) -> None:
    async def login(bank: str, n: int) -> dict:  # type: ignore[type-arg]
        async with SandboxAdmin.from_sandbox(sandbox) as admin:
            return dict(await admin.customer(bank, n))

    formbank = asyncio.run(login("formbank", 1))
    with service.client("admin", "read", "refresh") as client:
        renamed = client.patch("/v1/customers/cust-1", json={"name": "Ana Pérez"})
        assert renamed.status_code == 200, renamed.text
        assert client.get("/v1/customers/cust-1").json()["name"] == "Ana Pérez"
        assert client.patch("/v1/customers/cust-1", json={"name": "a\nb"}).status_code == 422

        [access] = [
            a
            for a in client.get("/v1/customers/cust-1/status").json()["accesses"]
            if a["bank"] == "formbank"
        ]
        path = f"/v1/customers/cust-1/accesses/{access['access_id']}"
        again = client.post(
            "/v1/customers/cust-1/accesses",
            json={"bank": "formbank", "login": formbank["username"], "password": "other"},
        )
        assert again.status_code == 409 and again.json()["type"] == "access-exists"
        assert f"PATCH {path}" in again.json()["detail"]  # where to go instead

        def refreshed_result() -> str:
            job = client.post("/v1/customers/cust-1/refresh").json()
            results = wait_job(client, job["id"])["result"]["accesses"]
            return next(r["result"] for r in results if r["access_id"] == access["access_id"])

        changed = client.patch(path, json={"password": "not-the-password"})
        assert changed.status_code == 200 and "not-the-password" not in changed.text
        assert refreshed_result() == "wrong_credentials"  # the new password is the one used
        assert client.patch(path, json={"password": formbank["password"]}).status_code == 200
        assert refreshed_result() == "success"

        assert client.patch(path, json={"password": ""}).status_code == 422
        elsewhere = client.patch("/v1/customers/cust-2/accesses/1", json={"password": "x"})
        assert elsewhere.status_code == 404 and elsewhere.json()["type"] == "access-not-found"
