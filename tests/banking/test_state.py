"""Scrape state on SQLite and PostgreSQL: a claim is granted once, a finished access keeps its
result, a sealed session state survives (or is left alone when unreadable), and the watchdog
frees only what stopped beating."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking import (
    Access,
    CredentialVault,
    Customer,
    ResultCode,
    ScrapeState,
    reset_stuck,
)
from scrapeflow.banking._state import (
    UNCHANGED,
    ClaimedAccess,
    claim_access,
    claim_accesses,
    claim_customer,
    finish_access,
    finish_customer,
    read_session_state,
    seal_session_state,
    stamp_heartbeats,
)
from scrapeflow.db import session_factory
from scrapeflow.errors import InputError, RefreshInProgress

T = TypeVar("T")


@pytest.fixture
def sessions(session: AsyncSession) -> async_sessionmaker[AsyncSession]:
    return session_factory(session.bind)


async def _run(
    sessions: async_sessionmaker[AsyncSession], step: Callable[[AsyncSession], Awaitable[T]]
) -> T:
    """One transaction, as the launcher runs each step through its write queue."""
    async with sessions() as session, session.begin():
        return await step(session)


async def _stored(sessions: async_sessionmaker[AsyncSession], model: type, row_id: int):
    async with sessions() as session:
        return await session.get(model, row_id)


async def _claim(sessions: async_sessionmaker[AsyncSession], access_id: int) -> ClaimedAccess:
    claimed = await _run(sessions, lambda s: claim_access(s, access_id))
    assert claimed is not None, f"access {access_id} was refused"
    return claimed


async def _customer_of(sessions: async_sessionmaker[AsyncSession], access_id: int) -> int:
    return (await _stored(sessions, Access, access_id)).customer_id


async def _add_access(sessions, customer_id: int, like: int, login: str) -> int:
    template = await _stored(sessions, Access, like)
    async with sessions() as session, session.begin():
        access = Access(
            customer_id=customer_id, entity_id=template.entity_id, login=login, secret=b"tok"
        )
        session.add(access)
        await session.flush()
        return access.id


async def test_a_customer_is_claimed_once_until_its_refresh_finishes(
    sessions: async_sessionmaker[AsyncSession], access_id: int
) -> None:
    customer_id = await _customer_of(sessions, access_id)

    await _run(sessions, lambda s: claim_customer(s, customer_id))
    with pytest.raises(RefreshInProgress, match="'c-1' is already being refreshed"):
        await _run(sessions, lambda s: claim_customer(s, customer_id))

    await _run(sessions, lambda s: finish_customer(s, customer_id))
    done = await _stored(sessions, Customer, customer_id)
    assert done.scrape_state is ScrapeState.ALL_UPDATED
    assert done.scrape_finished_at is not None

    await _run(sessions, lambda s: claim_customer(s, customer_id))  # the next refresh
    again = await _stored(sessions, Customer, customer_id)
    assert (again.scrape_state, again.scrape_finished_at) == (ScrapeState.IN_PROGRESS, None)

    with pytest.raises(InputError, match="no customer with id 999999"):
        await _run(sessions, lambda s: claim_customer(s, 999_999))


async def test_of_two_racing_claims_of_a_customer_exactly_one_wins(
    sessions: async_sessionmaker[AsyncSession], access_id: int
) -> None:
    customer_id = await _customer_of(sessions, access_id)
    async with sessions() as first, first.begin():
        await claim_customer(first, customer_id)
        second = asyncio.create_task(_run(sessions, lambda s: claim_customer(s, customer_id)))
        await asyncio.sleep(0.2)
        assert not second.done()  # it waits for the first transaction, it does not skip it
    with pytest.raises(RefreshInProgress):
        await second
    stored = await _stored(sessions, Customer, customer_id)
    assert stored.scrape_state is ScrapeState.IN_PROGRESS


async def test_a_refresh_claims_every_access_but_one_already_being_scraped(
    sessions: async_sessionmaker[AsyncSession], access_id: int
) -> None:
    customer_id = await _customer_of(sessions, access_id)
    other_id = await _add_access(sessions, customer_id, access_id, "87654321X")
    at = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)

    alone = await _run(sessions, lambda s: claim_access(s, access_id, now=at))
    assert alone is not None
    assert (alone.access_id, alone.bank, alone.login) == (access_id, "formbank", "12345678Z")
    assert "tok" not in repr(alone)  # the credential token stays out of logs
    stored = await _stored(sessions, Access, access_id)
    assert (stored.scrape_state, stored.scrape_started_at, stored.heartbeat_at) == (
        ScrapeState.IN_PROGRESS,
        at,
        at,
    )

    claims = await _run(sessions, lambda s: claim_accesses(s, customer_id))
    assert [c.access_id for c in claims.claimed] == [other_id]
    assert claims.busy == (access_id,)

    assert await _run(sessions, lambda s: claim_access(s, access_id)) is None
    again = await _run(sessions, lambda s: claim_accesses(s, customer_id))
    assert (again.claimed, again.busy) == ((), (access_id, other_id))

    with pytest.raises(InputError, match="no access with id 999999"):
        await _run(sessions, lambda s: claim_access(s, 999_999))


async def test_a_finished_access_keeps_its_result_and_can_be_claimed_again(
    sessions: async_sessionmaker[AsyncSession], access_id: int
) -> None:
    await _run(sessions, lambda s: claim_access(s, access_id))
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    await _run(
        sessions,
        lambda s: finish_access(
            s,
            access_id,
            ResultCode.WRONG_CREDENTIALS,
            detail="Usuario o clave incorrectos. " * 30,
            accounts=2,
            movements=7,
            now=at,
        ),
    )
    stored = await _stored(sessions, Access, access_id)
    assert stored.scrape_state is ScrapeState.IDLE
    assert stored.result_code is ResultCode.WRONG_CREDENTIALS
    assert stored.result_detail.startswith("Usuario o clave incorrectos.")
    assert len(stored.result_detail) == 500  # the column's width, not an error
    assert (stored.accounts_count, stored.movements_count, stored.scrape_finished_at) == (2, 7, at)

    assert await _run(sessions, lambda s: claim_access(s, access_id)) is not None
    # a detail quoting a proxy URL keeps its credentials out of the database
    await _run(
        sessions,
        lambda s: finish_access(
            s, access_id, ResultCode.BLOCKED, detail="via http://bob:hunter2@10.0.0.1:3128"
        ),
    )
    stored = await _stored(sessions, Access, access_id)
    assert stored.result_detail == "via http://***@10.0.0.1:3128"


async def test_session_state_is_sealed_kept_and_never_overwritten_when_unreadable(
    sessions: async_sessionmaker[AsyncSession], access_id: int
) -> None:
    vault = CredentialVault([CredentialVault.generate_key()])

    claimed = await _claim(sessions, access_id)
    assert read_session_state(vault, claimed) == {}  # nothing kept yet
    await _run(
        sessions,
        lambda s: finish_access(
            s,
            access_id,
            ResultCode.TWO_FACTOR_REQUIRED,
            session_state=seal_session_state(vault, {"device": "trusted"}),
        ),
    )
    stored = await _stored(sessions, Access, access_id)
    assert b"trusted" not in stored.session_state  # encrypted at rest

    claimed = await _claim(sessions, access_id)
    assert read_session_state(vault, claimed) == {"device": "trusted"}
    # a vault without that key cannot read it, so that launch leaves it as it is
    stranger = CredentialVault([CredentialVault.generate_key()])
    assert read_session_state(stranger, claimed) is None
    await _run(
        sessions,
        lambda s: finish_access(s, access_id, ResultCode.SUCCESS, session_state=UNCHANGED),
    )
    claimed = await _claim(sessions, access_id)
    assert read_session_state(vault, claimed) == {"device": "trusted"}

    # an empty state clears what was kept
    await _run(
        sessions,
        lambda s: finish_access(
            s, access_id, ResultCode.SUCCESS, session_state=seal_session_state(vault, {})
        ),
    )
    assert (await _stored(sessions, Access, access_id)).session_state is None


async def test_the_watchdog_resets_only_what_stopped_beating(
    sessions: async_sessionmaker[AsyncSession], access_id: int
) -> None:
    now = datetime.now(UTC)
    long_ago, lately = now - timedelta(minutes=20), now - timedelta(minutes=1)
    dead_customer = await _customer_of(sessions, access_id)
    async with sessions() as session, session.begin():
        live = Customer(external_id="c-live", name="Queued")
        fresh = Customer(external_id="c-fresh", name="Just started")
        session.add_all([live, fresh])
        await session.flush()
        live_customer, fresh_customer = live.id, fresh.id
    live_access = await _add_access(sessions, live_customer, access_id, "live")
    await _add_access(sessions, fresh_customer, access_id, "fresh")

    # a killed launch: claimed 20 minutes ago, never stamped since
    await _run(sessions, lambda s: claim_customer(s, dead_customer, now=long_ago))
    await _run(sessions, lambda s: claim_accesses(s, dead_customer, now=long_ago))
    # a live launch that has queued its access as long, but still stamps it
    await _run(sessions, lambda s: claim_customer(s, live_customer, now=long_ago))
    await _run(sessions, lambda s: claim_accesses(s, live_customer, now=long_ago))
    await _run(sessions, lambda s: stamp_heartbeats(s, [live_access], now=lately))
    # a launch that just claimed its customer and has not claimed its accesses yet
    await _run(sessions, lambda s: claim_customer(s, fresh_customer, now=lately))

    found = await reset_stuck(sessions, limit=timedelta(minutes=15), now=now)
    assert (found.accesses, found.customers) == ((access_id,), (dead_customer,))

    dead = await _stored(sessions, Access, access_id)
    assert (dead.scrape_state, dead.result_code) == (ScrapeState.IDLE, ResultCode.TIMEOUT)
    assert "15 min" in dead.result_detail
    assert (await _stored(sessions, Customer, dead_customer)).scrape_state is ScrapeState.IDLE
    assert (await _stored(sessions, Access, live_access)).scrape_state is ScrapeState.IN_PROGRESS
    for customer_id in (live_customer, fresh_customer):
        stored = await _stored(sessions, Customer, customer_id)
        assert stored.scrape_state is ScrapeState.IN_PROGRESS

    # the freed customer can be refreshed again; the live launch finishes as usual
    await _run(sessions, lambda s: claim_customer(s, dead_customer))
    await _run(sessions, lambda s: finish_access(s, live_access, ResultCode.SUCCESS))
    await _run(sessions, lambda s: finish_customer(s, live_customer))
    again = await reset_stuck(sessions, limit=timedelta(minutes=15), now=now)
    assert (again.accesses, again.customers) == ((), ())
    assert (await _stored(sessions, Access, live_access)).result_code is ResultCode.SUCCESS
