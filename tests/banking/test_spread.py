"""A refresh spread over the queue, one ``bank.access`` job per access (what the distributed
backend runs), on one process's queue: the same report and events as a refresh in one job, the
events under the refresh's job, a part the refresh joins run inside it, and a cancel that
reaches every part and leaves nothing in progress."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from scrapeflow.banking import (
    BANK_ACCESS,
    BANK_REFRESH,
    Access,
    BankJobEvent,
    CredentialVault,
    Customer,
    ResultCode,
    ScrapeState,
    bank_job_kinds,
    refresh_reports,
)
from scrapeflow.config import Settings
from scrapeflow.db import create_engine, session_factory
from scrapeflow.jobs import EmbeddedJobQueue, JobState, SqlJobStore
from scrapeflow.sandbox import Sandbox
from tests._servers import add_sandbox_customers

BANKS = ("formbank", "apibank", "legacybank")
KEY = CredentialVault.generate_key()


@pytest.fixture
def settings(
    sqlite_url: str, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    manifest = tmp_path / "sandbox.json"
    manifest.write_text(json.dumps(sandbox.manifest()))
    monkeypatch.setenv("SCRAPEFLOW_VAULT_KEYS", KEY)
    flags = {"db_url": sqlite_url, "sandbox_manifest": manifest, "heartbeat": 0.3}
    return Settings.load(flags=flags | {"log_dir": tmp_path / "logs"})


async def add_customers(sandbox: Sandbox, db_url: str, numbers: list[int], banks: Any) -> None:
    await add_sandbox_customers(sandbox, db_url, KEY, numbers, banks)


def spread_queue(
    settings: Settings, events: list[BankJobEvent], **options: Any
) -> EmbeddedJobQueue:
    kinds = bank_job_kinds(settings, on_event=events.append, per_access=True)
    return EmbeddedJobQueue(
        SqlJobStore(settings.db_url), kinds, heartbeat=0.2, poll=0.05, **options
    )


async def test_a_spread_refresh_reports_and_tells_like_one_job(
    settings: Settings, sandbox: Sandbox
) -> None:
    await add_customers(sandbox, settings.db_url, [1], BANKS)
    events: list[BankJobEvent] = []
    async with spread_queue(settings, events, concurrency=1) as queue:
        job = await queue.submit(BANK_REFRESH, {"customer": "cust-1"})
        async with asyncio.timeout(60):
            done = await queue.wait(job.id)
        parts = await queue.find(kind=BANK_ACCESS)
    assert done.state is JobState.SUCCEEDED, done.error
    assert done.result is not None and done.result["ok"] is True
    [report] = refresh_reports(done)
    assert {a.bank for a in report.accesses} == set(BANKS)
    assert {a.code for a in report.accesses} == {ResultCode.SUCCESS}
    assert sum(a.movements for a in report.accesses) == done.progress["movements"] > 0
    assert done.progress["accesses_done"] == 3

    assert len(parts) == 3 and {p.state for p in parts} == {JobState.SUCCEEDED}
    assert {p.params["refresh"] for p in parts} == {job.id}
    # Every part counts its window from the launch's day (the sandbox's clock), read once.
    assert {p.params["day"] for p in parts} == {sandbox.clock.now().date().isoformat()}
    names = [e.name for e in events]
    assert names[0] == "bank.refresh_started" and names[-1] == "bank.all_updated"
    assert names.count("bank.access_finished") == 3
    assert {e.job_id for e in events} == {job.id}  # the parts' events are the refresh's
    assert len({e.data()["launch_id"] for e in events}) == 1
    assert {e.job.id for e in events} == {job.id, *(p.id for p in parts)}


async def test_cancelling_a_spread_refresh_cancels_its_parts(
    settings: Settings, sandbox: Sandbox
) -> None:
    await add_customers(sandbox, settings.db_url, [1], BANKS)
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (300.0, 400.0)
    events: list[BankJobEvent] = []
    async with spread_queue(settings, events) as queue:
        job = await queue.submit(BANK_REFRESH, {"customer": "cust-1"})
        async with asyncio.timeout(60):
            while len(await queue.find(kind=BANK_ACCESS, states=(JobState.RUNNING,))) < 3:
                await asyncio.sleep(0.05)
            await queue.cancel(job.id)
            done = await queue.wait(job.id)
            parts = [await queue.wait(p.id) for p in await queue.find(kind=BANK_ACCESS)]
    assert done.state is JobState.CANCELLED
    assert [p.state for p in parts] == [JobState.CANCELLED] * 3
    engine = create_engine(settings.db_url)
    try:
        async with session_factory(engine)() as session:
            customer = await session.scalar(select(Customer.scrape_state))
            accesses = list(await session.scalars(select(Access.scrape_state)))
    finally:
        await engine.dispose()
    assert customer is not ScrapeState.IN_PROGRESS
    assert ScrapeState.IN_PROGRESS not in accesses
