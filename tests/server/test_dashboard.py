"""The dashboard at ``/``, in a real headless Chromium against the real service: sign in with a
key, pick a customer, update it and watch the progress reach "all updated" while the tables
fill; a bad key shows the API's message and no data; a panel the key may not see says why, in
the API's words; a customer's name is text, never markup; the page talks to no other host and
logs no error. And the routes themselves: security headers, caching, every script module
served, no path traversal.

The other ``test_dashboard_*.py`` files test the operator's work (the customer book at scale,
one-time codes and live progress, changes, the ledger) with the kit defined here: one service
and one browser per module (``book_service``, ``book_browser``), pages in a zone of their own.

``SCRAPEFLOW_SCREENSHOT=<file.png>`` saves a full-page screenshot (1280 wide) after the update,
of a service with its daily schedule on; the other files save theirs beside it
(``<file>-code.png``…).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect, sync_playwright

from scrapeflow.sandbox import Sandbox, SandboxConfig
from scrapeflow.server.routes.dashboard import load_static
from tests._servers import unavailable

from .conftest import BANKS, Service, service_env, start_service, stop_service

WIDTH = 1280
PAGE = 25  # movements the page shows at first, and adds per "More"
# Read at import: the tests run in a clean environment, without SCRAPEFLOW_* variables.
SCREENSHOT = os.environ.get("SCRAPEFLOW_SCREENSHOT")


ZONE = "America/New_York"
"""The zone of the pages of the other dashboard files: not the machine's, so a time shown in it
was converted and says so (EST or EDT)."""


EXPECT_TIMEOUT_MS = 15_000
"""How long an ``expect`` waits for the page (Playwright's default is 5 s): the suite runs the
service, its sandbox and Chromium beside other tests on two cores, where one answer of the
service may take seconds. A page that is right passes as soon as it is; only a wrong one waits
this long. Set once, for every dashboard test of the process (they import this module)."""
expect.set_options(timeout=EXPECT_TIMEOUT_MS)


def chromium() -> Iterator[Browser]:
    """Headless Chromium (Debian's)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("chromium is not installed")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=found)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def browser(service: Service) -> Iterator[Browser]:
    """Started after the service: the service's fixture runs an event loop of its own, which
    Playwright's sync API forbids once it runs in this thread."""
    yield from chromium()


def shown_money(amount: str, currency: str) -> str:
    """An amount as the page shows it: thousands grouped, the API's decimals, the currency."""
    sign, digits = ("-", amount[1:]) if amount.startswith("-") else ("", amount)
    whole, dot, fraction = digits.partition(".")
    return f"{sign}{int(whole):,}{dot}{fraction} {currency}"


# -- one service and one browser per module, for the other dashboard files --------------------


@pytest.fixture(scope="module")
def book_sandbox() -> Iterator[Sandbox]:
    """The sandbox of a module's service (as ``sandbox``, for every test of the module)."""
    config = SandboxConfig(hostility="none", latency_ms=(0, 2), customers=1000)
    with Sandbox.in_thread(config) as running:
        yield running


@pytest.fixture(scope="module")
def book_service(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    book_sandbox: Sandbox,
) -> Iterator[Service]:
    """One service for the module: its customers ``cust-N`` for the module's ``CUSTOMERS``
    (default 1, 2, 3), after its ``prepare_database(path)`` (if any) ran on the SQLite file;
    the module's ``SETTINGS`` (environment variables) added to the service's."""
    tmp_path = tmp_path_factory.mktemp("dashboard")
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
    customers = list(getattr(request.module, "CUSTOMERS", [1, 2, 3]))
    with pytest.MonkeyPatch.context() as clean:  # the autouse clean_environ is per test
        for name in list(os.environ):
            if name.startswith("SCRAPEFLOW_") or name.upper().endswith("_PROXY"):
                clean.delenv(name)
        env = service_env(tmp_path, book_sandbox, db_url, customers=customers, backend="embedded")
    env |= getattr(request.module, "SETTINGS", {})
    prepare = getattr(request.module, "prepare_database", None)
    if prepare is not None:
        prepare(tmp_path / "service.db")
    process, url = start_service(env)
    running = Service(url, env, db_url, process)
    try:
        yield running
    finally:
        stop_service(running.process)


@pytest.fixture(scope="module")
def book_browser(book_service: Service) -> Iterator[Browser]:
    """Chromium for the module, started after its service (see ``browser``)."""
    yield from chromium()


def refreshed(client: httpx.Client, customer: str) -> dict:  # type: ignore[type-arg]
    """Refresh ``customer`` through the API and wait for its status to say it ended."""
    assert client.post(f"/v1/customers/{customer}/refresh").status_code == 202
    deadline = time.monotonic() + 60
    while True:
        status: dict = client.get(f"/v1/customers/{customer}/status").json()  # type: ignore[type-arg]
        if status["all_updated"]:
            return status
        assert time.monotonic() < deadline, f"{customer} never updated"
        time.sleep(0.1)


def screenshot_path(suffix: str) -> str | None:
    """Where a file's screenshot goes: beside ``SCRAPEFLOW_SCREENSHOT``, named with ``suffix``."""
    if not SCREENSHOT:
        return None
    base = Path(SCREENSHOT)
    return str(base.with_name(f"{base.stem}-{suffix}{base.suffix}"))


@dataclass
class Visit:
    """A page on the dashboard, with what it asked for and what went wrong in it."""

    page: Page
    service_url: str
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Chromium reports every non-2xx answer to a fetch() on the console: these are the answers a
    # test expects the page to show in place (a panel saying what the key may not see).
    refusals: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        where = urlsplit(message.location.get("url", "")).path
        refused = re.match(
            r"Failed to load resource: the server responded with a status of (\d+)", message.text
        )
        if refused and int(refused.group(1)) in self.refusals.get(where, ()):
            return
        self.errors.append(f"{message.text} ({message.location})")

    def foreign_requests(self) -> list[str]:
        origin = urlsplit(self.service_url)
        return [
            r.url
            for r in self.requests
            if (urlsplit(r.url).scheme, urlsplit(r.url).netloc) != (origin.scheme, origin.netloc)
        ]

    def sign_in(self, key: str) -> None:
        self.page.fill("#api-key", key)
        self.page.click("#login-submit")


def key(service: Service, *scopes: str, customer: str | None = None) -> str:
    """``service.key`` runs an event loop: do it in a thread of its own, out of Playwright's."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(service.key, *scopes, customer=customer).result()


def api_client(service: Service, *scopes: str, customer: str | None = None) -> httpx.Client:
    key(service, *scopes, customer=customer)  # made (and kept) out of Playwright's thread
    return service.client(*scopes, customer=customer)


@contextlib.contextmanager
def visiting(browser: Browser, service: Service, *, zone: str = ZONE) -> Iterator[Visit]:
    """``visit`` in ``zone``, the page closed at exit (its event stream with it)."""
    seen = visit(browser, service, zone=zone)
    try:
        yield seen
    finally:
        seen.page.close()


def visit(browser: Browser, service: Service, *, zone: str | None = None) -> Visit:
    """A new page on the dashboard (in ``zone``, else the machine's), at its sign-in form."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 900}, timezone_id=zone)
    seen = Visit(page, service.url)
    page.on("console", seen.on_console)
    page.on("pageerror", lambda error: seen.errors.append(f"uncaught: {error}"))
    page.on("request", lambda request: seen.requests.append(request))
    page.goto(f"{service.url}/")
    expect(page.locator("#login-view")).to_be_visible()
    return seen


def record_progress(page: Page) -> None:
    """Keep every state the progress panel shows (a refresh may be over in a second)."""
    page.evaluate(
        """() => {
          window.progressShown = [];
          const panel = document.getElementById("customer-panel");
          const note = () => window.progressShown.push([
            document.getElementById("refresh-state").textContent,
            panel.querySelector("#accesses tbody").innerText,
          ]);
          const what = {subtree: true, childList: true, characterData: true};
          new MutationObserver(note).observe(panel, what);
        }"""
    )


def test_update_a_customer_and_watch_it_reach_all_updated(
    browser: Browser, service: Service, sandbox: Sandbox
) -> None:
    for bank in BANKS:  # long enough to watch the banks work, short enough for a test
        sandbox.sites[bank].guard.latency_ms = (20.0, 60.0)
    if SCREENSHOT:
        with_the_daily_schedule_on(service)
    token = key(service, "read", "refresh", "metrics")
    seen = visit(browser, service)
    page = seen.page
    seen.sign_in(token)

    expect(page.locator("#customers button")).to_have_count(3)
    # No customer picked, no stream: the indicator says so, not that something is broken.
    expect(page.locator("#live")).to_have_text("no customer picked: no live stream")
    expect(page.locator("#live")).to_have_attribute("data-state", "idle")
    page.click("#customers button[data-customer='cust-1']")
    expect(page.locator("#customer-id")).to_have_text("cust-1")
    expect(page.locator("#accesses tbody tr")).to_have_count(len(BANKS))
    expect(page.locator("#movements tbody tr.empty")).to_have_count(1)  # nothing read yet
    expect(page.locator("#refresh-state")).not_to_have_text("all updated")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")

    record_progress(page)
    page.get_by_role("button", name="Update accounts and movements").click()
    expect(page.locator("#refresh-state")).to_have_text("all updated", timeout=60_000)
    shown = page.evaluate("window.progressShown")
    assert any("updating" in state for state, _ in shown), shown
    assert any("in progress" in accesses for _, accesses in shown), shown
    expect(page.locator("#movements tbody tr:not(.empty)").first).to_be_visible(timeout=10_000)

    with api_client(service, "read") as client:
        accounts = client.get("/v1/customers/cust-1/accounts").json()
        every = client.get("/v1/customers/cust-1/movements", params={"limit": 1000}).json()
        newest = client.get("/v1/customers/cust-1/movements", params={"limit": PAGE}).json()
        jobs = client.get("/v1/jobs").json()["jobs"]
    total = len(every["movements"])
    assert total > PAGE, "the sandbox customer should have more than one page of movements"

    # What the API says, as it says it: the same accounts, the newest page, money untouched.
    expect(page.locator("#accesses tbody")).not_to_contain_text("in progress")
    for result in page.locator("#accesses tbody tr td:nth-child(2)").all_text_contents():
        assert result == "success"
    expect(page.locator("#accounts tbody tr")).to_have_count(len(accounts))
    expect(page.locator("#movements tbody tr")).to_have_count(PAGE)
    first = newest["movements"][0]
    amount = page.locator("#movements tbody tr").first.locator("td").nth(3)
    expect(amount).to_have_text(shown_money(first["amount"], first["currency"]))
    balances = page.locator("#accounts tbody td:nth-child(4)").all_text_contents()
    assert sorted(balances) == sorted(shown_money(a["balance"], a["currency"]) for a in accounts)
    assert page.locator("#live").get_attribute("data-last-event-id")  # events came over SSE
    expect(page.locator("#customers button[data-customer='cust-1'] .badge")).to_have_text(
        "all updated"
    )
    refresh_job = next(j for j in jobs if j["kind"] == "bank.refresh")
    expect(page.locator("#jobs tbody tr").first).to_contain_text(refresh_job["id"][-10:])
    expect(page.locator("#jobs tbody tr").first).to_contain_text("succeeded")

    if SCREENSHOT:
        page.screenshot(path=SCREENSHOT, full_page=True)

    page.click("#movements-more")
    expect(page.locator("#movements tbody tr")).to_have_count(min(2 * PAGE, total))
    cells = page.locator("#movements tbody tr td:nth-child(3)")
    shown = cells.evaluate_all("cells => cells.map((c) => c.title)")
    assert shown == [m["description"] for m in every["movements"][: min(2 * PAGE, total)]]

    # The key lives in this tab's sessionStorage only: never in a URL, never in localStorage.
    assert page.evaluate("sessionStorage.getItem('scrapeflow.api-key')") == token
    assert page.evaluate("localStorage.length") == 0
    assert all(token not in r.url for r in seen.requests)
    assert seen.foreign_requests() == []
    assert seen.errors == []

    page.click("#logout")
    expect(page.locator("#login-view")).to_be_visible()
    expect(page.locator("#dashboard-view")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('scrapeflow.api-key')") is None
    assert "cust-1" not in page.content()


def with_the_daily_schedule_on(service: Service) -> None:
    """Restart the service with the default daily run (for the picture: off in every test).
    None is due while the test runs: 04:00 plus its 2 h window is not now where it fires."""
    zone = "America/New_York" if 4 <= datetime.now(UTC).hour < 7 else "UTC"
    stop_service(service.process)
    service.env = {
        **service.env,
        "SCRAPEFLOW_SCHEDULE": "0 4 * * *",
        "SCRAPEFLOW_SCHEDULE_TIMEZONE": zone,
    }
    service.process, service.url = start_service(service.env)


def test_a_wrong_key_shows_the_api_message_and_no_data_and_refusals_are_said(
    browser: Browser, service: Service
) -> None:
    seen = visit(browser, service)
    seen.refusals["/v1/customers"] = (401,)
    page = seen.page
    seen.sign_in("sf_notakey_0000000000000000")

    expect(page.locator("#login-error")).to_have_text(
        "a valid API key is needed: Authorization: Bearer sf_…"
    )
    expect(page.locator("#dashboard-view")).to_be_hidden()
    assert "cust-1" not in page.content()
    assert page.evaluate("sessionStorage.getItem('scrapeflow.api-key')") is None

    # A valid key that may only read: everything readable shows, the rest says, in the API's
    # words, what the key lacks.
    with api_client(service, "read") as client:
        no_refresh = client.post("/v1/customers/cust-2/refresh")
        no_stats = client.get("/v1/stats")
    assert no_refresh.status_code == no_stats.status_code == 403
    seen.refusals.update({"/v1/customers/cust-2/refresh": (403,), "/v1/stats": (403,)})
    seen.sign_in(key(service, "read"))
    expect(page.locator("#customers button")).to_have_count(3)
    page.click("#customers button[data-customer='cust-2']")
    expect(page.locator("#accesses tbody tr")).to_have_count(len(BANKS))
    page.get_by_role("button", name="Update accounts and movements").click()
    expect(page.locator("#customer-panel .note")).to_have_text(no_refresh.json()["detail"])
    expect(page.locator("#stats-panel .note")).to_have_text(no_stats.json()["detail"])
    expect(page.locator("#stats-tiles .tile")).to_have_count(0)
    expect(page.locator("#schedule-state")).to_have_text("disabled")  # read is enough for it
    assert seen.foreign_requests() == []
    assert seen.errors == []


def test_service_and_schedule_panels_show_what_the_api_says(
    browser: Browser, service: Service
) -> None:
    token = key(service, "read", "metrics")
    with api_client(service, "read", "metrics") as client:
        schedule = client.get("/v1/schedule", params={"runs": 1}).json()
        stats = client.get("/v1/stats").json()
    seen = visit(browser, service)
    page = seen.page
    seen.sign_in(token)
    expect(page.locator("#customers button")).to_have_count(3)
    expect(page.locator("#jobs-panel")).to_be_visible()

    assert schedule["enabled"] is False  # the fixture's service: no daily run
    expect(page.locator("#schedule-state")).to_have_text("disabled")
    expect(page.locator("#schedule dd")).to_have_text(
        ["off", f"{schedule['window_minutes']:g} min", "—", "none yet"]
    )
    expect(page.locator("#schedule-panel .note")).to_be_hidden()
    expect(page.locator("#stats-tiles .tile")).to_have_count(8)
    customers = page.locator("#stats-tiles .tile").nth(2).locator(".value")
    expect(customers).to_have_text(str(stats["customers"]))
    expect(page.locator("#stats-panel .note")).to_be_hidden()
    # Polled every 15 s, the schedule is asked for its last run only.
    asked = [urlsplit(r.url) for r in seen.requests if "/v1/schedule" in r.url]
    assert [(u.path, u.query) for u in asked] == [("/v1/schedule", "runs=1")]

    # A key limited to one customer sees only it. The schedule and the numbers cover every
    # customer (such a key cannot even hold the metrics scope): each panel shows what the API
    # answers that key, a refusal in the words of its problem's detail.
    with api_client(service, "read", customer="cust-1") as client:
        limited_schedule = client.get("/v1/schedule", params={"runs": 1})
        limited_stats = client.get("/v1/stats")
    assert limited_stats.status_code == 403, limited_stats.text
    seen.refusals.update({"/v1/schedule": (403,), "/v1/stats": (403,)})
    page.click("#logout")
    expect(page.locator("#login-view")).to_be_visible()
    seen.sign_in(key(service, "read", customer="cust-1"))
    expect(page.locator("#customers button")).to_have_count(1)
    expect(page.locator("#customers button[data-customer='cust-1']")).to_be_visible()
    expect(page.locator("#stats-panel .note")).to_have_text(limited_stats.json()["detail"])
    expect(page.locator("#stats-tiles .tile")).to_have_count(0)
    assert limited_schedule.status_code == 403, limited_schedule.text
    expect(page.locator("#schedule-panel .note")).to_have_text(limited_schedule.json()["detail"])
    expect(page.locator("#schedule dd")).to_have_count(0)
    assert seen.foreign_requests() == []
    assert seen.errors == []


def test_a_customers_name_is_shown_as_text_never_as_markup(
    browser: Browser, service: Service
) -> None:
    name, customer = "<img src=x onerror=alert(1)>", 'cust-4"><svg onload=alert(2)>'
    with api_client(service, "admin") as admin:
        created = admin.post("/v1/customers", json={"id": customer, "name": name})
    assert created.status_code == 201, created.text
    token = key(service, "read")
    seen = visit(browser, service)
    page = seen.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    seen.refusals["/v1/stats"] = (403,)  # a key that only reads
    seen.sign_in(token)

    expect(page.locator("#customers button")).to_have_count(4)
    button = page.locator("#customers button").filter(has_text=name)
    expect(button.locator(".who span").first).to_have_text(name)
    assert button.get_attribute("data-customer") == customer
    button.click()
    expect(page.locator("#customer-name")).to_have_text(name)
    expect(page.locator("#customer-id")).to_have_text(customer)
    # its (empty) status, accounts and movements and its event stream, by the encoded id
    expect(page.locator("#accesses tbody")).to_have_text("This customer has no bank access.")
    expect(page.locator("#accounts tbody")).to_have_text("No accounts yet: update to read them.")
    expect(page.locator("#movements tbody")).to_have_text("No movements yet: update to read them.")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    expect(page.locator("#customer-panel .note")).to_be_hidden()

    injected = page.locator("#dashboard-view img, #dashboard-view svg, [onerror], [onload]")
    assert injected.count() == 0
    assert dialogs == []
    assert not [r.url for r in seen.requests if urlsplit(r.url).path.endswith("/x")]
    assert seen.errors == []


def test_the_live_stream_resumes_with_last_event_id_after_the_service_restarts(
    browser: Browser, service: Service
) -> None:
    token = key(service, "read", "refresh")
    with api_client(service, "read", "refresh") as client:  # some history to resume after
        client.post("/v1/customers/cust-3/refresh")
        deadline = time.monotonic() + 60
        while not client.get("/v1/customers/cust-3/status").json()["all_updated"]:
            assert time.monotonic() < deadline, "cust-3 never updated"
            time.sleep(0.1)
    seen = visit(browser, service)
    page = seen.page
    seen.sign_in(token)
    page.click("#customers button[data-customer='cust-3']")
    live = page.locator("#live")
    expect(live).to_have_attribute("data-state", "live")
    expect(live).to_have_attribute("data-last-event-id", re.compile(r"^\d+$"))

    port = urlsplit(service.url).port
    stop_service(service.process)
    expect(live).to_have_attribute("data-state", "reconnecting", timeout=15_000)
    # Read once the stream is cut: the refresh's last events (its job.succeeded is stored
    # just after the status says all updated) may still have reached the page before.
    last = live.get_attribute("data-last-event-id")
    service.process = restart_on(service, port)
    expect(live).to_have_attribute("data-state", "live", timeout=30_000)

    streams = [r for r in seen.requests if r.url.endswith("/v1/customers/cust-3/events")]
    assert streams[0].headers.get("last-event-id") is None
    assert streams[-1].headers.get("last-event-id") == last
    # and it carries on: the next refresh shows up live, on the resumed stream
    with page.expect_response(re.compile(r"/refresh$")) as answer:
        page.get_by_role("button", name="Update accounts and movements").click()
    job = answer.value.json()
    expect(page.locator("#jobs tbody tr").first).to_contain_text(job["id"][-10:])
    expect(page.locator("#jobs tbody tr").first).to_contain_text("succeeded", timeout=60_000)
    expect(page.locator("#refresh-state")).to_have_text("all updated")
    assert int(live.get_attribute("data-last-event-id") or 0) > int(last or 0)
    assert seen.foreign_requests() == []


def restart_on(service: Service, port: int | None) -> subprocess.Popen[str]:
    """The service again, on the port the page knows (freed a moment ago: retry briefly)."""
    deadline = time.monotonic() + 20
    while True:
        process = subprocess.Popen(
            [sys.executable, "-m", "scrapeflow", "serve", "--port", str(port)],
            env=service.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        if process.stdout.readline().startswith("serving on "):
            return process
        stop_service(process)
        assert time.monotonic() < deadline, "the service did not start again on its port"
        time.sleep(0.5)


# -- the routes ------------------------------------------------------------------------------


def test_the_page_is_served_with_a_strict_policy_and_revalidated(service: Service) -> None:
    with httpx.Client(base_url=service.url) as client:
        page = client.get("/")
        script = client.get("/static/dashboard.js")
        style = client.get("/static/dashboard.css")
        again = client.get(
            "/static/dashboard.js", headers={"If-None-Match": script.headers["etag"]}
        )
        head = client.head("/")
        schema = client.get("/openapi.json").json()

    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-cache"
    # no inline script, nothing from another host
    assert re.findall(r"<script[^>]*>", page.text) == [
        '<script type="module" src="/static/dashboard.js">'
    ]
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)

    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["content-security-policy"] == policy
    assert style.headers["content-type"] == "text/css; charset=utf-8"
    assert again.status_code == 304 and again.content == b""
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(page.content))
    assert "/" not in schema["paths"] and not any(p.startswith("/static") for p in schema["paths"])


def test_every_module_the_page_imports_is_served_and_every_module_is_imported(
    service: Service,
) -> None:
    """The script is ES modules loaded by relative URL: each one the page reaches from
    ``dashboard.js`` is served as JavaScript under the same policy, and none is left over."""
    with httpx.Client(base_url=service.url) as client:
        policy = client.get("/").headers["content-security-policy"]
        reached: set[str] = set()
        waiting = ["dashboard.js"]
        while waiting:
            name = waiting.pop()
            module = client.get(f"/static/{name}")
            assert module.status_code == 200, name
            assert module.headers["content-type"] == "text/javascript; charset=utf-8", name
            assert module.headers["content-security-policy"] == policy, name
            reached.add(name)
            imported = re.findall(r'^import [^;]*? from "([^"]+)";', module.text, re.M | re.S)
            for target in imported:
                assert re.fullmatch(r"\./[a-z]+\.js", target), (name, target)  # this folder
                if target[2:] not in reached:
                    waiting.append(target[2:])
    assert reached == {name for name in load_static() if name.endswith(".js")}


BAD_PATHS = [
    "/static/../_app.py",
    "/static/..%2f_app.py",
    "/static/%2e%2e%2f_app.py",
    "/static/%2e%2e/%2e%2e/config.py",
    "/static/..%5c_app.py",
    "/static/..\\_app.py",
    "/static/%2fetc%2fpasswd",
    "/static//etc/passwd",
    "/static/",
    "/static/.",
    "/static/..",
    "/static/dashboard.js%00.html",
    "/static/__init__.py",
    "/static/../routes/dashboard.py",
    "/static/./api.js",
    "/static/API.js",
]


def test_static_files_are_only_the_dashboards_own(service: Service) -> None:
    where = urlsplit(service.url)
    served: list[str] = []
    for path in BAD_PATHS:
        connection = http.client.HTTPConnection(
            where.hostname or "127.0.0.1", where.port, timeout=10
        )
        try:
            connection.request("GET", path)  # sent as written: no client-side normalising
            answer = connection.getresponse()
            body = answer.read()
        finally:
            connection.close()
        if answer.status != 404 or b"import " in body or b"root:" in body:
            served.append(f"{path} -> {answer.status} {body[:120]!r}")
    assert served == [], "\n".join(served)
