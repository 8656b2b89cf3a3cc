"""The API bank's scraper against the sandbox: what lands in the database equals the bank's truth.

Every test runs the registered scraper once (or twice) through ``harness.scrape_once`` and looks
at what a user sees: the result code and its detail, and the stored accounts and movements
compared with ``/__admin/truth``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from scrapeflow.banking import IncrementalPolicy, ResultCode, migrate
from scrapeflow.banking.scrapers.apibank import ApiBankScraper
from scrapeflow.sandbox import CustomerLogin, Sandbox, SandboxAdmin
from scrapeflow.sandbox.banks import ApiBank
from tests.banking import _harness as harness

BANK = "apibank"


async def _access(sandbox: Sandbox, db_url: str, n: int) -> tuple[int, CustomerLogin]:
    return await harness.bank_access(sandbox, db_url, BANK, n)


async def _scrape_exact(
    sandbox: Sandbox,
    db_url: str,
    n: int,
    *,
    policy: IncrementalPolicy | None = None,
) -> tuple[harness.Scraped, int, int]:
    """Scrape customer ``n`` once, assert success and an exact database.

    Returns the result, the number of movements compared and the access's id."""
    access_id, cred = await _access(sandbox, db_url, n)
    today = await harness.sandbox_today(sandbox, BANK)
    result = await harness.scrape_once(
        sandbox, db_url, BANK, access_id, login=cred["username"], policy=policy
    )
    assert (result.code, result.detail) == (ResultCode.SUCCESS, ""), result.detail
    since = today - timedelta(days=(policy or IncrementalPolicy()).initial_days)
    expected = await harness.truth(sandbox, BANK, cred["username"], since=since)
    accounts, movements = await harness.stored(db_url, access_id)
    compared = harness.assert_exact(accounts, movements, expected, since=since)
    assert result.accounts == len(expected["accounts"]) > 0
    assert result.movements == compared > 0
    return result, compared, access_id


def _bank(sandbox: Sandbox) -> ApiBank:
    """The sandbox's API bank, whose knobs (set from this thread) it reads on every request."""
    site = sandbox.sites[BANK]
    assert isinstance(site, ApiBank)
    return site


@pytest.fixture(autouse=True)
def _bank_knobs_restored(sandbox: Sandbox) -> Iterator[None]:
    """The sandbox is shared by a worker's tests: each test starts from the bank's defaults
    (its own rate limit on) and leaves them as it found them."""
    site = _bank(sandbox)
    knobs = (
        "client_rate_per_second",
        "client_rate_burst",
        "token_ttl_seconds",
        "cursor_ttl_seconds",
    )
    saved = {name: getattr(site, name) for name in knobs}
    for name in knobs:
        setattr(site, name, getattr(ApiBank, name))
    yield
    for name, value in saved.items():
        setattr(site, name, value)


def _no_rate_limit(sandbox: Sandbox) -> None:
    _bank(sandbox).client_rate_per_second = 0


# -- exact against the truth ----------------------------------------------------------------


@pytest.mark.parametrize("customer", [2, 7])
async def test_scrape_is_exact(sandbox: Sandbox, db_url: str, customer: int) -> None:
    await migrate(db_url)
    _no_rate_limit(sandbox)
    result, _, access_id = await _scrape_exact(sandbox, db_url, customer)
    if customer == 7:  # 8 contracts x 4 accounts
        assert result.accounts == 32
    accounts, _ = await harness.stored(db_url, access_id)
    cards = [a for a in accounts if a.type.value == "card"]
    assert all(a.iban is None and a.number for a in cards)
    assert all(a.contract_id is not None for a in accounts)


async def test_rate_limit_is_waited_out(sandbox: Sandbox, sqlite_url: str) -> None:
    # The bank's own limit (10 req/s, bursts of 20) is on: customer 7's 34 requests overflow
    # the burst, the bank answers 429 with Retry-After, and the scrape still ends exact.
    started = time.monotonic()
    await _scrape_exact(sandbox, sqlite_url, 7)
    assert time.monotonic() - started >= 1.0  # a Retry-After (1 s at least) was waited out


# -- pagination ----------------------------------------------------------------------------


async def test_cursor_pages_are_followed(sandbox: Sandbox, sqlite_url: str) -> None:
    # 110 days of customer 4: every account has more than one page of 100 transactions.
    _no_rate_limit(sandbox)
    cred = await harness.credentials(sandbox, BANK, 4)
    today = await harness.sandbox_today(sandbox, BANK)
    expected = await harness.truth(sandbox, BANK, cred["username"], since=today - timedelta(110))
    assert all(len(rows) > 100 for rows in expected["movements"].values())
    _, compared, _ = await _scrape_exact(
        sandbox, sqlite_url, 4, policy=IncrementalPolicy(initial_days=110)
    )
    assert compared > 5 * 100


async def test_refused_cursor_restarts_the_listing(
    sandbox: Sandbox, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first cursors are born expired (400 invalid_cursor); the scraper lists those accounts
    # again from dateFrom, gets good cursors this time, and ends exact.
    _no_rate_limit(sandbox)
    site = _bank(sandbox)
    site.cursor_ttl_seconds = -1.0
    refused = 0
    api = ApiBankScraper._api

    async def watched(self: ApiBankScraper, path: str, **kwargs: Any) -> dict[str, Any]:
        nonlocal refused
        body: dict[str, Any] = await api(self, path, **kwargs)
        if body.get("error") == "invalid_cursor":
            refused += 1
            site.cursor_ttl_seconds = 900.0
        return body

    monkeypatch.setattr(ApiBankScraper, "_api", watched)
    await _scrape_exact(sandbox, sqlite_url, 4, policy=IncrementalPolicy(initial_days=110))
    assert refused >= 1


async def test_cursor_always_refused_is_a_site_change(sandbox: Sandbox, sqlite_url: str) -> None:
    _no_rate_limit(sandbox)
    _bank(sandbox).cursor_ttl_seconds = -1.0
    access_id, cred = await _access(sandbox, sqlite_url, 4)
    result = await harness.scrape_once(
        sandbox,
        sqlite_url,
        BANK,
        access_id,
        login=cred["username"],
        policy=IncrementalPolicy(initial_days=110),
    )
    assert result.code == ResultCode.SITE_CHANGED
    assert "cursor" in result.detail
    assert result.accounts == 5  # balances landed before the movements failed


# -- refusals ------------------------------------------------------------------------------


async def test_wrong_password(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 3)
    wrong = cred["password"][::-1] + "x"
    result = await harness.scrape_once(
        sandbox, sqlite_url, BANK, access_id, login=cred["username"], password=wrong
    )
    assert result.code == ResultCode.WRONG_CREDENTIALS
    assert result.detail == "Credenciales incorrectas"
    assert wrong not in result.detail and cred["password"] not in result.detail
    assert (result.accounts, result.movements) == (0, 0)


async def test_locked_user(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 13)
    assert cred["locked"]
    result = await harness.scrape_once(sandbox, sqlite_url, BANK, access_id, login=cred["username"])
    assert result.code == ResultCode.USER_LOCKED
    assert "bloqueado" in result.detail
    assert cred["password"] not in result.detail


async def test_layout_2_is_a_site_change(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, layout=2)
    result = await harness.scrape_once(sandbox, sqlite_url, BANK, access_id, login=cred["username"])
    assert result.code == ResultCode.SITE_CHANGED
    assert "accounts" in result.detail
    assert (result.accounts, result.movements) == (0, 0)


async def test_maintenance(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, maintenance_rate=1.0)
    result = await harness.scrape_once(sandbox, sqlite_url, BANK, access_id, login=cred["username"])
    assert result.code == ResultCode.BANK_UNAVAILABLE
    assert "503" in result.detail


# -- sessions ------------------------------------------------------------------------------


async def test_token_expiring_mid_scrape(
    sandbox: Sandbox, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first token lives 1 s. With the bank's rate limit on, customer 7's 34 requests
    # cannot all be sent within that second (20 at once, then 10 a second), so the requests
    # sent after it carry an expired token: 401 token_expired, log in again, go on.
    # Later tokens live long, so the test does not depend on how fast the machine is.
    site = _bank(sandbox)
    site.token_ttl_seconds = 1.0
    logins = 0
    login = ApiBankScraper.login

    async def counted(self: ApiBankScraper) -> None:
        nonlocal logins
        logins += 1
        await login(self)
        site.token_ttl_seconds = 300.0

    monkeypatch.setattr(ApiBankScraper, "login", counted)
    await _scrape_exact(sandbox, sqlite_url, 7)
    assert logins >= 2


# -- incremental ---------------------------------------------------------------------------


async def test_incremental_second_run(sandbox: Sandbox, sqlite_url: str) -> None:
    _no_rate_limit(sandbox)
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    username = cred["username"]
    first_today = await harness.sandbox_today(sandbox, BANK)
    first_since = first_today - timedelta(days=IncrementalPolicy().initial_days)

    first = await harness.scrape_once(sandbox, sqlite_url, BANK, access_id, login=username)
    assert first.code == ResultCode.SUCCESS
    _, before = await harness.stored(sqlite_url, access_id)
    pending_before = {m.movement_key for rows in before.values() for m in rows if m.pending}
    assert pending_before

    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.advance(timedelta(days=3))
    second = await harness.scrape_once(sandbox, sqlite_url, BANK, access_id, login=username)
    assert second.code == ResultCode.SUCCESS

    expected = await harness.truth(sandbox, BANK, username, since=first_since)
    accounts, after = await harness.stored(sqlite_url, access_id)
    compared = harness.assert_exact(accounts, after, expected, since=first_since)
    # no duplicates: one row per reference, exactly the truth's since the first run's start
    keys = [m.movement_key for rows in after.values() for m in rows]
    assert len(keys) == len(set(keys)) == compared
    # movements pending at the first run were booked in place (same key, now not pending)
    posted = {m.movement_key for rows in after.values() for m in rows if not m.pending}
    assert pending_before & posted
    first_seen = {m.movement_key: m.first_seen for rows in before.values() for m in rows}
    for rows in after.values():
        for m in rows:
            if m.movement_key in first_seen:
                assert m.first_seen == first_seen[m.movement_key]
