"""The bank half of ``scrapeflow demo``: demo customers refreshed at the sandbox's three banks.

Realistic bank latency (80-250 ms an answer), a throw-away SQLite database and vault key, live
progress, then each customer's accounts, movement counts and timings beside the seed's targets
(balances in 10 s, movements in 30 s). One legacy-bank customer needs a one-time code: the demo
reads the "SMS" from the sandbox and resumes the scrape with it, as a customer would.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scrapeflow.banking import (
    CredentialVault,
    EventKind,
    Launcher,
    LaunchEvent,
    LaunchReport,
    ResultCode,
    accounts_of,
    add_access,
    add_customer,
    migrate,
    movements_of,
)
from scrapeflow.db import create_engine, session_factory
from scrapeflow.sandbox import Sandbox, SandboxAdmin
from scrapeflow.sandbox.banks import DEFAULT_BANK_LATENCY_MS

__all__ = ["BALANCES_TARGET_S", "DEMO_CUSTOMERS", "MOVEMENTS_TARGET_S", "run_bank_demo"]

BANKS = ("formbank", "apibank", "legacybank")
DEMO_CUSTOMERS = (1, 2, 3, 7)
"""2 needs a one-time code at the legacy bank; 7 has 32 accounts at each bank."""
BALANCES_TARGET_S = 10.0
MOVEMENTS_TARGET_S = 30.0


async def _refresh_demo_customers(
    sandbox: Sandbox, db_url: str, logs: Path, out: Console
) -> tuple[list[LaunchReport], float]:
    vault = CredentialVault([CredentialVault.generate_key()])
    await migrate(db_url)
    engine = create_engine(db_url)
    sessions = session_factory(engine)
    logins: dict[tuple[int, str], str] = {}
    names: dict[int, str] = {}
    try:
        for n in DEMO_CUSTOMERS:
            names[await add_customer(sessions, f"demo-{n}", f"Demo customer {n}")] = f"demo-{n}"
            for bank in BANKS:
                async with SandboxAdmin.from_sandbox(sandbox) as admin:
                    cred = await admin.customer(bank, n)
                await add_access(
                    sessions, vault, f"demo-{n}", bank, cred["username"], cred["password"]
                )
                logins[(n, bank)] = cred["username"]
    finally:
        await engine.dispose()

    started = time.monotonic()

    def show(event: LaunchEvent) -> None:
        at = f"{time.monotonic() - started:6.2f} s"
        if event.kind is EventKind.ACCOUNTS:
            out.print(
                f"  {at}  {names[event.customer_id]}  {event.bank:<10}  "
                f"{event.count} account(s) with balances"
            )
        elif event.kind is EventKind.ACCESS_FINISHED:
            style = "green" if event.result_code == ResultCode.SUCCESS else "yellow"
            out.print(
                f"  {at}  {names[event.customer_id]}  {event.bank:<10}  "
                f"[{style}]{event.result_code}[/] ({event.count} movements)"
            )

    async with Launcher(
        db_url,
        vault=vault,
        bank_urls=sandbox.urls,
        today=lambda: sandbox.clock.now().date(),
        log_dir=logs,
        on_event=show,
    ) as launcher:
        reports = await launcher.refresh_many([f"demo-{n}" for n in DEMO_CUSTOMERS])
        elapsed = time.monotonic() - started
        for report in reports:
            for access in report.accesses:
                if access.code is ResultCode.TWO_FACTOR_REQUIRED:
                    n = int(report.external_id.removeprefix("demo-"))
                    username = logins[(n, access.bank)]
                    async with SandboxAdmin.from_sandbox(sandbox) as admin:
                        code = await admin.otp(access.bank, username)
                    out.print(
                        f"  {report.external_id} at {access.bank}: the bank sent a code by "
                        "SMS; the customer types it in, the scrape resumes"
                    )
                    resumed = await launcher.scrape_access(access.access_id, otp=code)
                    report.accesses[report.accesses.index(access)] = resumed
    return reports, elapsed


async def _summaries(db_url: str) -> dict[str, tuple[int, dict[str, Decimal], int]]:
    engine = create_engine(db_url)
    sessions = session_factory(engine)
    found: dict[str, tuple[int, dict[str, Decimal], int]] = {}
    try:
        for n in DEMO_CUSTOMERS:
            accounts = await accounts_of(sessions, f"demo-{n}")
            totals: dict[str, Decimal] = defaultdict(Decimal)
            for account in accounts:
                totals[account.currency] += account.balance
            movements = await movements_of(sessions, f"demo-{n}")
            found[f"demo-{n}"] = (len(accounts), dict(totals), len(movements))
    finally:
        await engine.dispose()
    return found


def run_bank_demo(sandbox: Sandbox, workdir: Path, out: Console, *, kept: bool = False) -> int:
    """Refresh the demo customers; print accounts, movements and timings. 0 when all succeed.

    ``kept``: ``workdir`` outlives the demo (``--dir``), so its database and logs are named.
    """
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = DEFAULT_BANK_LATENCY_MS
    db_url = f"sqlite+aiosqlite:///{workdir / 'banking.db'}"
    out.print(
        f"\nrefreshing {len(DEMO_CUSTOMERS)} demo customers at {len(BANKS)} banks at once "
        f"({DEFAULT_BANK_LATENCY_MS[0]:.0f}-{DEFAULT_BANK_LATENCY_MS[1]:.0f} ms a bank answer)"
    )
    reports, elapsed = asyncio.run(_refresh_demo_customers(sandbox, db_url, workdir / "logs", out))
    summaries = asyncio.run(_summaries(db_url))
    table = Table(
        title=f"demo customers (movements of the last 14 days); the seed's targets: balances "
        f"in {BALANCES_TARGET_S:.0f} s, movements in {MOVEMENTS_TARGET_S:.0f} s"
    )
    for column in ("customer", "accounts", "movements", "result", "balances s", "movements s"):
        table.add_column(column, no_wrap=True)
    for report in reports:
        count, _, movements = summaries[report.external_id]
        balances = report.balances_seconds
        table.add_row(
            escape(report.external_id),
            str(count),
            str(movements),
            "/".join(sorted({a.code.value for a in report.accesses})),
            "-" if balances is None else f"{balances:.2f}",
            f"{report.seconds:.2f}",
        )
    out.print(table)
    for report in reports:
        totals = summaries[report.external_id][1]
        money = ", ".join(f"{currency} {total:,.2f}" for currency, total in sorted(totals.items()))
        out.print(f"  {escape(report.external_id)} holds {money}")
    where = (
        f"the database is {escape(str(workdir / 'banking.db'))}, one log per launch in "
        f"{escape(str(workdir / 'logs'))}"
        if kept
        else "--dir DIR keeps the database and the launch logs"
    )
    out.print(f"all {len(reports)} customers refreshed at once in {elapsed:.2f} s; {where}")
    return 0 if all(r.ok for r in reports) else 1
