"""Running a book of customers through the API: the list paged, searched and filtered by the
database; an access disabled (kept with its data, left out of refreshes and of the outcome) and
enabled again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from scrapeflow.sandbox import Sandbox

from .conftest import running_service, service_database
from .test_outcomes import refreshed


def every_page(client: httpx.Client, **params: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """Every customer the list gives for ``params``, page by page: (customers, each page's
    answer without its customers)."""
    customers: list[dict[str, Any]] = []
    pages: list[Any] = []
    cursor = None
    for _ in range(100):
        page = {**params, "cursor": cursor} if cursor else params
        answer = client.get("/v1/customers", params=page)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        customers += body.pop("customers")
        pages.append(body)
        cursor = body["next_cursor"]
        if cursor is None:
            return customers, pages
    raise AssertionError("the list never ended")


def test_customers_are_paged_searched_and_counted(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, job_backend: str
) -> None:
    """On SQLite (embedded) and PostgreSQL (procrastinate)."""
    db_url = service_database(request, tmp_path, job_backend)
    with (
        running_service(tmp_path, sandbox, db_url, customers=[], backend=job_backend) as service,
        service.client("admin") as admin,
    ):
        names = {f"c-{n:03}": f"Customer {n}" for n in range(23)}
        names |= {"ana": "Ana García", "bob": "Roberto 100% Pérez", "zoe": "ZOË_x"}
        for customer, name in names.items():
            assert (
                admin.post("/v1/customers", json={"id": customer, "name": name}).status_code == 201
            )

        listed, pages = every_page(admin, limit=5)
        assert [c["id"] for c in listed] == sorted(names)  # each once, in id order
        assert len(pages) == 6 and {p["total"] for p in pages} == {26}
        assert pages[0]["outcomes"] == {"none": 26}  # nothing refreshed yet
        first = listed[0]
        assert set(first) == {"id", "name", "state", "outcome", "last_refresh_at"}
        assert (first["outcome"], first["last_refresh_at"]) == (None, None)

        def search(q: str) -> list[str]:
            found, found_pages = every_page(admin, q=q, limit=3)
            assert {p["total"] for p in found_pages} == {len(found)}
            return [c["id"] for c in found]

        assert search("GARC") == ["ana"]  # the name, any case
        assert search("c-01") == [f"c-{n:03}" for n in range(10, 20)]  # a part of the id
        assert search("100%") == ["bob"]  # % and _ are themselves, not patterns
        assert search("_") == ["zoe"]
        assert search("nobody") == []
        assert search("  ana ") == ["ana"]  # surrounding spaces of a pasted id

        only_new, _ = every_page(admin, outcome="none")
        assert len(only_new) == 26
        assert every_page(admin, outcome="failed")[0] == []

        with service.client("read", customer="bob") as bob:
            mine, bob_pages = every_page(bob)
            assert [c["id"] for c in mine] == ["bob"] and bob_pages[0]["total"] == 1
            assert bob_pages[0]["outcomes"] == {"none": 1}  # nothing of the others leaks

        for params in (
            {"limit": 0},
            {"limit": 501},
            {"outcome": "green"},
            {"cursor": "not-a-cursor"},
            {"q": "x" * 201},
        ):
            refused = admin.get("/v1/customers", params=params)
            assert refused.status_code == 422, (params, refused.text)
            assert refused.headers["content-type"] == "application/problem+json"


def test_outcomes_filter_the_list_and_a_disabled_access_is_left_out(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, job_backend: str
) -> None:
    """cust-2's legacy bank asks for an SMS code: disabled, it is not refreshed (its last
    result and data stay) and no longer makes the customer ``needs_action``."""
    db_url = service_database(request, tmp_path, job_backend)
    with (
        running_service(
            tmp_path, sandbox, db_url, customers=[1, 2, 5], backend=job_backend
        ) as service,
        service.client("admin") as admin,
    ):
        for customer in ("cust-1", "cust-2"):
            refreshed(admin, customer)
        body = admin.get("/v1/customers").json()
        assert body["outcomes"] == {"succeeded": 1, "needs_action": 1, "none": 1}
        assert all(c["last_refresh_at"] for c in body["customers"][:2])
        waiting = every_page(admin, outcome="needs_action")[0]
        assert [c["id"] for c in waiting] == ["cust-2"]
        either = every_page(admin, outcome=["needs_action", "none"])[0]
        assert [c["id"] for c in either] == ["cust-2", "cust-5"]

        before = admin.get("/v1/customers/cust-2/status").json()
        legacy = next(a for a in before["accesses"] if a["bank"] == "legacybank")
        assert (legacy["result"], legacy["enabled"]) == ("two_factor_required", True)
        url = f"/v1/customers/cust-2/accesses/{legacy['access_id']}"
        disabled = admin.patch(url, json={"enabled": False})
        assert disabled.status_code == 200, disabled.text
        assert disabled.json()["enabled"] is False

        status, job = refreshed(admin, "cust-2")
        assert (status["outcome"], status["results"]) == ("succeeded", {"success": 2})
        assert job["outcome"] == "succeeded"
        after = next(a for a in status["accesses"] if a["access_id"] == legacy["access_id"])
        assert after == {**legacy, "enabled": False}  # not scraped: its last end unchanged
        code = admin.post(f"{url}/otp", json={"code": "123456"})
        assert code.status_code == 409 and code.json()["type"].endswith("access-disabled")
        assert every_page(admin, outcome="needs_action")[0] == []

        enabled = admin.patch(url, json={"enabled": True})
        assert enabled.status_code == 200 and enabled.json()["enabled"] is True
        status, _ = refreshed(admin, "cust-2")
        assert status["outcome"] == "needs_action"  # asked for a code again

        nothing = admin.patch(url, json={})
        assert nothing.status_code == 422
        assert "password, enabled or both" in nothing.json()["detail"]
        elsewhere = admin.patch(
            f"/v1/customers/cust-1/accesses/{legacy['access_id']}", json={"enabled": False}
        )
        assert elsewhere.status_code == 404  # another customer's access


def test_the_banks_a_service_reads_are_listed_for_an_add_access_form(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    db_url = service_database(request, tmp_path, "embedded")
    with (
        running_service(tmp_path, sandbox, db_url, customers=[]) as service,
        service.client("read") as reader,
        service.client("admin") as admin,
    ):
        banks = reader.get("/v1/banks").json()
        codes = [b["code"] for b in banks]
        assert {"formbank", "apibank", "legacybank"} <= set(codes) and codes == sorted(codes)
        assert all(b["name"] and set(b) == {"code", "name", "country"} for b in banks)
        admin.post("/v1/customers", json={"id": "ana"})
        refused = admin.post(
            "/v1/customers/ana/accesses", json={"bank": "nobank", "login": "a", "password": "b"}
        )
        assert refused.status_code == 422
        assert all(code in refused.json()["detail"] for code in codes)  # the same list
