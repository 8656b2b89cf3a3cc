"""The dashboard's ledger of a customer: balances totalled per currency (exactly, grouped), its
movements filtered by account and dates, and the same movements exported as CSV, OFX and JSON
files downloaded through the API with the key; times with their zone."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from .conftest import Service
from .test_dashboard import (
    api_client,
    book_browser,
    book_sandbox,
    book_service,
    key,
    refreshed,
    shown_money,
    visiting,
)

__all__ = ["book_browser", "book_sandbox", "book_service"]  # the module's fixtures

CUSTOMERS = [1]
PAGE = 25  # movements the page shows at first


def export(page: Page, button: str) -> tuple[str, bytes]:
    """Click an export button; the file the browser saved: its name and bytes."""
    with page.expect_download() as started:
        page.get_by_role("button", name=button).click()
    download = started.value
    assert download.failure() is None
    return download.suggested_filename, Path(download.path()).read_bytes()


def stamped(ofx: bytes) -> bytes:
    """An OFX file without the times it was made at (the server's clock, each download's)."""
    return re.sub(rb"<(DTSERVER|DTASOF)>\d+", rb"<\1>", ofx)


def test_totals_filters_and_exports_match_what_the_api_holds(
    book_browser: Browser, book_service: Service
) -> None:
    with api_client(book_service, "read", "refresh") as client:
        refreshed(client, "cust-1")
        accounts = client.get("/v1/customers/cust-1/accounts").json()
        every = client.get("/v1/customers/cust-1/movements", params={"limit": 1000}).json()
    # An account with movements on several days, and a window of them.
    by_account: dict[str, list[str]] = {}
    for movement in every["movements"]:
        by_account.setdefault(movement["account"], []).append(movement["operation_date"])
    account = next(
        a for a in accounts if a["iban"] and len(set(by_account.get(a["iban"], []))) >= 3
    )
    days = sorted(set(by_account[account["iban"]]))
    since, until = days[1], days[-2] if len(days) > 3 else days[-1]
    filters = {"account": account["iban"], "since": since, "until": until}
    with api_client(book_service, "read") as client:
        matching = client.get(
            "/v1/customers/cust-1/movements", params={**filters, "limit": 1000}
        ).json()["movements"]
        csv_file = client.get(
            "/v1/customers/cust-1/movements/export", params={**filters, "format": "csv"}
        )
        ofx_file = client.get(
            "/v1/customers/cust-1/movements/export", params={**filters, "format": "ofx"}
        )
        json_file = client.get(
            "/v1/customers/cust-1/movements/export", params={**filters, "format": "json"}
        )
        every_csv = client.get("/v1/customers/cust-1/movements/export", params={"format": "csv"})
    assert matching and len(matching) < len(every["movements"])

    token = key(book_service, "read")
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals["/v1/stats"] = (403,)
        seen.sign_in(token)
        page.click("#customers button[data-customer='cust-1']")
        expect(page.locator("#accounts tbody tr")).to_have_count(len(accounts))

        # Totals per currency, summed exactly, grouped, with the currency.
        totals: dict[str, Decimal] = {}
        for a in accounts:
            totals[a["currency"]] = totals.get(a["currency"], Decimal(0)) + Decimal(a["balance"])
        assert len(totals) > 1, "the sandbox customer should hold several currencies"
        expect(page.locator("#totals .total .label")).to_have_text(
            [f"Total {currency}" for currency in sorted(totals)]
        )
        expect(page.locator("#totals .total .value")).to_have_text(
            [shown_money(str(totals[c]), c) for c in sorted(totals)]
        )
        balances = page.locator("#accounts tbody td:nth-child(4)").all_text_contents()
        assert sorted(balances) == sorted(
            shown_money(a["balance"], a["currency"]) for a in accounts
        )
        assert any("," in b for b in balances), balances  # thousands are grouped
        updated = page.locator("#accounts tbody td:nth-child(5)").first
        expect(updated).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d\d\d:\d\d:\d\d E[SD]T$"))

        # A card has no IBAN: its filter is the bank's reference, which another bank of the
        # customer may use too (the API's filter keeps both): its option says so.
        shared = [
            (card, other)
            for card in accounts
            if not card["iban"]
            for other in accounts
            if other is not card and card["bank_ref"] in (other["bank_ref"], other["iban"])
        ]
        assert shared, "the sandbox customer should have a card whose reference another bank has"
        for card, other in shared:
            option = page.locator("#filter-account option").filter(has_text=card["number"])
            expect(option).to_contain_text(f"{other['bank']}'s {other['bank_ref']}")

        # Filters: by account, since and until; the list is the API's for the same filters.
        expect(page.locator("#movements tbody tr")).to_have_count(PAGE)
        page.select_option("#filter-account", account["iban"])
        page.fill("#filter-since", since)
        page.fill("#filter-until", until)
        rows = page.locator("#movements tbody tr")
        expect(rows).to_have_count(min(PAGE, len(matching)))
        titles = rows.locator("td:nth-child(3)").evaluate_all("cells => cells.map((c) => c.title)")
        assert titles == [m["description"] for m in matching[:PAGE]]
        shown_days = rows.locator("td:nth-child(1) span:first-child").all_text_contents()
        assert all(since <= day <= until for day in shown_days), shown_days
        accounts_shown = set(rows.locator("td:nth-child(2) .sub").all_text_contents())
        assert accounts_shown == {account["iban"]}

        # Exports: the files the API makes for these filters, saved by the browser.
        name, body = export(page, "Export CSV")
        assert name == "cust-1-movements.csv"
        assert body == csv_file.content
        assert body.decode().count("\n") == len(matching) + 1  # a header, then each movement
        name, body = export(page, "Export OFX")
        assert name == "cust-1-movements.ofx"
        assert stamped(body) == stamped(ofx_file.content)  # but the time it was made
        booked = [m["key"] for m in matching if not m["pending"]]
        fitids = re.findall(rb"<FITID>([^<]+)</FITID>", body)
        assert sorted(fitids) == sorted(k.encode() for k in booked)

        name, body = export(page, "Export JSON")
        assert name == "cust-1-movements.json"
        assert body == json_file.content

        page.get_by_role("button", name="Clear filters").click()
        expect(rows).to_have_count(PAGE)
        expect(page.locator("#filter-account")).to_have_value("")
        name, body = export(page, "Export CSV")
        assert body == every_csv.content

        assert seen.foreign_requests() == []
        assert seen.errors == []
