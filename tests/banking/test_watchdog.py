"""The watchdog resets only what a dead launch left: an access whose heartbeat stopped, and a
customer with nothing in progress left. A long queue under a live launcher is left alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import Access, Customer, ResultCode, ScrapeState, reset_stuck
from scrapeflow.db import session_factory


async def test_only_what_stopped_beating_is_reset(session: AsyncSession, access_id: int) -> None:
    now = datetime.now(UTC)
    long_ago, lately = now - timedelta(minutes=20), now - timedelta(minutes=1)
    dead = await session.get(Access, access_id)
    dead_customer = await session.get(Customer, dead.customer_id)
    dead.scrape_state, dead.scrape_started_at, dead.heartbeat_at = (
        ScrapeState.IN_PROGRESS,
        long_ago,
        long_ago,
    )
    dead_customer.scrape_state = ScrapeState.IN_PROGRESS
    dead_customer.scrape_started_at = long_ago
    # a customer queued for long under a live launcher: old start, fresh heartbeat
    live_customer = Customer(
        external_id="queued", scrape_state=ScrapeState.IN_PROGRESS, scrape_started_at=long_ago
    )
    session.add(live_customer)
    await session.flush()
    session.add(
        Access(
            customer_id=live_customer.id,
            entity_id=dead.entity_id,
            login="queued",
            secret=b"t",
            scrape_state=ScrapeState.IN_PROGRESS,
            scrape_started_at=long_ago,
            heartbeat_at=lately,
        )
    )
    dead_customer_id, live_customer_id, dead_login = dead_customer.id, live_customer.id, dead.login
    await session.commit()
    sessions = session_factory(session.bind)

    found = await reset_stuck(sessions, limit=timedelta(minutes=15))
    assert found.accesses == (access_id,)
    assert found.customers == (dead_customer_id,)
    again = await reset_stuck(sessions, limit=timedelta(minutes=15))
    assert (again.accesses, again.customers) == ((), ())

    session.expire_all()
    rows = {
        a.login: (a.scrape_state, a.result_code, a.result_detail)
        for a in (await session.scalars(select(Access))).all()
    }
    assert rows["queued"] == (ScrapeState.IN_PROGRESS, None, None)
    state, code, detail = rows[dead_login]
    assert (state, code) == (ScrapeState.IDLE, ResultCode.TIMEOUT)
    assert "15 min" in detail
    states = dict((await session.execute(select(Customer.id, Customer.scrape_state))).all())
    assert states[dead_customer_id] is ScrapeState.IDLE
    assert states[live_customer_id] is ScrapeState.IN_PROGRESS
