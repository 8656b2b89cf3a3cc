"""The neobank's scraper against the sandbox: a push approved, rejected or left unanswered, the
refresh token of daily runs, consent that expires with the clock, ETags, and card
authorisations that post with another amount (modified in sync) or are released (removed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yarl

from scrapeflow.banking import (
    Launcher,
    Outcome,
    ResultCode,
    add_access,
    add_customer,
    migrate,
    movement_changes,
    movement_key,
    outcome_of,
)
from scrapeflow.db import create_engine, session_factory
from scrapeflow.http import Exchange
from scrapeflow.sandbox import Sandbox, SandboxAdmin
from scrapeflow.sandbox._world import Movement, World
from tests.banking import _harness as harness

BANK = "neobank"


@pytest.fixture
async def admin(sandbox: Sandbox) -> AsyncIterator[SandboxAdmin]:
    async with SandboxAdmin.from_sandbox(sandbox) as client:
        yield client


async def _access(sandbox: Sandbox, db_url: str, n: int) -> tuple[int, str]:
    """Customer ``n``'s access at the neobank; (access id, login)."""
    access_id, cred = await harness.bank_access(sandbox, db_url, BANK, n)
    return access_id, cred["username"]


async def _scrape(
    sandbox: Sandbox,
    db_url: str,
    access: tuple[int, str],
    *,
    state: dict | None = None,
    seen: list | None = None,
) -> harness.Scraped:
    """The access scraped once, as the launcher would; ``seen`` collects every exchange."""
    access_id, login = access
    async with harness.fast_http() as http:
        if seen is not None:
            http.observers.append(seen.append)
        return await harness.scrape_once(
            sandbox, db_url, BANK, access_id, login=login, state=state, http=http
        )


async def _exact(sandbox: Sandbox, db_url: str, access_id: int, username: str) -> int:
    since = sandbox.clock.now().date() - timedelta(days=14)
    accounts, movements = await harness.stored(db_url, access_id)
    expected = await harness.truth(sandbox, BANK, username, since=since)
    return harness.assert_exact(accounts, movements, expected, since=since)


def _paths(exchanges: list[Exchange]) -> list[tuple[str, int]]:
    return [(yarl.URL(e.url).path, e.response.status) for e in exchanges]


async def test_a_push_then_daily_runs_on_the_refresh_token_with_etags(
    sandbox: Sandbox, sqlite_url: str, admin: SandboxAdmin
) -> None:
    seen: list[Exchange] = []
    access_id, username = access = await _access(sandbox, sqlite_url, 3)
    first = await _scrape(sandbox, sqlite_url, access, seen=seen)
    assert (first.code, first.detail) == (ResultCode.SUCCESS, "")
    assert await _exact(sandbox, sqlite_url, access_id, username) > 0
    paths = [p for p, _ in _paths(seen)]
    assert "/auth/approve/status" in paths and paths.index("/oauth/authorize") == 0
    assert set(first.state) >= {"refresh_token", "consent_expires_at", "etags"}

    # The next run is a scheduled one: nobody would approve a push, so none may be needed.
    await admin.approval_settings(approve_after_seconds=-1, ttl_seconds=2)
    seen.clear()
    second = await _scrape(sandbox, sqlite_url, access, state=first.state, seen=seen)
    assert (second.code, second.detail) == (ResultCode.SUCCESS, "")
    statuses = dict(_paths(seen))
    assert "/oauth/authorize" not in statuses and statuses["/oauth/token"] == 200
    # Nothing changed at the bank: the listings it already sent answer 304 and are reused.
    assert [statuses[p] for p in ("/v1/me", "/v1/accounts", "/v1/cards")] == [304] * 3
    assert second.accounts == first.accounts
    assert await _exact(sandbox, sqlite_url, access_id, username) > 0


async def _approval_for(admin: SandboxAdmin, username: str) -> None:
    for _ in range(200):
        if any(a["username"] == username for a in await admin.approvals()):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no push was sent for {username}")


@pytest.mark.parametrize("approve", [True, False])
async def test_the_customer_approves_or_rejects_the_push(
    sandbox: Sandbox, sqlite_url: str, admin: SandboxAdmin, approve: bool
) -> None:
    await admin.approval_settings(approve_after_seconds=-1, ttl_seconds=60)
    access_id, username = access = await _access(sandbox, sqlite_url, 4)
    scrape = asyncio.create_task(_scrape(sandbox, sqlite_url, access))
    await _approval_for(admin, username)
    assert not scrape.done()  # it waits for the customer, polling
    assert await admin.decide(username, approve=approve) == ("approved" if approve else "rejected")
    result = await asyncio.wait_for(scrape, timeout=30)
    if approve:
        assert (result.code, result.detail) == (ResultCode.SUCCESS, "")
        assert await _exact(sandbox, sqlite_url, access_id, username) > 0
    else:
        assert result.code is ResultCode.NOT_APPROVED
        assert result.detail == "the customer rejected the login in the app"
        assert "refresh_token" not in result.state and result.accounts == 0
        assert outcome_of([result.code]) is Outcome.NEEDS_ACTION


async def test_a_push_nobody_answers_ends_not_approved_when_the_bank_lets_it_expire(
    sandbox: Sandbox, sqlite_url: str, admin: SandboxAdmin
) -> None:
    await admin.approval_settings(approve_after_seconds=-1, ttl_seconds=1.5)
    result = await _scrape(sandbox, sqlite_url, await _access(sandbox, sqlite_url, 5))
    assert (result.code, result.detail) == (
        ResultCode.NOT_APPROVED,
        "nobody approved the login in the app in time",
    )
    assert await admin.approvals() == []


async def test_wrong_password_and_locked_user(sandbox: Sandbox, sqlite_url: str) -> None:
    cred = await harness.credentials(sandbox, BANK, 6)
    access_id = await harness.add_access(sqlite_url, BANK, 6, cred["username"], "not-it")
    wrong = await harness.scrape_once(sandbox, sqlite_url, BANK, access_id, login=cred["username"])
    assert (wrong.code, wrong.detail) == (
        ResultCode.WRONG_CREDENTIALS,
        "Wrong username or password.",
    )
    locked_n = next(n for n in range(1, 200) if n % 97 == 13)
    locked = await _scrape(sandbox, sqlite_url, await _access(sandbox, sqlite_url, locked_n))
    assert locked.code is ResultCode.USER_LOCKED


async def test_consent_expires_after_90_days_then_the_next_refresh_asks_again(
    sandbox: Sandbox, sqlite_url: str, tmp_path: Path
) -> None:
    await migrate(sqlite_url)
    engine = create_engine(sqlite_url)
    sessions = session_factory(engine)
    cred = await harness.credentials(sandbox, BANK, 8)
    try:
        await add_customer(sessions, "cust-8", "Customer 8")
        await add_access(
            sessions, harness.VAULT, "cust-8", BANK, cred["username"], cred["password"]
        )
    finally:
        await engine.dispose()
    launcher = Launcher(
        sqlite_url,
        vault=harness.VAULT,
        bank_urls=sandbox.urls,
        today=lambda: sandbox.clock.now().date(),
        log_dir=tmp_path / "logs",
    )
    async with launcher:
        assert (await launcher.refresh("cust-8")).outcome is Outcome.SUCCEEDED
        sandbox.clock.advance(timedelta(days=89))
        assert (await launcher.refresh("cust-8")).outcome is Outcome.SUCCEEDED  # still given
        sandbox.clock.advance(timedelta(days=1, minutes=1))
        expired = await launcher.refresh("cust-8")
        assert expired.outcome is Outcome.NEEDS_ACTION
        [access] = expired.accesses
        assert access.code is ResultCode.CONSENT_EXPIRED
        assert "consent expired" in access.detail
        # The customer refreshes from the app: a push, approved, and a new consent.
        again = await launcher.refresh("cust-8")
        assert again.outcome is Outcome.SUCCEEDED, again


def _pending_fates(world: World, now: datetime) -> tuple[int, Movement, Movement, Movement]:
    """A customer with a pending card purchase that posts for another amount within four days
    and one that is released; (customer, pending, the same once posted, the released one)."""
    later = now + timedelta(days=4)
    for n in range(1, world.customers + 1):
        if n % 97 == 13:
            continue
        for account in world.accounts(BANK, n):
            after = {m.ref: m for m in world.movements(account, later)}
            pending = [m for m in world.movements(account, now) if m.pending]
            changed = [m for m in pending if m.ref in after and after[m.ref].amount != m.amount]
            released = [m for m in pending if m.ref not in after]
            if changed and released:
                return n, changed[0], after[changed[0].ref], released[0]
    raise AssertionError("no customer has both fates")


async def test_a_card_authorisation_posting_for_more_is_modified_a_released_one_removed(
    sandbox: Sandbox, sqlite_url: str
) -> None:
    n, authorised, posted, released = _pending_fates(sandbox.state.world, sandbox.clock.now())
    assert posted.amount != authorised.amount and not posted.pending
    access_id, username = access = await _access(sandbox, sqlite_url, n)
    first = await _scrape(sandbox, sqlite_url, access)
    assert first.code is ResultCode.SUCCESS, first.detail
    engine = create_engine(sqlite_url)
    sessions = session_factory(engine)
    try:
        start = await movement_changes(sessions, f"cust-{n}")
        added = {m.key: m for m in start.added}
        assert added[movement_key(reference=authorised.ref)].amount == authorised.amount
        assert movement_key(reference=released.ref) in added

        sandbox.clock.advance(timedelta(days=4))
        second = await _scrape(sandbox, sqlite_url, access, state=first.state)
        assert second.code is ResultCode.SUCCESS, second.detail
        assert await _exact(sandbox, sqlite_url, access_id, username) > 0
        changes = await movement_changes(sessions, f"cust-{n}", cursor=start.next_cursor)
    finally:
        await engine.dispose()
    modified = [m for m in changes.modified if m.key == movement_key(reference=authorised.ref)]
    assert [(m.amount, m.pending, m.description) for m in modified] == [
        (posted.amount, False, posted.description)
    ]
    assert movement_key(reference=authorised.ref) not in {m.key for m in changes.added}
    assert movement_key(reference=released.ref) in {r.key for r in changes.removed}
