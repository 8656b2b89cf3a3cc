"""The form bank's scraper against the sandbox: what lands in the database equals the truth."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scrapeflow.banking import ResultCode, migrate
from scrapeflow.http import HostPolicy, HttpClient, HttpConfig, RetryPolicy
from scrapeflow.sandbox import CustomerLogin, Sandbox, SandboxAdmin
from tests.banking import _harness as harness

BANK = "formbank"


async def _access(sandbox: Sandbox, db_url: str, n: int) -> tuple[int, CustomerLogin]:
    return await harness.bank_access(sandbox, db_url, BANK, n)


async def _scrape(
    sandbox: Sandbox, db_url: str, access_id: int, cred: CustomerLogin, **kwargs: Any
) -> harness.Scraped:
    return await harness.scrape_once(
        sandbox, db_url, BANK, access_id, login=cred["username"], **kwargs
    )


async def _assert_matches_truth(
    sandbox: Sandbox, db_url: str, access_id: int, username: str, since_days: int = 14
) -> int:
    since = await harness.sandbox_today(sandbox) - timedelta(days=since_days)
    accounts, movements = await harness.stored(db_url, access_id)
    expected = await harness.truth(sandbox, BANK, username, since=since)
    compared = harness.assert_exact(accounts, movements, expected, since=since)
    assert accounts and compared > 0
    return compared


@pytest.mark.parametrize("n", [2, 7])
async def test_scrape_equals_the_ground_truth(sandbox: Sandbox, db_url: str, n: int) -> None:
    await migrate(db_url)
    access_id, cred = await _access(sandbox, db_url, n)

    result = await _scrape(sandbox, db_url, access_id, cred)

    assert (result.code, result.detail) == (ResultCode.SUCCESS, "")
    compared = await _assert_matches_truth(sandbox, db_url, access_id, cred["username"])
    assert result.movements == compared
    assert result.accounts == len(
        (await harness.truth(sandbox, BANK, cred["username"]))["accounts"]
    )


async def test_wrong_password_gives_the_banks_message(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    wrong = cred["password"][::-1] + "x"

    result = await _scrape(sandbox, sqlite_url, access_id, cred, password=wrong)

    assert result.code == ResultCode.WRONG_CREDENTIALS
    assert result.detail == "Usuario o clave incorrectos."
    assert wrong not in result.detail and cred["password"] not in result.detail
    assert (result.accounts, result.movements) == (0, 0)


async def test_locked_user(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 13)

    result = await _scrape(sandbox, sqlite_url, access_id, cred)

    assert result.code == ResultCode.USER_LOCKED
    assert "bloqueado" in result.detail
    assert cred["password"] not in result.detail


async def test_layout_2_is_a_site_change(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, layout=2)

    result = await _scrape(sandbox, sqlite_url, access_id, cred)

    assert result.code == ResultCode.SITE_CHANGED
    assert "contratos" in result.detail
    assert (result.accounts, result.movements) == (0, 0)


async def test_maintenance_is_bank_unavailable(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, maintenance_rate=1.0)

    # The client's adaptive slowdown on 503s would only make the test slow.
    http = HttpClient(
        HttpConfig(
            timeout=10,
            host=HostPolicy(adaptive=False),
            retry=RetryPolicy(attempts=3, backoff=0.05, backoff_max=0.2),
        )
    )
    async with http:
        result = await _scrape(sandbox, sqlite_url, access_id, cred, http=http)

    assert result.code == ResultCode.BANK_UNAVAILABLE
    assert "503" in result.detail


async def test_sessions_ending_mid_scrape_are_renewed(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, session_max_requests=4)

    result = await _scrape(sandbox, sqlite_url, access_id, cred)

    assert (result.code, result.detail) == (ResultCode.SUCCESS, "")
    compared = await _assert_matches_truth(sandbox, sqlite_url, access_id, cred["username"])
    assert result.movements == compared


async def test_incremental_scrape_posts_pending_movements(sandbox: Sandbox, db_url: str) -> None:
    await migrate(db_url)
    access_id, cred = await _access(sandbox, db_url, 2)
    first = await _scrape(sandbox, db_url, access_id, cred)
    assert first.code == ResultCode.SUCCESS
    _, before = await harness.stored(db_url, access_id)
    pending = {(ref, m.movement_key) for ref, rows in before.items() for m in rows if m.pending}
    assert pending, "the sandbox should have pending movements at its epoch"

    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.advance(timedelta(days=3))
    second = await _scrape(sandbox, db_url, access_id, cred)

    assert (second.code, second.detail) == (ResultCode.SUCCESS, "")
    # since = the first run's date_from, 17 days before the new "today"
    compared = await _assert_matches_truth(
        sandbox, db_url, access_id, cred["username"], since_days=17
    )
    assert 0 < second.movements <= compared  # only the incremental window was read again
    _, after = await harness.stored(db_url, access_id)
    assert sum(len(rows) for rows in after.values()) == compared  # no duplicates, nothing extra
    posted = {(ref, m.movement_key) for ref, rows in after.items() for m in rows if not m.pending}
    assert pending & posted, "a movement pending at the first run should have posted since"
