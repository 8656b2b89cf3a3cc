"""The dashboard's keys, webhooks and jobs: an admin key lists the keys, makes one (its token
shown once, and it works as made), rotates it (the old secret stops) and revokes it; any key
makes, inspects and deletes its webhooks (the signing secret shown once); a key with the jobs
scope starts a fetch job and reads its results. A key that may not is told so where it asked,
in the API's words."""

from __future__ import annotations

import httpx
from playwright.sync_api import Browser, Page, expect

from scrapeflow.sandbox import Sandbox

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

CUSTOMERS = [1, 2]


def shown_secret(page: Page) -> str:
    """The secret the dialog shows once; the dialog closed after."""
    secret = page.locator("#dialog input[name='secret']").input_value()
    page.locator("#dialog").get_by_role("button", name="Done").click()
    expect(page.locator("#dialog")).to_be_hidden()
    return secret


def customers_seen(service: Service, token: str) -> httpx.Response:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        return client.get("/v1/customers", headers={"Authorization": f"Bearer {token}"})


def test_an_admin_makes_rotates_and_revokes_a_key_and_manages_webhooks(
    book_browser: Browser, book_service: Service
) -> None:
    token = key(book_service, "read", "admin")
    with api_client(book_service, "read", "admin") as client:
        bad_url = client.post("/v1/webhooks", json={"url": "not a url"})
    assert bad_url.status_code == 422
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals.update({"/v1/stats": (403,), "/v1/webhooks": (422,)})
        seen.sign_in(token)
        page.get_by_role("button", name="API keys").click()
        expect(page.get_by_role("button", name="API keys")).to_have_attribute(
            "aria-pressed", "true"
        )
        own = token.split("_")[1]
        expect(page.locator(f"#keys tr[data-key='{own}']")).to_contain_text("admin, read")

        page.get_by_role("button", name="New key").click()
        dialog = page.locator("#dialog")
        dialog.locator("input[name='name']").fill("accounting")
        dialog.get_by_label("refresh").check()
        dialog.locator("input[name='customers']").fill("cust-1")
        dialog.locator("input[name='expires']").fill("30d")
        dialog.get_by_role("button", name="Create key").click()
        expect(page.locator("#dialog-title")).to_contain_text("created")
        made = shown_secret(page)
        made_id = made.split("_")[1]
        row = page.locator(f"#keys tr[data-key='{made_id}']")
        expect(row).to_contain_text("accounting")
        expect(row.locator("td").nth(2)).to_have_text("read, refresh")
        expect(row.locator("td").nth(3)).to_have_text("cust-1")
        expect(row.locator("td").nth(7)).to_have_text("active")
        listed = customers_seen(book_service, made)
        assert listed.status_code == 200
        assert [c["id"] for c in listed.json()["customers"]] == ["cust-1"]  # as it was made

        row.get_by_role("button", name="Rotate").click()
        page.locator("#dialog").get_by_role("button", name="Rotate").click()
        rotated = shown_secret(page)
        assert rotated != made and rotated.split("_")[1] == made_id
        assert customers_seen(book_service, made).status_code == 401
        assert customers_seen(book_service, rotated).status_code == 200

        row.get_by_role("button", name="Revoke").click()
        expect(page.locator("#dialog-message")).to_contain_text(
            f"Key {made_id} (accounting), scopes read, refresh, stops working"
        )
        page.get_by_role("button", name=f"Revoke {made_id}").click()
        expect(row.locator("td").nth(7)).to_have_text("revoked")
        expect(row.get_by_role("button", name="Revoke")).to_have_count(0)
        assert customers_seen(book_service, rotated).status_code == 401

        # Webhooks: made with its secret shown once, its deliveries, deleted after asking.
        page.get_by_role("button", name="Webhooks").click()
        expect(page.locator("#webhooks tbody")).to_have_text("No webhooks.")
        page.get_by_role("button", name="New webhook").click()
        dialog.locator("input[name='url']").fill("not a url")
        dialog.get_by_role("button", name="Create webhook").click()
        expect(page.locator("#dialog-error")).to_have_text(bad_url.json()["detail"])
        dialog.locator("input[name='url']").fill("http://127.0.0.1:9/hooks")
        dialog.locator("input[name='events']").fill("job., bank.all_updated")
        dialog.get_by_role("button", name="Create webhook").click()
        secret = shown_secret(page)
        assert secret.startswith("whsec_")
        hook = page.locator("#webhooks tbody tr[data-webhook]")
        expect(hook).to_have_count(1)
        expect(hook).to_contain_text("http://127.0.0.1:9/hooks")
        expect(hook).to_contain_text("job., bank.all_updated")
        hook.get_by_role("button", name="Deliveries").click()
        expect(page.locator("#deliveries-of")).to_have_text("http://127.0.0.1:9/hooks")
        expect(page.locator("#deliveries tbody")).to_have_text("Nothing delivered yet.")
        hook.get_by_role("button", name="Delete").click()
        expect(page.locator("#dialog-message")).to_contain_text("http://127.0.0.1:9/hooks")
        page.get_by_role("button", name="Delete webhook").click()
        expect(page.locator("#webhooks tbody")).to_have_text("No webhooks.")

        assert secret not in page.content() and rotated not in page.content()
        assert seen.foreign_requests() == []
        assert seen.errors == []
    with api_client(book_service, "read", "admin") as client:
        assert client.get("/v1/webhooks").json() == []


def test_a_key_that_may_not_manage_keys_is_told_so_in_the_tab(
    book_browser: Browser, book_service: Service
) -> None:
    with api_client(book_service, "read") as client:
        refused = client.get("/v1/keys")
    assert refused.status_code == 403
    token = key(book_service, "read")
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals.update({"/v1/stats": (403,), "/v1/keys": (403,)})
        seen.sign_in(token)
        page.get_by_role("button", name="API keys").click()
        expect(page.locator("#admin-panel .note")).to_have_text(refused.json()["detail"])
        page.get_by_role("button", name="Webhooks").click()  # its own: allowed
        expect(page.locator("#admin-panel .note")).to_be_hidden()
        expect(page.locator("#webhooks tbody")).to_have_text("No webhooks.")
        assert seen.errors == []


def test_a_fetch_job_is_started_from_the_page_and_its_results_read(
    book_browser: Browser, book_service: Service, book_sandbox: Sandbox
) -> None:
    urls = [f"{book_sandbox.urls['plain']}/page/{n}" for n in (1, 2)]
    with api_client(book_service, "read") as client:
        refused = client.post("/v1/jobs", json={"kind": "fetch", "params": {"urls": urls}})
    assert refused.status_code == 403
    with visiting(book_browser, book_service) as seen:
        page = seen.page
        seen.refusals.update({"/v1/stats": (403,), "/v1/jobs": (403,)})
        seen.sign_in(key(book_service, "read"))
        page.get_by_role("button", name="New job").click()
        page.locator("#dialog textarea[name='items']").fill("\n".join(urls))
        page.get_by_role("button", name="Start job").click()
        expect(page.locator("#dialog-error")).to_have_text(refused.json()["detail"])
        page.locator("#dialog").get_by_role("button", name="Cancel").click()
        page.click("#logout")

        seen.sign_in(key(book_service, "read", "jobs"))
        page.get_by_role("button", name="New job").click()
        page.locator("#dialog textarea[name='items']").fill("\n".join(urls))
        page.get_by_role("button", name="Start job").click()
        expect(page.locator("#dialog")).to_be_hidden()
        job = page.locator("#jobs tbody tr").filter(has_text="fetch").first
        expect(job).to_be_visible()
        expect(job).to_contain_text("succeeded", timeout=30_000)  # followed until it ends
        job.get_by_role("button", name="Results").click()
        results = page.locator("#job-results tbody tr")
        expect(results).to_have_count(2)
        expect(results.locator("td:nth-child(1)")).to_have_text(urls)
        expect(results.locator("td:nth-child(2)")).to_have_text(["stored", "stored"])
        assert seen.errors == []
