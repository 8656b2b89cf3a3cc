"""The watchdog resets only what is stuck past its limit, and says what it reset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import (
    Access,
    Customer,
    ResultCode,
    ScrapeState,
    reset_stuck,
)
from scrapeflow.db import session_factory


async def test_only_what_is_stuck_past_the_limit_is_reset(
    session: AsyncSession, access_id: int
) -> None:
    now = datetime.now(UTC)
    stuck = await session.get(Access, access_id)
    customer = await session.get(Customer, stuck.customer_id)
    live = Access(
        customer_id=customer.id,
        entity_id=stuck.entity_id,
        login="other",
        secret=b"tok",
        scrape_state=ScrapeState.IN_PROGRESS,
        scrape_started_at=now - timedelta(minutes=2),
    )
    session.add(live)
    stuck.scrape_state = ScrapeState.IN_PROGRESS
    stuck.scrape_started_at = now - timedelta(minutes=20)
    customer.scrape_state = ScrapeState.IN_PROGRESS
    customer.scrape_started_at = now - timedelta(minutes=20)
    customer_id, stuck_login = customer.id, stuck.login
    await session.commit()
    sessions = session_factory(session.bind)

    found = await reset_stuck(sessions, limit=timedelta(minutes=15))
    assert found.accesses == (access_id,)
    assert found.customers == (customer_id,)
    again = await reset_stuck(sessions, limit=timedelta(minutes=15))
    assert (again.accesses, again.customers) == ((), ())

    session.expire_all()
    rows = {
        a.login: (a.scrape_state, a.result_code, a.result_detail)
        for a in (await session.scalars(select(Access))).all()
    }
    assert rows["other"] == (ScrapeState.IN_PROGRESS, None, None)  # a live scrape is left alone
    state, code, detail = rows[stuck_login]
    assert (state, code) == (ScrapeState.IDLE, ResultCode.TIMEOUT)
    assert "15 min" in detail
    assert (await session.get(Customer, customer_id)).scrape_state is ScrapeState.IDLE
