"""Tenant isolation: a key restricted to customers, even an admin one, sees and touches nothing
outside them (webhooks and their logs, customers, which ids exist); a sync or movements cursor
is its customer's only; customer ids follow one pattern, in the API and the CLI."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from ._shared import module_service
from .conftest import Service


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with module_service(tmp_path_factory.mktemp("tenants"), customers=[1, 2]) as running:
        yield running


def refreshed(client: httpx.Client, *customers: str) -> None:
    """Refresh each customer and wait until every refresh has ended."""
    jobs = []
    for customer in customers:
        started = client.post(f"/v1/customers/{customer}/refresh")
        assert started.status_code == 202, started.text
        jobs.append(started.json()["id"])
    deadline = time.monotonic() + 60
    while any(client.get(f"/v1/jobs/{j}").json()["state"] not in ("succeeded",) for j in jobs):
        assert time.monotonic() < deadline, "the refreshes did not end"
        time.sleep(0.2)


def test_a_restricted_admin_sees_and_touches_only_its_customers(service: Service) -> None:
    with service.client("admin") as admin, service.client("admin", customer="cust-1") as ana:
        others = admin.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/hook?token=bob-secret"}
        )
        assert others.status_code == 201, others.text
        hook = others.json()["id"]
        own = ana.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/ana"})
        assert own.status_code == 201, own.text

        listed = ana.get("/v1/webhooks")
        assert [h["id"] for h in listed.json()] == [own.json()["id"]]
        assert "bob-secret" not in listed.text
        for method, path in (
            ("GET", f"/v1/webhooks/{hook}"),
            ("GET", f"/v1/webhooks/{hook}/deliveries"),
            ("DELETE", f"/v1/webhooks/{hook}"),
        ):
            refused = ana.request(method, path)
            assert refused.status_code == 404, (path, refused.text)
            assert "bob-secret" not in refused.text
        assert admin.get(f"/v1/webhooks/{hook}").status_code == 200  # still there
        assert {h["id"] for h in admin.get("/v1/webhooks").json()} >= {hook, own.json()["id"]}

        carol = ana.post("/v1/customers", json={"id": "carol"})
        assert (carol.status_code, carol.json()["type"]) == (403, "forbidden")
        assert admin.get("/v1/customers/carol").status_code == 404  # not made
        # Another customer, or one that does not exist: the same 403, before any lookup.
        for customer in ("cust-2", "nobody"):
            refused = ana.get(f"/v1/customers/{customer}")
            assert (refused.status_code, refused.json()["type"]) == (403, "forbidden")
        assert [c["id"] for c in ana.get("/v1/customers").json()["customers"]] == ["cust-1"]


def test_a_cursor_is_its_customers_only(service: Service) -> None:
    with service.client("admin") as admin:
        refreshed(admin, "cust-1", "cust-2")
        page = admin.get("/v1/customers/cust-1/movements", params={"limit": 1}).json()
        assert page["next_cursor"], "cust-1 has more than one movement"
        sync = admin.get("/v1/customers/cust-1/sync", params={"count": 1}).json()
        for path, cursor in (
            ("/v1/customers/cust-2/movements", page["next_cursor"]),
            ("/v1/customers/cust-2/sync", sync["next_cursor"]),
        ):
            foreign = admin.get(path, params={"cursor": cursor})
            assert foreign.status_code == 422, (path, foreign.text)
            assert foreign.json()["type"] == "invalid-cursor"
            assert "another customer" in foreign.json()["detail"]
        # The customer's own cursor goes on.
        own = admin.get("/v1/customers/cust-1/movements", params={"cursor": page["next_cursor"]})
        assert own.status_code == 200 and own.json()["movements"]
        again = admin.get("/v1/customers/cust-1/sync", params={"cursor": sync["next_cursor"]})
        assert again.status_code == 200


BAD_IDS = [".", "..", "a/b", "a\u200bb", "a\u202eb", "x" * 65, "a\x00b", "a\nb", " "]


def test_customer_ids_follow_one_pattern(service: Service) -> None:
    with service.client("admin") as admin:
        for bad in BAD_IDS:
            refused = admin.post("/v1/customers", json={"id": bad})
            assert refused.status_code == 422, (bad, refused.text)
            assert refused.json()["type"] == "invalid-request"
        # NFC: e + combining acute is stored as one é, and found either way it is typed.
        made = admin.post("/v1/customers", json={"id": "jose\u0301"})
        assert (made.status_code, made.json()["id"]) == (201, "jos\u00e9"), made.text
        taken = admin.post("/v1/customers", json={"id": "jos\u00e9"})
        assert taken.status_code == 409
        # A path id no customer can have is refused, never resolved into another route.
        for path in ("/v1/customers/%2E/status", "/v1/customers/%2E%2E/status"):
            answer = admin.get(path)
            assert answer.status_code in (404, 422), (path, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
        dot = admin.get("/v1/customers/%2E/status")
        assert dot.json()["type"] == "invalid-request"
    for bad in (".", "..", "a\u200bb"):
        added = subprocess.run(
            [sys.executable, "-m", "scrapeflow", "bank", "add-customer", bad],
            env=service.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert added.returncode == 2, (bad, added.stdout, added.stderr)
        assert "customer id" in added.stderr
