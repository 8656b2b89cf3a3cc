"""The watchdog resets only what a dead launch left: an access whose heartbeat stopped, and a
customer with nothing in progress left. A long queue under a live launcher is left alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import Access, Customer, ResultCode, ScrapeState, reset_stuck
from scrapeflow.db import session_factory
from scrapeflow.errors import ConfigError


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


async def _in_progress(
    session: AsyncSession,
    entity_id: int,
    name: str,
    *,
    beat: datetime,
    interval: float | None,
) -> tuple[int, int]:
    """A customer and its one access, both in progress, last stamped at ``beat``."""
    customer = Customer(
        external_id=name,
        scrape_state=ScrapeState.IN_PROGRESS,
        scrape_started_at=beat - timedelta(hours=1),
        heartbeat_at=beat,
        heartbeat_seconds=interval,
    )
    session.add(customer)
    await session.flush()
    access = Access(
        customer_id=customer.id,
        entity_id=entity_id,
        login=name,
        secret=b"t",
        scrape_state=ScrapeState.IN_PROGRESS,
        scrape_started_at=beat - timedelta(hours=1),
        heartbeat_at=beat,
        heartbeat_seconds=interval,
    )
    session.add(access)
    await session.flush()
    return customer.id, access.id


async def test_a_fresh_heartbeat_is_never_reset_whatever_the_limit(
    session: AsyncSession, access_id: int
) -> None:
    """The effective limit of a row is max(limit, 3 x its launcher's interval): a limit below
    the interval cannot free what a live launcher will stamp again."""
    now = datetime.now(UTC)
    entity_id = (await session.get(Access, access_id)).entity_id
    live = await _in_progress(  # a 60 s launcher, last beat 2 min ago: 1 missed beat + a bit
        session, entity_id, "live", beat=now - timedelta(minutes=2), interval=60.0
    )
    dead = await _in_progress(  # the same launcher, silent for 4 min: more than 3 beats
        session, entity_id, "dead", beat=now - timedelta(minutes=4), interval=60.0
    )
    old = await _in_progress(  # claimed before intervals were stored: the argument's stands in
        session, entity_id, "old", beat=now - timedelta(seconds=50), interval=None
    )
    await session.commit()
    sessions = session_factory(session.bind)

    found = await reset_stuck(sessions, limit=timedelta(seconds=1), heartbeat=10.0, now=now)
    assert found.accesses == (dead[1], old[1])
    assert found.customers == (dead[0], old[0])
    session.expire_all()
    states = dict((await session.execute(select(Access.login, Access.scrape_state))).all())
    assert states["live"] is ScrapeState.IN_PROGRESS
    dead_detail = await session.scalar(select(Access.result_detail).where(Access.id == dead[1]))
    assert dead_detail == "reset by the watchdog: no heartbeat for 3 min"
    customer_state = await session.scalar(
        select(Customer.scrape_state).where(Customer.id == live[0])
    )
    assert customer_state is ScrapeState.IN_PROGRESS

    # the live launcher's customer, its access finished, is kept while its own beat is fresh
    live_access = await session.get(Access, live[1])
    live_access.scrape_state = ScrapeState.IDLE
    await session.commit()
    again = await reset_stuck(sessions, limit=timedelta(seconds=1), now=now)
    assert (again.accesses, again.customers) == ((), ())
    later = await reset_stuck(sessions, limit=timedelta(seconds=1), now=now + timedelta(minutes=2))
    assert later.customers == (live[0],)


@pytest.mark.parametrize("limit", [timedelta(0), timedelta(seconds=-1)])
async def test_a_limit_must_be_positive(session: AsyncSession, limit: timedelta) -> None:
    with pytest.raises(ConfigError, match="limit must be positive"):
        await reset_stuck(session_factory(session.bind), limit=limit)


async def test_a_reset_for_one_customer_leaves_the_others_alone(
    session: AsyncSession, access_id: int
) -> None:
    long_ago = datetime.now(UTC) - timedelta(minutes=20)
    mine = await session.get(Access, access_id)
    other = Customer(
        external_id="other", scrape_state=ScrapeState.IN_PROGRESS, scrape_started_at=long_ago
    )
    session.add(other)
    await session.flush()
    theirs = Access(
        customer_id=other.id,
        entity_id=mine.entity_id,
        login="theirs",
        secret=b"t",
        scrape_state=ScrapeState.IN_PROGRESS,
        scrape_started_at=long_ago,
        heartbeat_at=long_ago,
    )
    mine.scrape_state, mine.scrape_started_at, mine.heartbeat_at = (
        ScrapeState.IN_PROGRESS,
        long_ago,
        long_ago,
    )
    session.add(theirs)
    mine_customer = mine.customer_id
    await session.commit()
    sessions = session_factory(session.bind)

    found = await reset_stuck(sessions, limit=timedelta(minutes=1), customer=mine_customer)
    assert found.accesses == (access_id,)
    both = await reset_stuck(sessions, limit=timedelta(minutes=1))
    assert both.accesses == (theirs.id,)  # left for the watchdog's own pass
