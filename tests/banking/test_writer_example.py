"""The documented custom writer (docs/examples/bank_own_tables.py) runs as documented: a refresh
lands in the user's own tables, exactly, and a second refresh doubles nothing."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import func, select

from scrapeflow.banking import Launcher, add_access, add_customer, migrate
from scrapeflow.db import create_engine, session_factory
from scrapeflow.sandbox import Sandbox

from . import _harness as h

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "bank_own_tables.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("bank_own_tables", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_refresh_into_the_users_own_tables(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    example = _load_example()
    await migrate(db_url)
    ledger_url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"  # the user's own database
    ledger = create_engine(ledger_url)
    engine = create_engine(db_url)
    try:
        async with ledger.begin() as conn:
            await conn.run_sync(example.ledger.create_all)
        cred = await h.credentials(sandbox, "apibank", 3)
        await add_customer(session_factory(engine), "c3")
        access_id = await add_access(
            session_factory(engine), h.VAULT, "c3", "apibank", cred["username"], cred["password"]
        )
        async with Launcher(
            db_url,
            vault=h.VAULT,
            bank_urls=sandbox.urls,
            writer=example.LedgerWriter(ledger),
            today=lambda: sandbox.clock.now().date(),
        ) as launcher:
            first = await launcher.refresh("c3")
            sandbox.clock.advance(timedelta(days=2))
            second = await launcher.refresh("c3")
        assert first.ok and second.ok, (first, second)

        since = sandbox.clock.now().date() - timedelta(days=16)
        truth = await h.truth(sandbox, "apibank", cred["username"], since=since)
        async with ledger.connect() as conn:
            balances = dict(
                (
                    await conn.execute(
                        select(
                            example.ledger_accounts.c.source,
                            example.ledger_accounts.c.balance_cents,
                        )
                    )
                ).all()
            )
            entries = (
                await conn.execute(
                    select(
                        example.ledger_entries.c.entry_key,
                        example.ledger_entries.c.amount_cents,
                        example.ledger_entries.c.is_pending,
                    )
                )
            ).all()
            count = await conn.scalar(select(func.count()).select_from(example.ledger_entries))
        assert balances == {
            f"{access_id}:{a['id']}": int(Decimal(a["balance"]) * 100) for a in truth["accounts"]
        }
        want = {
            (f"ref:{m['ref']}", int(Decimal(m["amount"]) * 100), m["pending"])
            for ms in truth["movements"].values()
            for m in ms
        }
        assert set(entries) == want
        assert count == len(want)  # nothing doubled by the second, overlapping refresh
    finally:
        await ledger.dispose()
        await engine.dispose()
