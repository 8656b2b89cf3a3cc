"""The legacy bank's scraper against the sandbox: what a user of the service ends up seeing.

Results, details and the stored accounts and movements, compared with the bank's ground truth;
the SMS-code flow across runs (a pending session, the trusted device, its expiry).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from scrapeflow.banking import IncrementalPolicy, ResultCode, migrate
from scrapeflow.sandbox import CustomerLogin, Sandbox, SandboxAdmin
from tests.banking import _harness as harness

BANK = "legacybank"


async def _access(sandbox: Sandbox, db_url: str, n: int) -> tuple[int, CustomerLogin]:
    return await harness.bank_access(sandbox, db_url, BANK, n)


async def _scrape(
    sandbox: Sandbox, db_url: str, access_id: int, cred: CustomerLogin, **kwargs: Any
) -> harness.Scraped:
    return await harness.scrape_once(
        sandbox, db_url, BANK, access_id, login=cred["username"], **kwargs
    )


async def _otp(sandbox: Sandbox, cred: CustomerLogin) -> str:
    """The code the bank "sent by SMS" to the customer."""
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        return await admin.otp(BANK, cred["username"])


async def _assert_matches_truth(
    sandbox: Sandbox, db_url: str, access_id: int, username: str, days: int
) -> int:
    since = await harness.sandbox_today(sandbox, BANK) - timedelta(days=days)
    expected = await harness.truth(sandbox, BANK, username, since=since)
    accounts, movements = await harness.stored(db_url, access_id)
    return harness.assert_exact(accounts, movements, expected, since=since)


# -- exact scrapes --------------------------------------------------------------------------------


async def test_scrape_matches_truth(sandbox: Sandbox, db_url: str) -> None:
    await migrate(db_url)
    for n in (1, 7):  # no two-factor; 7 has 8 contracts of 4 accounts
        access_id, cred = await _access(sandbox, db_url, n)
        result = await _scrape(sandbox, db_url, access_id, cred)
        assert (result.code, result.detail) == (ResultCode.SUCCESS, "")
        assert result.accounts > 0 and result.movements > 0
        compared = await _assert_matches_truth(sandbox, db_url, access_id, cred["username"], 14)
        assert compared == result.movements > 0


async def test_long_window_reads_every_page(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 3)
    policy = IncrementalPolicy(initial_days=60)
    result = await _scrape(sandbox, sqlite_url, access_id, cred, policy=policy)
    assert (result.code, result.detail) == (ResultCode.SUCCESS, "")
    since = await harness.sandbox_today(sandbox, BANK) - timedelta(days=60)
    expected = await harness.truth(sandbox, BANK, cred["username"], since=since)
    assert max(len(rows) for rows in expected["movements"].values()) > 25  # several pages
    accounts, movements = await harness.stored(sqlite_url, access_id)
    compared = harness.assert_exact(accounts, movements, expected, since=since)
    assert compared == result.movements


async def test_a_description_is_stored_as_the_bank_wrote_it(
    sandbox: Sandbox, sqlite_url: str
) -> None:
    """A pending card payment reads "PAGO PENDIENTE " and the merchant's first 12 letters,
    which may end in a space: stored with it (it was stripped, and 4 movements in every run
    differed from the bank's)."""
    today = await harness.sandbox_today(sandbox, BANK)
    for n in (n for n in range(1, 400) if n % 4 != 2 and n % 97 != 13):
        cred = await harness.credentials(sandbox, BANK, n)
        expected = await harness.truth(sandbox, BANK, cred["username"], since=today)
        spaced = [
            w["description"]
            for rows in expected["movements"].values()
            for w in rows
            if w["description"].endswith(" ")
        ]
        if spaced:
            break
    else:
        raise AssertionError("no customer of the sandbox has such a description")
    access_id, cred = await _access(sandbox, sqlite_url, n)
    result = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert (result.code, result.detail) == (ResultCode.SUCCESS, "")
    accounts, movements = await harness.stored(sqlite_url, access_id)
    stored = {m.description for rows in movements.values() for m in rows}
    assert set(spaced) <= stored
    harness.assert_exact(accounts, movements, expected, since=today)


# -- two-factor ---------------------------------------------------------------------------------


async def test_one_time_code_then_trusted_device(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 2)
    assert cred["otp_required"]
    first = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert first.code == ResultCode.TWO_FACTOR_REQUIRED
    assert "SMS" in first.detail
    assert first.state.get("pending") and cred["password"] not in str(first.state)
    assert first.accounts == 0

    code = await _otp(sandbox, cred)
    second = await _scrape(sandbox, sqlite_url, access_id, cred, otp=code, state=first.state)
    assert (second.code, second.detail) == (ResultCode.SUCCESS, "")
    await _assert_matches_truth(sandbox, sqlite_url, access_id, cred["username"], 14)
    assert "pending" not in second.state
    assert second.state["cookies"]["DISPOSITIVO"]
    assert cred["password"] not in str(second.state)

    third = await _scrape(sandbox, sqlite_url, access_id, cred, state=second.state)
    assert (third.code, third.detail) == (ResultCode.SUCCESS, "")  # the trusted device

    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.advance(timedelta(days=91))
    expired = await _scrape(sandbox, sqlite_url, access_id, cred, state=third.state)
    assert expired.code == ResultCode.TWO_FACTOR_REQUIRED
    assert expired.state.get("pending")


async def test_a_typed_code_is_never_lost_while_the_bank_is_down_for_moments(
    sandbox: Sandbox, sqlite_url: str
) -> None:
    """At 15% maintenance (any request may get the bank's 503), 40 people type the code the
    bank sent them, once: every code is accepted (the device is trusted from then on), none
    is asked for another. Before, a 503 on sending the code started the login over, and the
    bank sent a new code (2 in 95 at 1% maintenance, 4 in 40 at 15%)."""
    numbers = [n for n in range(2, 1000, 4) if n % 97 != 13][:40]  # n % 4 == 2: a code is asked
    waiting: dict[int, tuple[int, CustomerLogin, harness.Scraped]] = {}

    async def ask(n: int) -> None:
        access_id, cred = await _access(sandbox, sqlite_url, n)
        first = await _scrape(sandbox, sqlite_url, access_id, cred)
        assert first.code == ResultCode.TWO_FACTOR_REQUIRED and first.state.get("pending")
        waiting[n] = (access_id, cred, first)

    async def type_code(n: int) -> harness.Scraped:
        access_id, cred, first = waiting[n]
        code = await _otp(sandbox, cred)
        return await _scrape(sandbox, sqlite_url, access_id, cred, otp=code, state=first.state)

    for start in range(0, len(numbers), 10):
        await asyncio.gather(*(ask(n) for n in numbers[start : start + 10]))
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, maintenance_rate=0.15)
    results: list[harness.Scraped] = []
    for start in range(0, len(numbers), 10):
        results += await asyncio.gather(*(type_code(n) for n in numbers[start : start + 10]))
    asked_again = [r.detail for r in results if r.code == ResultCode.TWO_FACTOR_REQUIRED]
    assert asked_again == []
    # Accepted: the bank trusts the device (what came after the code may still have met the
    # maintenance page, which the next refresh reads past without a code).
    assert all(r.state.get("cookies", {}).get("DISPOSITIVO") for r in results)
    assert sum(r.code == ResultCode.SUCCESS for r in results) >= 30


async def test_wrong_code(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 6)
    first = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert first.code == ResultCode.TWO_FACTOR_REQUIRED
    code = await _otp(sandbox, cred)
    wrong = "000000" if code != "000000" else "111111"
    refused = await _scrape(sandbox, sqlite_url, access_id, cred, otp=wrong, state=first.state)
    assert refused.code == ResultCode.TWO_FACTOR_REQUIRED
    assert "Código incorrecto" in refused.detail
    assert refused.state["pending"] == first.state["pending"]  # the same login still waits
    # the customer sends the right code this time: the same pending login accepts it
    right = await _scrape(sandbox, sqlite_url, access_id, cred, otp=code, state=refused.state)
    assert (right.code, right.detail) == (ResultCode.SUCCESS, "")


async def test_third_wrong_code_starts_a_new_login(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 14)
    result = await _scrape(sandbox, sqlite_url, access_id, cred)
    first_pending = result.state["pending"]
    for _ in range(3):
        result = await _scrape(sandbox, sqlite_url, access_id, cred, otp="x", state=result.state)
        assert result.code == ResultCode.TWO_FACTOR_REQUIRED
    assert "Ha superado" in result.detail  # the bank's words; a new code was sent
    assert result.state["pending"] != first_pending
    code = await _otp(sandbox, cred)
    done = await _scrape(sandbox, sqlite_url, access_id, cred, otp=code, state=result.state)
    assert (done.code, done.detail) == (ResultCode.SUCCESS, "")


async def test_code_for_a_session_that_is_gone(sandbox: Sandbox, sqlite_url: str) -> None:
    """A stale pending session: a fresh login asks for a new code; the old one is not spent
    on it (it would count as a wrong attempt), and the new code then works."""
    access_id, cred = await _access(sandbox, sqlite_url, 10)
    state = {"pending": {"JSESSIONID": "gone"}}
    result = await _scrape(sandbox, sqlite_url, access_id, cred, otp="123456", state=state)
    assert result.code == ResultCode.TWO_FACTOR_REQUIRED
    assert "new code" in result.detail
    assert result.state["pending"]["JSESSIONID"] != "gone"
    code = await _otp(sandbox, cred)
    resumed = await _scrape(sandbox, sqlite_url, access_id, cred, otp=code, state=result.state)
    assert resumed.code == ResultCode.SUCCESS, resumed.detail


# -- refusals -------------------------------------------------------------------------------------


async def test_wrong_password_and_locked_user(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 1)
    bad = cred["password"][::-1] + "x"
    result = await _scrape(sandbox, sqlite_url, access_id, cred, password=bad)
    assert result.code == ResultCode.WRONG_CREDENTIALS
    assert result.detail == "Usuario o contraseña incorrectos"
    assert bad not in result.detail and cred["password"] not in result.detail

    locked_id, locked = await _access(sandbox, sqlite_url, 13)
    assert locked["locked"]
    result = await _scrape(sandbox, sqlite_url, locked_id, locked)
    assert result.code == ResultCode.USER_LOCKED
    assert "bloqueado" in result.detail


async def test_layout_2_is_a_site_change(sandbox: Sandbox, sqlite_url: str) -> None:
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, layout=2)
    access_id, cred = await _access(sandbox, sqlite_url, 1)
    result = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert result.code == ResultCode.SITE_CHANGED
    assert result.accounts == 0


async def test_maintenance_is_bank_unavailable(sandbox: Sandbox, sqlite_url: str) -> None:
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, maintenance_rate=1.0)
    access_id, cred = await _access(sandbox, sqlite_url, 1)
    result = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert result.code == ResultCode.BANK_UNAVAILABLE
    assert "503" in result.detail


# -- sessions and increments ----------------------------------------------------------------------


async def test_session_expiry_mid_scrape(
    sandbox: Sandbox, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.update_bank_settings(BANK, session_max_requests=5)
    access_id, cred = await _access(sandbox, sqlite_url, 5)  # 5 accounts: more than a session
    result = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert (result.code, result.detail) == (ResultCode.SUCCESS, "")
    assert any("session expired" in record.getMessage() for record in caplog.records)
    compared = await _assert_matches_truth(sandbox, sqlite_url, access_id, cred["username"], 14)
    assert compared == result.movements > 0


async def test_incremental_scrape(sandbox: Sandbox, sqlite_url: str) -> None:
    access_id, cred = await _access(sandbox, sqlite_url, 3)
    start = await harness.sandbox_today(sandbox, BANK) - timedelta(days=14)
    first = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert first.code == ResultCode.SUCCESS, first.detail
    _, before = await harness.stored(sqlite_url, access_id)
    pending_before = {m.movement_key for rows in before.values() for m in rows if m.pending}
    assert pending_before  # something to see posted

    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        await admin.advance(timedelta(days=3))
    second = await _scrape(sandbox, sqlite_url, access_id, cred)
    assert second.code == ResultCode.SUCCESS, second.detail

    expected = await harness.truth(sandbox, BANK, cred["username"], since=start)
    accounts, movements = await harness.stored(sqlite_url, access_id)
    harness.assert_exact(accounts, movements, expected, since=start)
    keys = [m.movement_key for rows in movements.values() for m in rows]
    assert len(keys) == len(set(keys))
    posted = {m.movement_key for rows in movements.values() for m in rows if not m.pending}
    assert pending_before & posted  # pending movements were updated in place once booked
