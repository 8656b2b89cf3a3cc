"""The dashboard while banks work: an update shows each access queued, in progress, then its
result with the bank's message, and the counter moves as each access ends ("1/3 banks");
an access that waits for a one-time code gets a form, the bank's words beside it, and the code
typed there resumes it, followed until its result."""

from __future__ import annotations

import asyncio
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from playwright.sync_api import Browser, expect

from scrapeflow.sandbox import Sandbox, SandboxAdmin

from .conftest import BANKS, Service
from .test_dashboard import (
    api_client,
    book_browser,
    book_sandbox,
    book_service,
    key,
    record_progress,
    refreshed,
    screenshot_path,
    visiting,
)

__all__ = ["book_browser", "book_sandbox", "book_service"]  # the module's fixtures

CUSTOMERS = [2, 6]  # both wait for a code at legacybank (n % 4 == 2)
# One refresh at a time: a refresh asked while another runs is seen queued.
SETTINGS = {"SCRAPEFLOW_REFRESH_CONCURRENCY": "1"}
SMS = "the bank sent a one-time code by SMS"  # legacybank's words, the access's detail


def running_first(client: httpx.Client, job: str) -> None:
    """Wait until ``job`` runs."""
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{job}").json()["state"] == "queued":
        assert time.monotonic() < deadline, f"{job} never ran"
        time.sleep(0.02)


def sandbox_code(sandbox: Sandbox, username: str) -> str:
    """The code legacybank "sent by SMS" to ``username`` (its admin API, out of Playwright's
    thread, which forbids another event loop)."""

    async def read() -> str:
        async with SandboxAdmin.from_sandbox(sandbox) as admin:
            return await admin.otp("legacybank", username)

    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, read()).result()


def test_an_update_shows_each_access_live_and_counts_the_banks_that_ended(
    book_browser: Browser, book_service: Service, book_sandbox: Sandbox
) -> None:
    with api_client(book_service, "read", "refresh") as client:
        before = refreshed(client, "cust-2")  # results to be replaced, not shown meanwhile
    assert before["results"] == {"success": 2, "two_factor_required": 1}
    # The banks end one after another, far enough apart to see each end on its own.
    latencies = {"legacybank": (5.0, 10.0), "apibank": (60.0, 90.0), "formbank": (150.0, 200.0)}
    for bank, latency in latencies.items():
        book_sandbox.sites[bank].guard.latency_ms = latency
    token = key(book_service, "read", "refresh")
    try:
        with visiting(book_browser, book_service) as seen:
            page = seen.page
            seen.refusals["/v1/stats"] = (403,)
            seen.sign_in(token)
            page.click("#customers button[data-customer='cust-2']")
            expect(page.locator("#live")).to_have_attribute("data-state", "live")
            expect(page.locator("#accesses tbody tr[data-access]")).to_have_count(len(BANKS))
            expect(page.locator("#refresh-state")).to_have_text("needs action")

            # Another customer's refresh holds the one place: this one waits, queued.
            with api_client(book_service, "read", "refresh") as client:
                other = client.post("/v1/customers/cust-6/refresh").json()["id"]
                running_first(client, other)
            record_progress(page)
            with page.expect_response(re.compile(r"/refresh$")) as answer:
                page.get_by_role("button", name="Update accounts and movements").click()
            job = answer.value.json()["id"]
            ended = page.locator("#jobs tbody tr").filter(has_text=job[-10:])
            expect(ended).to_contain_text("succeeded", timeout=30_000)
            expect(page.locator("#refresh-state")).to_have_text("needs action")
            expect(page.locator("#accesses tbody")).not_to_contain_text("in progress")
            shown: list[list[str]] = page.evaluate("window.progressShown")
            # What it ended with: each result, the bank's message, the time in the page's zone.
            for bank, result in [
                ("formbank", "success"),
                ("apibank", "success"),
                ("legacybank", f"two factor required{SMS}"),
            ]:
                row = page.locator("#accesses tbody tr[data-access]").filter(has_text=bank)
                expect(row.locator("td").nth(1)).to_have_text(result)
                expect(row.locator("td").nth(4)).to_have_text(re.compile(r"\d\d:\d\d:\d\d E[SD]T$"))
            # The movements were read when the customer opened and once the update ended: the
            # history its stream replays first (the earlier refresh) read nothing again.
            expect(page.locator("#movements tbody tr").first).to_be_visible()
            read = [r for r in seen.requests if "/v1/customers/cust-2/movements" in r.url]
            assert len(read) == 2, [r.url for r in read]
            assert seen.errors == []
    finally:
        for bank in BANKS:
            book_sandbox.sites[bank].guard.latency_ms = (0.0, 2.0)

    states = [state for state, _ in shown]
    for counter in ("queued · 0/3 banks", "updating · 1/3 banks", "updating · 2/3 banks"):
        assert counter in states, (counter, states)
    assert states.index("updating · 1/3 banks") < states.index("updating · 2/3 banks")
    rows = [row for _, table in shown for row in table.split("\n")]
    queued = [row for row in rows if "\tqueued\t" in row]
    working = [row for row in rows if "\tin progress\t" in row]
    assert queued and working, rows
    # While an access works, its result is its own, not the last refresh's "success".
    assert not [row for row in queued + working if "success" in row], rows
    # legacybank ended first, with its message, while the others still worked.
    assert any(SMS in table and "in progress" in table for _, table in shown), shown


def test_a_one_time_code_typed_in_the_page_resumes_the_access(
    book_browser: Browser, book_service: Service, book_sandbox: Sandbox
) -> None:
    with api_client(book_service, "read", "refresh") as client:
        status = refreshed(client, "cust-6")
        bad = client.post(
            f"/v1/customers/cust-6/accesses/{status['accesses'][2]['access_id']}/otp",
            json={"code": "12x"},
        )
    legacy = next(a for a in status["accesses"] if a["bank"] == "legacybank")
    assert legacy["result"] == "two_factor_required" and legacy["detail"] == SMS
    assert bad.status_code == 422
    token = key(book_service, "read", "refresh")
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals.update({"/v1/stats": (403,), otp_path(legacy["access_id"]): (422,)})
        seen.sign_in(token)
        page.click("#customers button[data-customer='cust-6']")
        form = page.locator(f"#accesses tr[data-code-for='{legacy['access_id']}'] form")
        expect(form).to_contain_text("legacybank asks for a one-time code")
        expect(form.locator(".bank-says")).to_have_text(SMS)
        row = page.locator(f"#accesses tbody tr[data-access='{legacy['access_id']}']")
        expect(row.locator("td").nth(1)).to_have_text(f"two factor required{SMS}")
        path = screenshot_path("code")
        if path:
            page.screenshot(path=path, full_page=True)

        # A code the API refuses: its words, in the form.
        form.locator("input").fill("12x")
        with page.expect_response(
            lambda answer: (
                answer.request.method == "POST"
                and answer.url.endswith(otp_path(legacy["access_id"]))
            ),
            timeout=60_000,
        ) as refused:
            form.get_by_role("button", name="Send code").click()
        assert refused.value.status == 422
        expect(form.locator(".error")).to_have_text(bad.json()["detail"])
        expect(form.locator("input")).to_have_value("")  # a code never stays in the page

        code = sandbox_code(book_sandbox, legacy["login"])
        record_progress(page)
        form.locator("input").fill(code)
        form.get_by_role("button", name="Send code").click()
        expect(row.locator("td").nth(1)).to_have_text("success", timeout=30_000)
        expect(page.locator("#customer-panel .flash")).to_have_text(
            "The code was given to the bank: success."
        )
        expect(form).to_have_count(0)
        expect(page.locator("#refresh-state")).to_have_text("all updated")
        expect(page.locator("#accounts tbody tr").filter(has_text="legacybank")).not_to_have_count(
            0
        )
        expect(row.locator("td").nth(2)).not_to_have_text("0")
        shown: list[list[str]] = page.evaluate("window.progressShown")
        assert any("checking the code" in state for state, _ in shown), shown
        assert code not in page.content()
        assert seen.foreign_requests() == []
        assert seen.errors == []
    with api_client(book_service, "read") as client:
        after = client.get("/v1/customers/cust-6/status").json()
    assert after["outcome"] == "succeeded"


def otp_path(access_id: int) -> str:
    return f"/v1/customers/cust-6/accesses/{access_id}/otp"
