"""The operator's changes in the dashboard: add a customer and a bank access (the password never
shown again), rename, change a password, disable and enable an access, erase an access and a
customer after a confirmation that names what goes. A key without the scope gets the API's
words where it asked, and the page goes on."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor

from playwright.sync_api import Browser, Page, expect

from scrapeflow.sandbox import Sandbox, SandboxAdmin

from .conftest import Service
from .test_dashboard import (
    api_client,
    book_browser,
    book_sandbox,
    book_service,
    key,
    visiting,
)

__all__ = ["book_browser", "book_sandbox", "book_service"]  # the module's fixtures

CUSTOMERS = [1]


def sandbox_login(sandbox: Sandbox, bank: str, n: int) -> dict[str, str]:
    """Sandbox customer ``n``'s login at ``bank`` (out of Playwright's thread)."""

    async def read() -> dict[str, str]:
        async with SandboxAdmin.from_sandbox(sandbox) as admin:
            return dict(await admin.customer(bank, n))  # type: ignore[arg-type]

    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, read()).result()


def dialog_submit(page: Page, fields: dict[str, str], button: str) -> None:
    dialog = page.locator("#dialog")
    expect(dialog).to_be_visible()
    for name, value in fields.items():
        dialog.locator(f"input[name='{name}']").fill(value)
    dialog.get_by_role("button", name=button).click()


def update(page: Page) -> None:
    """Update the open customer and wait for its refresh to end (its job succeeded)."""
    with page.expect_response(re.compile(r"/refresh$")) as answer:
        page.get_by_role("button", name="Update accounts and movements").click()
    job = answer.value.json()["id"]
    ended = page.locator("#jobs tbody tr").filter(has_text=job[-10:])
    expect(ended).to_contain_text("succeeded", timeout=30_000)
    expect(page.locator("#refresh")).to_be_enabled()


def test_an_operator_adds_changes_and_erases_customers_and_accesses(
    book_browser: Browser, book_service: Service, book_sandbox: Sandbox
) -> None:
    formbank = sandbox_login(book_sandbox, "formbank", 5)
    apibank = sandbox_login(book_sandbox, "apibank", 5)
    token = key(book_service, "read", "refresh", "admin")
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals.update(
            {"/v1/stats": (403,), "/v1/customers": (409,), "/v1/customers/ana/accesses": (422,)}
        )
        seen.sign_in(token)
        expect(page.locator("#customers button")).to_have_count(1)

        # A customer: added, found, opened; its id taken twice is the API's 409, in the dialog.
        page.get_by_role("button", name="Add customer").click()
        dialog_submit(page, {"id": "cust-1", "name": "Someone"}, "Add customer")
        expect(page.locator("#dialog-error")).to_have_text("customer 'cust-1' already exists")
        dialog_submit(page, {"id": "ana", "name": "Ana Pérez"}, "Add customer")
        expect(page.locator("#dialog")).to_be_hidden()
        expect(page.locator("#customer-name")).to_have_text("Ana Pérez")
        expect(page.locator("#customers button[data-customer='ana']")).to_be_visible()
        expect(page.locator("#accesses tbody")).to_have_text("This customer has no bank access.")
        page.get_by_role("button", name="Rename").click()
        dialog_submit(page, {"name": "Ana P."}, "Rename")
        expect(page.locator("#customer-name")).to_have_text("Ana P.")
        expect(page.locator("#customers button[data-customer='ana'] .name")).to_have_text("Ana P.")

        # Accesses: an unknown bank is refused with the banks the API knows; the password
        # typed never shows again.
        page.get_by_role("button", name="Add bank access").click()
        dialog_submit(page, {"bank": "nobank", "login": "x", "password": "y"}, "Add access")
        expect(page.locator("#dialog-error")).to_contain_text(
            "banks: apibank, formbank, legacybank"
        )
        expect(page.locator("#dialog input[name='password']")).to_have_value("")
        for login in (formbank, apibank):
            bank = "formbank" if login is formbank else "apibank"
            if login is apibank:
                page.get_by_role("button", name="Add bank access").click()
            fields = {"bank": bank, "login": login["username"], "password": login["password"]}
            dialog_submit(page, fields, "Add access")
            expect(page.locator("#dialog")).to_be_hidden()
        rows = page.locator("#accesses tbody tr[data-access]")
        expect(rows).to_have_count(2)
        expect(page.locator("#customer-panel .flash")).to_contain_text("Added apibank")
        update(page)
        expect(page.locator("#refresh-state")).to_have_text("all updated")
        formbank_row = rows.filter(has_text="formbank")
        expect(formbank_row.locator("td").nth(1)).to_have_text("success")

        # A wrong password: said changed, never shown; the next update says what the bank said.
        formbank_row.get_by_role("button", name="Password").click()
        expect(page.locator("#dialog-title")).to_have_text(
            f"Change the password of formbank · {formbank['username']}"
        )
        dialog_submit(page, {"password": "not-the-password"}, "Change password")
        expect(page.locator("#customer-panel .flash")).to_have_text(
            f"Password changed for formbank · {formbank['username']}."
        )
        update(page)
        expect(formbank_row.locator("td").nth(1)).to_contain_text("wrong credentials")
        expect(page.locator("#refresh-state")).to_have_text("needs action")

        # Disabled: shown as such, left out of the update (its counter counts one bank).
        formbank_row.get_by_role("button", name="Disable").click()
        expect(formbank_row.locator("td").nth(1)).to_have_text("disabledleft out of refreshes")
        expect(formbank_row).to_have_class(re.compile(r"\bdisabled\b"))
        expect(page.locator("#refresh-state")).to_have_text("all updated")  # outcome of the rest
        page.evaluate(
            """() => {
              window.counters = [];
              new MutationObserver(() => window.counters.push(
                document.getElementById("refresh-state").textContent)).observe(
                document.getElementById("customer-panel"), {subtree: true, childList: true});
            }"""
        )
        update(page)
        counters: list[str] = page.evaluate("window.counters")
        assert any(c.endswith("/1 banks") for c in counters), counters
        assert not any(c.endswith("/2 banks") for c in counters), counters
        formbank_row.get_by_role("button", name="Enable").click()
        expect(formbank_row.locator("td").nth(1)).not_to_contain_text("disabled")
        expect(formbank_row.get_by_role("button", name="Disable")).to_be_visible()

        # Erasing an access: the confirmation names it and what goes with it; Cancel keeps it.
        with api_client(book_service, "read") as client:
            status = client.get("/v1/customers/ana/status").json()
        api_access = next(a for a in status["accesses"] if a["bank"] == "apibank")
        apibank_row = rows.filter(has_text="apibank")
        apibank_row.get_by_role("button", name="Delete").click()
        expect(page.locator("#dialog-message")).to_have_text(
            f"This erases access {api_access['access_id']} of customer ana: apibank, login "
            f"{apibank['username']}, its stored password, {api_access['accounts']} accounts "
            f"and {api_access['movements']:,} movements, and the events that name it. The "
            "customer's other banks stay. It cannot be undone."
        )
        page.locator("#dialog").get_by_role("button", name="Cancel").click()
        expect(rows).to_have_count(2)
        apibank_row.get_by_role("button", name="Delete").click()
        page.get_by_role("button", name=f"Erase apibank · {apibank['username']}").click()
        expect(rows).to_have_count(1)
        expect(page.locator("#customer-panel .flash")).to_contain_text(
            f"Erased apibank · {apibank['username']}: {api_access['accounts']} accounts"
        )
        expect(page.locator("#accounts tbody")).not_to_contain_text("apibank")

        # Erasing the customer: named, with its counts; gone from the list after.
        page.get_by_role("button", name="Delete customer").click()
        expect(page.locator("#dialog-title")).to_have_text("Erase customer ana (Ana P.)?")
        expect(page.locator("#dialog-message")).to_contain_text(
            "This erases customer ana (Ana P.) and everything of it: 1 bank access with their"
        )
        page.get_by_role("button", name="Erase ana").click()
        expect(page.locator("#pick-customer")).to_contain_text("Customer ana was erased")
        expect(page.locator("#customer-panel")).to_be_hidden()
        expect(page.locator("#customers button[data-customer='ana']")).to_have_count(0)
        expect(page.locator("#live")).to_have_attribute("data-state", "idle")

        for secret in (formbank["password"], apibank["password"], "not-the-password"):
            assert secret not in page.content()
        assert seen.foreign_requests() == []
        assert seen.errors == []
    with api_client(book_service, "admin") as client:
        assert client.get("/v1/customers/ana").status_code == 404


def test_a_key_without_the_scope_is_told_so_where_it_asked(
    book_browser: Browser, book_service: Service
) -> None:
    with api_client(book_service, "read", "refresh") as client:
        status = client.get("/v1/customers/cust-1/status").json()
        access = status["accesses"][0]["access_id"]
        refused = {
            "add": client.post("/v1/customers", json={"id": "bob", "name": "Bob"}),
            "disable": client.patch(
                f"/v1/customers/cust-1/accesses/{access}", json={"enabled": False}
            ),
            "erase": client.delete("/v1/customers/cust-1"),
        }
    assert {name: answer.status_code for name, answer in refused.items()} == dict.fromkeys(
        refused, 403
    )
    token = key(book_service, "read", "refresh")
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals.update(
            {
                "/v1/stats": (403,),
                "/v1/customers": (403,),
                f"/v1/customers/cust-1/accesses/{access}": (403,),
                "/v1/customers/cust-1": (403,),
            }
        )
        seen.sign_in(token)
        page.get_by_role("button", name="Add customer").click()
        dialog_submit(page, {"id": "bob", "name": "Bob"}, "Add customer")
        expect(page.locator("#dialog-error")).to_have_text(refused["add"].json()["detail"])
        page.locator("#dialog").get_by_role("button", name="Cancel").click()

        page.click("#customers button[data-customer='cust-1']")
        row = page.locator(f"#accesses tbody tr[data-access='{access}']")
        row.get_by_role("button", name="Disable").click()
        expect(page.locator("#customer-panel .note")).to_have_text(
            refused["disable"].json()["detail"]
        )
        expect(row.locator("td").nth(1)).not_to_contain_text("disabled")
        page.get_by_role("button", name="Delete customer").click()
        page.get_by_role("button", name="Erase cust-1").click()
        expect(page.locator("#dialog-error")).to_have_text(refused["erase"].json()["detail"])
        page.locator("#dialog").get_by_role("button", name="Cancel").click()
        # the page goes on: the customer is still there, its banks still shown
        expect(page.locator("#customer-panel")).to_be_visible()
        expect(page.locator("#accesses tbody tr[data-access]")).to_have_count(3)
        assert seen.foreign_requests() == []
        assert seen.errors == []


def test_a_customer_is_not_erased_while_it_is_being_updated(
    book_browser: Browser, book_service: Service, book_sandbox: Sandbox
) -> None:
    token = key(book_service, "read", "refresh", "admin")
    book_sandbox.sites["formbank"].guard.latency_ms = (1_000.0, 1_200.0)  # a long update
    try:
        with visiting(book_browser, book_service) as seen:
            page = seen.page
            seen.refusals.update({"/v1/stats": (403,), "/v1/customers/cust-1": (409,)})
            seen.sign_in(token)
            page.click("#customers button[data-customer='cust-1']")
            expect(page.locator("#accesses tbody tr[data-access]")).to_have_count(3)
            with page.expect_response(re.compile(r"/refresh$")):
                page.get_by_role("button", name="Update accounts and movements").click()
            with api_client(book_service, "admin") as client:
                busy = client.delete("/v1/customers/cust-1")
            assert busy.status_code == 409, busy.text
            page.get_by_role("button", name="Delete customer").click()
            page.get_by_role("button", name="Erase cust-1").click()
            expect(page.locator("#dialog-error")).to_have_text(busy.json()["detail"])
            page.locator("#dialog").get_by_role("button", name="Cancel").click()
            expect(page.locator("#customer-panel")).to_be_visible()
            assert seen.errors == []
    finally:
        book_sandbox.sites["formbank"].guard.latency_ms = (0.0, 2.0)
