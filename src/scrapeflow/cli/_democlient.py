"""The bank half of ``scrapeflow demo``, as a client of the service: what a customer's UI does.

Through the API only (an admin key): add the demo customers and their accesses at the three
sandbox banks (the sandbox's credentials), ask a refresh of each (202), follow each customer's
server-sent events — accounts with balances as they land, each access's result — give the
one-time code a bank sent by "SMS" (read from the sandbox, as the customer would read the
phone), wait until ``status`` says ``all_updated``, then read accounts and movements back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Any

import aiohttp
from rich.console import Console
from rich.markup import escape

from scrapeflow.cli._demoservice import BANKS, DemoService
from scrapeflow.sandbox import Sandbox, SandboxAdmin

__all__ = ["DEMO_CUSTOMERS", "CustomerRun", "refresh_demo_customers"]

DEMO_CUSTOMERS = (1, 2, 3, 7)
"""Sandbox customers: 2 needs a one-time code at legacybank; 7 has 32 accounts at each bank."""
_DEADLINE_S = 120.0
_TWO_FACTOR = "two_factor_required"
_REFRESH_ENDS = frozenset({"job.succeeded", "job.failed", "job.cancelled"})
_loads = partial(json.loads, parse_float=Decimal)  # money stays Decimal, whatever its form


@dataclass
class CustomerRun:
    """One demo customer: its accesses, what its refresh did and when, what the API holds."""

    id: str
    accesses: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Access id: (bank, login)."""
    results: dict[int, str] = field(default_factory=dict)
    posted: float = 0.0
    """When the refresh was asked (monotonic)."""
    first_balance: float | None = None
    """Seconds from the refresh's POST to the first accounts (with balances) it received."""
    all_updated: float | None = None
    """Seconds from the refresh's POST until ``status`` said ``all_updated``."""
    accounts: int = 0
    movements: int = 0
    totals: dict[str, Decimal] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """All updated, and every access ended ``success``."""
        codes = self.results.values()
        return self.all_updated is not None and all(code == "success" for code in codes)


async def refresh_demo_customers(
    sandbox: Sandbox, service: DemoService, out: Console
) -> list[CustomerRun]:
    """Set up, refresh and read back the demo customers through ``service``; live lines on
    ``out``. Waits two minutes at most for the refreshes."""
    headers = {"Authorization": f"Bearer {service.admin_key}"}
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(
            aiohttp.ClientSession(
                service.url, headers=headers, timeout=aiohttp.ClientTimeout(total=30)
            )
        )
        admin = await stack.enter_async_context(SandboxAdmin.from_sandbox(sandbox))
        runs = list(await asyncio.gather(*(_add_customer(api, admin, n) for n in DEMO_CUSTOMERS)))
        started = time.monotonic()
        try:
            async with asyncio.timeout(_DEADLINE_S):
                await asyncio.gather(*(_refresh(api, admin, run, started, out) for run in runs))
        except TimeoutError:
            out.print(f"[red]not every customer was all updated within {_DEADLINE_S:.0f} s[/]")
        await asyncio.gather(*(_read_back(api, run) for run in runs))
    return runs


async def _add_customer(api: aiohttp.ClientSession, admin: SandboxAdmin, n: int) -> CustomerRun:
    run = CustomerRun(f"demo-{n}")
    await _call(api, "POST", "/v1/customers", 201, {"id": run.id, "name": f"Demo customer {n}"})
    for bank in BANKS:
        login = await admin.customer(bank, n)
        body = {"bank": bank, "login": login["username"], "password": login["password"]}
        access = await _call(api, "POST", f"/v1/customers/{run.id}/accesses", 201, body)
        run.accesses[int(access["access_id"])] = (bank, login["username"])
    return run


async def _refresh(
    api: aiohttp.ClientSession,
    admin: SandboxAdmin,
    run: CustomerRun,
    started: float,
    out: Console,
) -> None:
    """Refresh one customer, follow its events until every access has its last result, give
    the one-time code a bank asked for, then wait for ``all_updated``."""
    base = f"/v1/customers/{run.id}"
    endless = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with api.get(f"{base}/events", timeout=endless) as stream:
        if stream.status != 200:
            raise RuntimeError(f"GET {base}/events answered {stream.status}")
        run.posted = time.monotonic()
        await _call(api, "POST", f"{base}/refresh", 202)
        refresh_ended = False
        codes_due: set[int] = set()  # waiting for the customer's one-time code
        resumed: set[int] = set()  # given a code, their new result not in yet
        balances: dict[object, int] = {}  # accounts with balances in, by access
        async for kind, data in _events(stream.content):
            now = time.monotonic()
            at = f"  {now - started:6.2f} s  {run.id}  {data.get('bank')!s:<10}  "
            if kind == "bank.accounts":  # in batches: the first one shown, the rest counted
                run.first_balance = run.first_balance or now - run.posted
                where = data.get("access_id", data.get("bank"))
                if where not in balances:
                    out.print(f"{at}first balances in: {data['count']} account(s)")
                balances[where] = balances.get(where, 0) + int(data["count"])
            elif kind == "bank.access_finished":
                access, code = int(data["access_id"]), str(data["result_code"])
                run.results[access] = code
                if code == _TWO_FACTOR and access not in resumed:  # a code is given once
                    codes_due.add(access)
                    out.print(f"{at}[yellow]{code}[/]: the bank sent a code by SMS")
                else:
                    resumed.discard(access)
                    count, accounts = int(data["count"]), balances.get(access, 0)
                    read = f"{accounts} account{'s' * (accounts != 1)}, " if accounts else ""
                    out.print(f"{at}{_code(code)} ({read}{count} movement{'s' * (count != 1)})")
            elif kind in _REFRESH_ENDS and data.get("kind") == "bank.refresh":
                if kind != "job.succeeded":
                    out.print(f"{at}[red]refresh {kind}[/]: {escape(str(data.get('error')))}")
                    return
                refresh_ended = True
            if refresh_ended and codes_due:  # the service takes a code once the refresh ended
                for access in sorted(codes_due):
                    await _give_code(api, admin, run, access, started, out)
                resumed |= codes_due
                codes_due.clear()
            if refresh_ended and not resumed:
                break
    # As the seed's UI does: poll the status until it says all updated.
    while True:
        status = await _call(api, "GET", f"{base}/status", 200)
        if status["all_updated"]:
            break
        await asyncio.sleep(0.05)
    run.all_updated = time.monotonic() - run.posted


def _code(code: str) -> str:
    return f"[{'green' if code == 'success' else 'red'}]{escape(code)}[/]"


async def _give_code(
    api: aiohttp.ClientSession,
    admin: SandboxAdmin,
    run: CustomerRun,
    access: int,
    started: float,
    out: Console,
) -> None:
    bank, login = run.accesses[access]
    code = await admin.otp(bank, login)  # the "SMS" on the customer's phone
    path = f"/v1/customers/{run.id}/accesses/{access}/otp"
    await _call(api, "POST", path, 202, {"code": code})
    out.print(
        f"  {time.monotonic() - started:6.2f} s  {run.id}  {bank:<10}  "
        f"POST …/accesses/{access}/otp: the code, the scrape resumes"
    )


async def _read_back(api: aiohttp.ClientSession, run: CustomerRun) -> None:
    """The final result codes, accounts, balances per currency and movements, from the API."""
    base = f"/v1/customers/{run.id}"
    status = await _call(api, "GET", f"{base}/status", 200)
    run.results = {int(a["access_id"]): str(a["result"]) for a in status["accesses"]}
    accounts = await _call(api, "GET", f"{base}/accounts", 200)
    run.accounts = len(accounts)
    totals: dict[str, Decimal] = {}
    for account in accounts:
        currency = str(account["currency"])
        totals[currency] = totals.get(currency, Decimal(0)) + Decimal(str(account["balance"]))
    run.totals = totals
    query = {"limit": "1000"}
    while True:
        page = await _call(api, "GET", f"{base}/movements", 200, params=query)
        run.movements += len(page["movements"])
        cursor = page["next_cursor"]
        if not cursor:
            return
        query["cursor"] = str(cursor)


async def _call(
    api: aiohttp.ClientSession,
    method: str,
    path: str,
    expect: int,
    body: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, str] | None = None,
) -> Any:
    """One API call; its JSON answer. Another status than ``expect`` is a bug of the demo or
    the service: RuntimeError with the problem's title and detail (never the request body)."""
    async with api.request(method, path, json=body, params=params) as response:
        if response.status == expect:
            return await response.json(loads=_loads, content_type=None)
        problem: Any = None
        if response.content_type == "application/problem+json":
            problem = await response.json(content_type=None)
        problem = problem if isinstance(problem, dict) else {}
        raise RuntimeError(
            f"{method} {path} answered {response.status} "
            f"{problem.get('title', response.reason)}: {problem.get('detail', '')}".rstrip(": ")
        )


async def _events(content: aiohttp.StreamReader) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Server-sent events as (event name, JSON data); comments (keep-alive pings) skipped."""
    kind, data = "message", list[str]()
    async for raw in content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                yield kind, _loads("\n".join(data))
            kind, data = "message", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
