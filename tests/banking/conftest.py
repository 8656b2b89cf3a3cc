"""Bank fixtures: a session and a customer's access on a migrated database, on each backend.

The databases (``db_url``, ``sqlite_url``, ``empty_db_url``) are in ``tests/_databases.py``,
the sandbox in ``tests/_servers.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import Access, Customer, FinancialEntity
from scrapeflow.db import create_engine, session_factory


@pytest.fixture
async def session(db_url: str) -> AsyncIterator[AsyncSession]:
    """A session on a migrated database."""
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as s:
            yield s
    finally:
        await engine.dispose()


@pytest.fixture
async def access_id(session: AsyncSession) -> int:
    """One customer with one access at one bank; the access's id."""
    customer = Customer(external_id="c-1", name="Ana")
    bank = FinancialEntity(code="formbank", name="Form Bank", country="ES")
    session.add_all([customer, bank])
    await session.flush()
    access = Access(customer_id=customer.id, entity_id=bank.id, login="12345678Z", secret=b"tok")
    session.add(access)
    await session.commit()
    return access.id
