"""Erasing a customer, or one access, through the API: everything of it goes in one
transaction — bank rows, credentials, events and the deliveries waiting to carry them, ended
jobs, launch logs — and no table keeps a trace (checked table by table, on each database);
other customers are untouched; a refresh under way makes it a 409."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from sqlalchemy import MetaData, select

from scrapeflow.db import create_engine

from .conftest import Service
from .test_refresh import wait_all_updated


def refresh(client: httpx.Client, *customers: str) -> None:
    for customer in customers:
        assert client.post(f"/v1/customers/{customer}/refresh").status_code == 202
    for customer in customers:
        wait_all_updated(client, customer, seconds=120)
    while client.get("/v1/jobs?state=running").json()["jobs"]:  # their jobs' ends stored
        time.sleep(0.1)


async def every_row(db_url: str) -> dict[str, list[str]]:
    """Every table's rows, each as one text (what a trace of a customer would show in)."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as connection:
            metadata = MetaData()
            await connection.run_sync(metadata.reflect)
            found: dict[str, list[str]] = {}
            for table in metadata.sorted_tables:
                rows = await connection.execute(select(table))
                found[table.name] = [repr(tuple(row)) for row in rows]
            return found
    finally:
        await engine.dispose()


def traces(tables: dict[str, list[str]], needles: set[str]) -> dict[str, int]:
    """How many rows of each table hold one of ``needles``."""
    counted = {
        name: sum(any(needle in row for needle in needles) for row in rows)
        for name, rows in tables.items()
    }
    return {name: count for name, count in counted.items() if count}


def test_erasing_a_customer_leaves_no_trace_in_any_table(job_service: Service) -> None:
    service = job_service
    with service.client("admin", "read", "refresh") as client:
        hook = client.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/hook", "events": ["bank."]}
        )
        assert hook.status_code == 201, hook.text  # deliveries queue up for it (nobody listens)
        refresh(client, "cust-1", "cust-2")
        accounts = client.get("/v1/customers/cust-1/accounts").json()
        logins = {a["login"] for a in client.get("/v1/customers/cust-1/status").json()["accesses"]}
        needles = {"cust-1"} | logins | {a["iban"] for a in accounts if a["iban"]}
        before = asyncio.run(every_row(service.db_url))
        assert traces(before, needles)  # the check sees them while they are there
        kept_accounts = client.get("/v1/customers/cust-2/accounts").json()
        logs = Path(service.env["SCRAPEFLOW_LOG_DIR"])
        assert list(logs.glob("*_customer-cust-1_*.log"))

        erased = client.delete("/v1/customers/cust-1")
        assert erased.status_code == 200, erased.text
        body = erased.json()
        assert body["erased"] == "customer" and body["counts"]["accesses"] == 3
        assert body["counts"]["movements"] > 0 and body["counts"]["events"] > 0
        assert body["counts"]["launch_logs"] >= 1
        assert "cust-1" not in erased.text  # the record names no one

        after = asyncio.run(every_row(service.db_url))
        assert traces(after, needles) == {}
        assert not list(logs.glob("*_customer-cust-1_*.log"))
        assert list(logs.glob("*_customer-cust-2_*.log"))  # another's stay
        assert client.get("/v1/customers/cust-2/accounts").json() == kept_accounts
        assert client.get("/v1/customers/cust-1/status").status_code == 404
        assert client.delete("/v1/customers/cust-1").status_code == 404

        # One access of cust-2: it, what was read through it and its events go; the rest stay.
        status = client.get("/v1/customers/cust-2/status").json()
        gone, *kept = status["accesses"]
        one = client.delete(f"/v1/customers/cust-2/accesses/{gone['access_id']}")
        assert one.status_code == 200, one.text
        assert one.json()["counts"]["accesses"] == 1
        left = client.get("/v1/customers/cust-2/status").json()["accesses"]
        assert [a["access_id"] for a in left] == [a["access_id"] for a in kept]
        movements = client.get("/v1/customers/cust-2/movements?limit=1000").json()["movements"]
        assert movements and all(m["access_id"] != gone["access_id"] for m in movements)
        assert traces(asyncio.run(every_row(service.db_url)), {gone["login"]}) == {}
        missing = client.delete(f"/v1/customers/cust-2/accesses/{gone['access_id']}")
        assert missing.status_code == 404 and missing.json()["type"] == "access-not-found"

        # A refresh queued or running: not now.
        assert client.post("/v1/customers/cust-3/refresh").status_code == 202
        busy = client.delete("/v1/customers/cust-3")
        assert busy.status_code == 409 and busy.json()["type"] == "refresh-in-progress"
        wait_all_updated(client, "cust-3", seconds=120)
