"""Stopping a launch (a cancelled refresh job, Ctrl-C) at the moments around its claim: whenever
the stop lands, nothing it claimed stays in progress, and the customer can be refreshed again.

A stop that lands while the scrapers run is covered in ``test_launcher.py``; these are the two
windows before that: while the claim is being written, and between the claim and the scrapers'
start (the "launch started" event is being delivered).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from scrapeflow.banking import (
    Access,
    Customer,
    EventKind,
    Launcher,
    LaunchEvent,
    ResultCode,
    ScrapeState,
    migrate,
)
from scrapeflow.banking import _launchclaims as launcher_module
from scrapeflow.db import create_engine, session_factory
from scrapeflow.sandbox import Sandbox

from .test_launcher import _customer, _launcher


async def _scrape_states(db_url: str) -> tuple[ScrapeState, list[tuple[Any, ...]]]:
    """The customer's state, and each access's state, result code and detail."""
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as session:
            customer = await session.scalar(select(Customer.scrape_state))
            accesses = (
                await session.execute(
                    select(Access.scrape_state, Access.result_code, Access.result_detail).order_by(
                        Access.id
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    assert customer is not None
    return customer, [tuple(row) for row in accesses]


async def test_a_stop_between_the_claim_and_the_scrapers_ends_every_claimed_access(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    await _customer(db_url, sandbox, 1)
    reached = asyncio.Event()

    async def slow_listener(event: LaunchEvent) -> None:
        if event.kind is EventKind.LAUNCH_STARTED and not reached.is_set():
            reached.set()
            await asyncio.Event().wait()  # held here until the launch is stopped

    async with _launcher(db_url, sandbox, tmp_path, on_event=slow_listener) as launcher:
        task = asyncio.create_task(launcher.refresh("cust-1"))
        await asyncio.wait_for(reached.wait(), timeout=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=5)

        customer, accesses = await _scrape_states(db_url)
        assert customer is not ScrapeState.IN_PROGRESS
        stopped = (ScrapeState.IDLE, ResultCode.TIMEOUT, "the launch was stopped")
        assert accesses == [stopped] * 3

        report = await launcher.refresh("cust-1")  # nothing stayed claimed
    assert [a.code for a in report.accesses] == [ResultCode.SUCCESS] * 3


Start = Callable[[Launcher, dict[str, dict[str, Any]]], Awaitable[object]]


def _refresh(launcher: Launcher, accesses: dict[str, dict[str, Any]]) -> Awaitable[object]:
    return launcher.refresh("cust-1")


def _scrape_one(launcher: Launcher, accesses: dict[str, dict[str, Any]]) -> Awaitable[object]:
    return launcher.scrape_access(accesses["formbank"]["access_id"], otp="123456")


@pytest.mark.parametrize(
    ("claim", "start"),
    [("claim_accesses", _refresh), ("claim_access", _scrape_one)],
    ids=["refresh", "scrape_access"],
)
async def test_a_stop_while_the_claim_is_written_gives_the_claim_back(
    db_url: str,
    sandbox: Sandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    claim: str,
    start: Start,
) -> None:
    """The claim is in the writer's hands when the stop lands: the stop does not wait for it,
    and once it has landed what it took is given back."""
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 1)
    real = getattr(launcher_module, claim)
    writing, commit = asyncio.Event(), asyncio.Event()

    async def held_claim(*args: Any, **kwargs: Any) -> Any:
        taken = await real(*args, **kwargs)
        writing.set()
        await commit.wait()  # the stop lands here, before the transaction commits
        return taken

    monkeypatch.setattr(launcher_module, claim, held_claim)
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        task = asyncio.create_task(start(launcher, accesses))
        await asyncio.wait_for(writing.wait(), timeout=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=2)  # not held by the write in progress
        commit.set()
    # The launcher closes once what the stopped claim took has been given back.
    customer, states = await _scrape_states(db_url)
    assert customer is not ScrapeState.IN_PROGRESS
    assert all(state is ScrapeState.IDLE for state, _, _ in states), states

    monkeypatch.setattr(launcher_module, claim, real)
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        report = await launcher.refresh("cust-1")  # nothing stayed claimed
    assert [a.code for a in report.accesses] == [ResultCode.SUCCESS] * 3
