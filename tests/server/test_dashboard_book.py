"""The dashboard's customer book at scale: 10,000 customers, listed a page at a time, searched
and filtered by the API (the page never asks for more than the page it shows), each with the
colour of its last refresh's outcome and when it was; the counts per outcome as tiles and as
filter chips."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Browser, expect

from .conftest import Service
from .test_dashboard import (
    Visit,
    api_client,
    book_browser,
    book_sandbox,
    book_service,
    key,
    screenshot_path,
    visiting,
)

__all__ = ["book_browser", "book_sandbox", "book_service"]  # the module's fixtures

CUSTOMERS = [1, 2, 3]  # from the sandbox; the rest are written straight into the database
BULK = 9_997  # 10,000 customers in all
REFRESHED_AT = "2026-11-20 15:04:05.000000"  # UTC, as the service stores it
REFRESHED_SHOWN = "refreshed 2026-11-20 10:04:05 EST"  # in the pages' zone, America/New_York

# Each bulk customer's accesses, by its number modulo 5: how its last refresh ended.
SHAPES = {
    0: ("succeeded", ["success"]),
    1: ("partial", ["success", "bank_unavailable"]),
    2: ("needs_action", ["two_factor_required"]),
    3: ("failed", ["bank_unavailable"]),
    4: ("none", []),
}
# The colours a user sees: a badge's background and the row's left edge.
BADGE_COLOURS = {
    "succeeded": "rgb(220, 252, 231)",
    "partial": "rgb(254, 249, 195)",
    "needs_action": "rgb(254, 249, 195)",
    "failed": "rgb(254, 226, 226)",
    "none": "rgb(238, 240, 243)",
}
EDGE_COLOURS = {
    "succeeded": "rgb(22, 163, 74)",
    "partial": "rgb(217, 119, 6)",
    "needs_action": "rgb(217, 119, 6)",
    "failed": "rgb(220, 38, 38)",
    "none": "rgb(152, 162, 179)",
}


def prepare_database(path: Path) -> None:
    """Bulk customers ``bulk-00001``… with accesses that ended as ``SHAPES`` says, in one
    transaction (as fast as a test's setup must be)."""
    with sqlite3.connect(path) as db:
        secret = db.execute("SELECT secret FROM accesses LIMIT 1").fetchone()[0]
        db.executemany(
            "INSERT INTO customers (external_id, name, scrape_state, scrape_started_at, "
            "scrape_finished_at, created_at, sync_version) VALUES (?, ?, ?, ?, ?, ?, 0)",
            [
                (
                    f"bulk-{n:05d}",
                    f"Bulk customer {n}",
                    "idle" if n % 5 == 4 else "all_updated",
                    None if n % 5 == 4 else REFRESHED_AT,
                    None if n % 5 == 4 else REFRESHED_AT,
                    REFRESHED_AT,
                )
                for n in range(1, BULK + 1)
            ],
        )
        ids = dict(db.execute("SELECT external_id, id FROM customers"))
        accesses = [
            (
                ids[f"bulk-{n:05d}"],
                bank,
                f"login{n}",
                secret,
                code,
                REFRESHED_AT,
                "the bank sent a one-time code by SMS" if code == "two_factor_required" else None,
            )
            for n in range(1, BULK + 1)
            for bank, code in enumerate(SHAPES[n % 5][1], start=1)
        ]
        db.executemany(
            "INSERT INTO accesses (customer_id, entity_id, login, secret, traits, scrape_state, "
            "result_code, scrape_finished_at, accounts_count, movements_count, result_detail, "
            "enabled) VALUES (?, ?, ?, ?, '{}', 'idle', ?, ?, 0, 0, ?, 1)",
            accesses,
        )


def customer_lists(seen: Visit) -> list[dict[str, list[str]]]:
    """The query of every customer list the page asked for."""
    return [
        parse_qs(urlsplit(r.url).query)
        for r in seen.requests
        if urlsplit(r.url).path == "/v1/customers" and r.method == "GET"
    ]


def test_ten_thousand_customers_are_paged_and_searched_by_the_api(
    book_browser: Browser, book_service: Service
) -> None:
    token = key(book_service, "read")
    with api_client(book_service, "read") as client:
        found = client.get("/v1/customers", params={"q": "BULK CUSTOMER 123", "limit": 1}).json()
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals["/v1/stats"] = (403,)  # a key that only reads
        seen.sign_in(token)

        expect(page.locator("#customers-range")).to_have_text("1–50 of 10,000")
        expect(page.locator("#customers button")).to_have_count(50)
        expect(page.locator("#customers button").first).to_have_attribute(
            "data-customer", "bulk-00001"
        )
        asked = customer_lists(seen)
        assert asked, "the page asked for no customers"
        assert all(int(q["limit"][0]) <= 50 and "cursor" not in q for q in asked), asked
        expect(page.locator("#customers-back")).to_be_disabled()

        page.click("#customers-next")
        expect(page.locator("#customers-range")).to_have_text("51–100 of 10,000")
        expect(page.locator("#customers button").first).to_have_attribute(
            "data-customer", "bulk-00051"
        )
        assert "cursor" in customer_lists(seen)[-1]
        page.click("#customers-back")
        expect(page.locator("#customers-range")).to_have_text("1–50 of 10,000")
        expect(page.locator("#customers button").first).to_have_attribute(
            "data-customer", "bulk-00001"
        )

        # The search is the API's: any case, the name or the id, and only the matches' page.
        page.fill("#customer-search", "BULK CUSTOMER 123")
        expect(page.locator("#customers-range")).to_have_text(f"1–{found['total']} of 11")
        names = page.locator("#customers .who .name").all_text_contents()
        assert len(names) == found["total"] == 11
        assert all(name.startswith("Bulk customer 123") for name in names), names
        assert customer_lists(seen)[-1]["q"] == ["BULK CUSTOMER 123"]
        expect(page.locator("#customers-next")).to_be_disabled()
        page.fill("#customer-search", "bulk-0777")
        expect(page.locator("#customers-range")).to_have_text("1–10 of 10")
        page.fill("#customer-search", "nobody-here")
        expect(page.locator("#customers")).to_have_text("No customer matches.")
        expect(page.locator("#customers-range")).to_have_text("0 of 0")

        asked = customer_lists(seen)
        assert all(int(q["limit"][0]) <= 50 for q in asked), asked
        assert len(asked) < 20, f"{len(asked)} list requests for a few pages"
        assert seen.foreign_requests() == []
        assert seen.errors == []


def test_outcomes_are_coloured_counted_and_filter_the_list(
    book_browser: Browser, book_service: Service
) -> None:
    token = key(book_service, "read")
    with api_client(book_service, "read") as client:
        every = client.get("/v1/customers", params={"limit": 1}).json()["outcomes"]
        failed_or_partial = client.get(
            "/v1/customers", params={"outcome": ["failed", "partial"], "limit": 1}
        ).json()["total"]
    assert set(every) == {SHAPES[n][0] for n in SHAPES}
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals["/v1/stats"] = (403,)
        seen.sign_in(token)

        # The tiles: every customer by outcome, grouped; "needs action" among them.
        tiles = page.locator("#outcome-tiles .tile")
        expect(tiles.filter(has_text="customers").locator(".value")).to_have_text("10,000")
        needs = tiles.filter(has_text="needs action").locator(".value")
        expect(needs).to_have_text(f"{every['needs_action']:,}")
        for outcome, label in [("failed", "failed"), ("none", "never refreshed")]:
            shown = tiles.filter(has_text=label).locator(".value")
            expect(shown).to_have_text(f"{every[outcome]:,}")

        # Each outcome's colour, and when the customer was last refreshed (in the page's zone).
        for n, (outcome, _) in SHAPES.items():
            row = page.locator(f"#customers button[data-customer='bulk-{n or 5:05d}']")
            expect(row).to_have_attribute("data-outcome", outcome)
            colour = row.locator(".badge").evaluate("e => getComputedStyle(e).backgroundColor")
            assert colour == BADGE_COLOURS[outcome], (outcome, colour)
            edge = row.evaluate("e => getComputedStyle(e).borderLeftColor")
            assert edge == EDGE_COLOURS[outcome], (outcome, edge)
            refreshed = "never refreshed" if outcome == "none" else REFRESHED_SHOWN
            expect(row.locator(".refreshed")).to_have_text(refreshed)

        # A tile lists its customers; chips combine outcomes and count what the search finds.
        tiles.filter(has_text="needs action").click()
        expect(page.locator("#customers-range")).to_have_text(f"1–50 of {every['needs_action']:,}")
        outcomes = page.locator("#customers button").evaluate_all(
            "rows => [...new Set(rows.map((r) => r.dataset.outcome))]"
        )
        assert outcomes == ["needs_action"]
        assert customer_lists(seen)[-1]["outcome"] == ["needs_action"]
        chips = page.locator("#outcome-chips .chip")
        expect(chips.filter(has_text="needs action")).to_have_attribute("aria-pressed", "true")
        path = screenshot_path("book")
        if path:
            page.screenshot(path=path, full_page=True)
        chips.filter(has_text="needs action").click()  # off again
        chips.filter(has_text="failed").click()
        chips.filter(has_text="partly updated").click()
        expect(page.locator("#customers-range")).to_have_text(f"1–50 of {failed_or_partial:,}")
        shown = set(
            page.locator("#customers button").evaluate_all(
                "rows => rows.map((r) => r.dataset.outcome)"
            )
        )
        assert shown == {"failed", "partial"}
        page.fill("#customer-search", "bulk-0001")  # bulk-00010 … bulk-00019
        expect(page.locator("#customers-range")).to_have_text("1–4 of 4")
        expect(chips.filter(has_text="failed").locator(".n")).to_have_text("2")
        expect(chips.filter(has_text="all outcomes").locator(".n")).to_have_text("10")
        # the tiles keep counting every customer, whatever is searched
        expect(tiles.filter(has_text="customers").locator(".value")).to_have_text("10,000")
        chips.filter(has_text="all outcomes").click()
        expect(page.locator("#customers-range")).to_have_text("1–10 of 10")
        assert seen.foreign_requests() == []
        assert seen.errors == []
