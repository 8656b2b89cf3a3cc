"""The sync cursor over HTTP: two refreshes with the sandbox clock moved in between, and what
the client is told (added, modified, removed) is exactly what changed at the banks."""

from __future__ import annotations

import asyncio
from datetime import date, timedelta
from typing import Any

import httpx

from scrapeflow.sandbox import Sandbox, SandboxAdmin

from .conftest import BANKS, Service
from .test_refresh import wait_all_updated

Key = tuple[str, str, str]  # bank, account ref, movement key


async def bank_truth(sandbox: Sandbox, n: int, since: date) -> dict[Key, dict[str, Any]]:
    """Every movement customer ``n`` has at the banks from ``since`` on, as the API shows it."""
    found: dict[Key, dict[str, Any]] = {}
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        for bank in BANKS:
            login = await admin.customer(bank, n)
            truth = await admin.truth(bank, login["username"], since=since)
            for account, movements in truth["movements"].items():
                for m in movements:
                    found[bank, account, f"ref:{m['ref']}"] = {
                        "operation_date": m["operation_date"],
                        "value_date": m["value_date"],
                        "amount": m["amount"],
                        "description": m["description"],
                        "pending": m["pending"],
                        "balance_after": m["balance_after"],
                    }
    return found


def as_truth(movement: dict[str, Any]) -> dict[str, Any]:
    return {
        "operation_date": movement["operation_date"],
        "value_date": movement["value_date"],
        "amount": movement["amount"],
        "description": movement["description"],
        "pending": movement["pending"],
        "balance_after": movement["balance_after"],
    }


def sync_all(
    client: httpx.Client, customer: str, cursor: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], str]:
    """Every page from ``cursor`` on (small pages, to cross page ends)."""
    added: list[dict[str, Any]] = []
    modified: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"count": 25}
        if cursor is not None:
            params["cursor"] = cursor
        answer = client.get(f"/v1/customers/{customer}/sync", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        added += page["added"]
        modified += page["modified"]
        removed += page["removed"]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            return added, modified, removed, page["next_cursor"]


def key_of(movement: dict[str, Any]) -> Key:
    return movement["bank"], movement["account_ref"], movement["key"]


def refresh(client: httpx.Client, customer: str) -> None:
    started = client.post(f"/v1/customers/{customer}/refresh")
    assert started.status_code == 202, started.text
    status = wait_all_updated(client, customer)
    assert {a["result"] for a in status["accesses"]} == {"success"}


def test_sync_after_two_refreshes_is_exact_against_the_banks(
    service: Service, sandbox: Sandbox
) -> None:
    since = sandbox.clock.now().date() - timedelta(days=14)  # the first refresh's window
    with service.client("refresh", "read") as client:
        refresh(client, "cust-3")
        first = asyncio.run(bank_truth(sandbox, 3, since))
        added, modified, removed, cursor = sync_all(client, "cust-3", None)
        assert (modified, removed) == ([], [])
        mirror = {key_of(m): as_truth(m) for m in added}
        assert len(mirror) == len(added)  # each once, across pages
        assert mirror == first

        # Nothing changed: nothing comes.
        assert sync_all(client, "cust-3", cursor)[:3] == ([], [], [])

        asyncio.run(advance(sandbox, timedelta(days=3)))
        refresh(client, "cust-3")
        second = asyncio.run(bank_truth(sandbox, 3, since))
        added, modified, removed, cursor = sync_all(client, "cust-3", cursor)

        assert {key_of(m) for m in added} == second.keys() - first.keys()
        changed = {k for k in first.keys() & second.keys() if first[k] != second[k]}
        assert {key_of(m) for m in modified} == changed
        assert {key_of(r) for r in removed} == first.keys() - second.keys()
        # The banks did all three: movements arrived, pending ones posted, one was withdrawn.
        assert added and modified and removed

        for r in removed:
            del mirror[key_of(r)]
        for m in added + modified:
            mirror[key_of(m)] = as_truth(m)
        assert mirror == second

        assert sync_all(client, "cust-3", cursor)[:3] == ([], [], [])


async def advance(sandbox: Sandbox, delta: timedelta) -> None:
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.advance(delta)


def test_bad_cursors_and_counts_are_problems(service: Service) -> None:
    with service.client("read") as client:
        for params, type in (
            ({"cursor": "bm9wZQ"}, "invalid-cursor"),
            ({"cursor": "djE6OTk5OTk5"}, "invalid-cursor"),  # ahead of the data
            ({"cursor": "x" * 65}, "invalid-request"),
            ({"count": 0}, "invalid-request"),
            ({"count": "many"}, "invalid-request"),
        ):
            answer = client.get("/v1/customers/cust-1/sync", params=params)
            assert answer.status_code == 422, (params, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["type"] == type, params
        missing = client.get("/v1/customers/nobody/sync")
        assert (missing.status_code, missing.json()["type"]) == (404, "customer-not-found")
