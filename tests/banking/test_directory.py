"""Customers and accesses added at the same moment, as a UI's users do, on each backend."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select

from scrapeflow.banking import (
    Access,
    CredentialVault,
    FinancialEntity,
    add_access,
    add_customer,
)
from scrapeflow.db import create_engine, session_factory


async def test_first_accesses_at_a_bank_added_at_once_all_succeed(db_url: str) -> None:
    vault = CredentialVault([CredentialVault.generate_key()])
    engine = create_engine(db_url)
    try:
        sessions = session_factory(engine)
        for n in range(6):
            await add_customer(sessions, f"c{n}", f"Customer {n}")
        ids = await asyncio.gather(
            *(
                add_access(sessions, vault, f"c{n}", "formbank", f"login{n}", "pw")
                for n in range(6)
            ),
            # the same login twice at once: one access, holding one of the two passwords
            add_access(sessions, vault, "c0", "apibank", "twice", "first"),
            add_access(sessions, vault, "c0", "apibank", "twice", "second"),
        )
        assert len(set(ids[:6])) == 6
        assert ids[6] == ids[7]
        async with sessions() as session:
            entities = await session.scalar(
                select(func.count()).where(FinancialEntity.code == "formbank")
            )
            twice = (await session.scalars(select(Access).where(Access.login == "twice"))).one()
        assert entities == 1
        assert vault.decrypt(twice.secret) in ("first", "second")
    finally:
        await engine.dispose()
