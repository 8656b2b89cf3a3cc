"""Bank work as jobs: ``bank.refresh`` (one customer or several) and its events and reports, the
launcher the jobs of a process share, and the watchdog as the queue's sweep plus the row reset.

The jobs run on each job backend (``job_backend``): the embedded queue over SQLite, and the
procrastinate queue over PostgreSQL with its worker in this process. The watchdog's test is
about the embedded queue's own sweep (procrastinate's workers sweep by themselves, see
``tests/jobs/test_procrastinate.py``): it runs on the embedded queue, over each database.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking import (
    BANK_REFRESH,
    Access,
    BankJobEvent,
    CredentialVault,
    Customer,
    EventKind,
    FinancialEntity,
    ResultCode,
    ScrapeState,
    add_customer,
    bank_job_kinds,
    refresh_key,
    refresh_reports,
    run_watchdog,
)
from scrapeflow.config import Settings
from scrapeflow.db import create_engine, session_factory
from scrapeflow.errors import ConfigError
from scrapeflow.jobs import (
    EmbeddedJobQueue,
    JobContext,
    JobState,
    ProcrastinateJobQueue,
    SqlJobStore,
)
from scrapeflow.sandbox import Sandbox
from tests._databases import _pg_database
from tests._servers import add_sandbox_customers

KEY = CredentialVault.generate_key()


JOB_BACKENDS = ("embedded", "procrastinate")

# Seconds: short, so that a test waits little for what the queue does on a schedule.
EMBEDDED_TIMINGS = {"heartbeat": 0.2, "poll": 0.05}
PROCRASTINATE_TIMINGS = {"heartbeat": 0.5, "sweep_every": 1, "poll": 0.5, "grace": 2.0}


@pytest.fixture(params=JOB_BACKENDS)
def job_backend(request: pytest.FixtureRequest) -> str:
    """Each job backend: ``embedded`` (over SQLite) and ``procrastinate`` (over PostgreSQL)."""
    backend: str = request.param
    return backend


@pytest.fixture
async def bank_db_url(job_backend: str, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A database with the bank schema at head, for ``job_backend``: SQLite for the embedded
    queue, PostgreSQL for procrastinate's (it runs on PostgreSQL only)."""
    if job_backend == "embedded":
        yield request.getfixturevalue("sqlite_url")
        return
    async with _pg_database(template=request.getfixturevalue("pg_template")) as url:
        yield url


@pytest.fixture
def settings(
    job_backend: str,
    bank_db_url: str,
    sandbox: Sandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Settings:
    manifest = tmp_path / "sandbox.json"
    manifest.write_text(json.dumps(sandbox.manifest()))
    monkeypatch.setenv("SCRAPEFLOW_VAULT_KEYS", KEY)
    return Settings.load(
        flags={
            "db_url": bank_db_url,
            "jobs_backend": job_backend,
            "sandbox_manifest": manifest,
            "log_dir": tmp_path / "logs",
            "heartbeat": 0.3,
        }
    )


async def add_customers(
    sandbox: Sandbox, db_url: str, numbers: list[int], banks: tuple[str, ...]
) -> None:
    await add_sandbox_customers(sandbox, db_url, KEY, numbers, banks)


def bank_queue(
    settings: Settings, events: list[BankJobEvent], **options: object
) -> EmbeddedJobQueue | ProcrastinateJobQueue:
    """A queue with the bank job kinds, on the backend ``settings.jobs_backend`` names (its
    jobs run in this process); ``options``: the queue's own (``concurrency``, ``run_jobs``)."""
    kinds = bank_job_kinds(settings, on_event=events.append)
    if settings.jobs_backend == "procrastinate":
        return ProcrastinateJobQueue(
            settings.db_url,
            kinds,
            **{**PROCRASTINATE_TIMINGS, **options},  # type: ignore[arg-type]
        )
    return EmbeddedJobQueue(
        SqlJobStore(settings.db_url),
        kinds,
        **{**EMBEDDED_TIMINGS, **options},  # type: ignore[arg-type]
    )


async def test_a_refresh_job_reports_like_the_launcher_and_tells_each_event(
    settings: Settings, sandbox: Sandbox
) -> None:
    await add_customers(sandbox, settings.db_url, [1], ("formbank", "apibank", "legacybank"))
    events: list[BankJobEvent] = []
    async with bank_queue(settings, events) as queue:
        job = await queue.submit(BANK_REFRESH, {"customer": "cust-1"}, dedupe_key="x")
        async with asyncio.timeout(60):
            done = await queue.wait(job.id)
    assert done.state is JobState.SUCCEEDED, done.error
    assert done.result is not None and done.result["ok"] is True
    assert done.progress["accesses_done"] == 3
    assert done.progress["accounts"] == sum(
        e.event.count for e in events if e.event.kind is EventKind.ACCOUNTS
    )

    names = [e.name for e in events]
    assert names[0] == "bank.refresh_started" and names[-1] == "bank.all_updated"
    assert names.count("bank.access_finished") == 3
    assert {(e.job.id, e.customer) for e in events} == {(job.id, "cust-1")}
    assert "customer_id" not in events[0].data() and events[0].data()["launch_id"]

    [report] = refresh_reports(done)
    assert report.ok and report.external_id == "cust-1"
    assert report.log_file is not None and report.log_file.exists()
    assert {a.bank for a in report.accesses} == {"formbank", "apibank", "legacybank"}
    assert {a.code for a in report.accesses} == {ResultCode.SUCCESS}
    assert sum(a.movements for a in report.accesses) == done.progress["movements"] > 0
    assert report.balances_seconds is not None


async def test_jobs_at_once_share_the_launcher_and_its_limits(
    settings: Settings, sandbox: Sandbox
) -> None:
    """One access at a time in all (overall=1): two customers' refreshes, as two jobs run at
    once, scrape one after the other, as the launcher's refresh_many would."""
    settings = settings.model_copy(update={"overall": 1})
    await add_customers(sandbox, settings.db_url, [1, 2], ("apibank",))
    sandbox.sites["apibank"].guard.latency_ms = (20.0, 40.0)
    events: list[BankJobEvent] = []
    async with bank_queue(settings, events, concurrency=2) as queue:
        jobs = [
            await queue.submit(BANK_REFRESH, {"customer": c}, dedupe_key=refresh_key(c))
            for c in ("cust-1", "cust-2")
        ]
        async with asyncio.timeout(60):
            done = [await queue.wait(job.id) for job in jobs]
    assert [job.state for job in done] == [JobState.SUCCEEDED] * 2
    spans = {}
    for e in events:
        if e.event.kind is EventKind.ACCOUNTS:
            spans.setdefault(e.customer, [e.event.at, e.event.at])
        elif e.event.kind is EventKind.ACCESS_FINISHED:
            spans[e.customer][1] = e.event.at
    (start_1, end_1), (start_2, end_2) = spans["cust-1"], spans["cust-2"]
    assert end_1 <= start_2 or end_2 <= start_1  # one after the other, never overlapping


async def test_one_job_refreshes_several_customers(settings: Settings, sandbox: Sandbox) -> None:
    await add_customers(sandbox, settings.db_url, [1, 2], ("apibank",))
    events: list[BankJobEvent] = []
    async with bank_queue(settings, events) as queue:
        job = await queue.submit(BANK_REFRESH, {"customers": ["cust-2", "cust-1"]})
        async with asyncio.timeout(60):
            done = await queue.wait(job.id)
    assert done.state is JobState.SUCCEEDED, done.error
    assert done.result is not None and done.result["ok"] is True
    reports = refresh_reports(done)
    assert [r.external_id for r in reports] == ["cust-2", "cust-1"]
    assert all(r.ok and len(r.accesses) == 1 for r in reports)
    assert {e.customer for e in events} == {"cust-1", "cust-2"}


async def test_a_refused_or_cancelled_refresh_reports_why(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = create_engine(settings.db_url)
    try:
        sessions = session_factory(engine)
        await add_customer(sessions, "busy", "Busy")
        async with sessions() as session, session.begin():  # a live launch of an older command
            await session.execute(
                update(Customer)
                .where(Customer.external_id == "busy")
                .values(scrape_state=ScrapeState.IN_PROGRESS, heartbeat_at=datetime.now(UTC))
            )
    finally:
        await engine.dispose()
    async with bank_queue(settings, []) as queue:
        job = await queue.submit(BANK_REFRESH, {"customer": "busy"})
        async with asyncio.timeout(30):
            failed = await queue.wait(job.id)
    assert failed.state is JobState.FAILED
    [refused] = refresh_reports(failed)
    assert not refused.ok
    assert refused.refused is not None
    assert refused.refused.startswith("customer 'busy' is already being refreshed")

    async with bank_queue(settings, [], run_jobs=False) as queue:
        job = await queue.submit(BANK_REFRESH, {"customer": "busy"})
        cancelled = await queue.cancel(job.id)
    assert refresh_reports(cancelled)[0].refused == "the refresh was cancelled"
    with pytest.raises(ValueError, match="has not ended"):
        refresh_reports(job)


# -- the watchdog -----------------------------------------------------------------------------


async def _stuck(
    sessions: async_sessionmaker[AsyncSession], name: str, *, beat: datetime
) -> tuple[int, int]:
    """A customer and its one access, both in progress, last stamped at ``beat``."""
    async with sessions() as session, session.begin():
        bank = await session.scalar(select(FinancialEntity).where(FinancialEntity.code == "x"))
        if bank is None:
            bank = FinancialEntity(code="x", name="X", country="ES")
            session.add(bank)
        customer = Customer(
            external_id=name,
            scrape_state=ScrapeState.IN_PROGRESS,
            scrape_started_at=beat,
            heartbeat_at=beat,
            heartbeat_seconds=1.0,
        )
        session.add(customer)
        await session.flush()
        access = Access(
            customer_id=customer.id,
            entity_id=bank.id,
            login=name,
            secret=b"t",
            scrape_state=ScrapeState.IN_PROGRESS,
            scrape_started_at=beat,
            heartbeat_at=beat,
            heartbeat_seconds=1.0,
        )
        session.add(access)
        await session.flush()
        return customer.id, access.id


async def test_the_watchdog_requeues_dead_jobs_and_frees_rows_no_live_job_holds(
    db_url: str,
) -> None:
    """``dead``: its job's process died (the job is put back, its rows reset). ``held``: its
    rows are stale, but a live job holds the customer (its launcher's beats failing, say):
    left alone. Another kind's dead job is put back too: the sweep is the queue's."""
    now = datetime.now(UTC)
    long_ago = now - timedelta(minutes=20)
    engine = create_engine(db_url)
    store = SqlJobStore(db_url, engine=engine)
    try:
        sessions = session_factory(engine)
        dead = await _stuck(sessions, "dead", beat=long_ago)
        held = await _stuck(sessions, "held", beat=long_ago)
        kinds = dict.fromkeys((BANK_REFRESH, "fetch"), _never_run)  # to submit them only
        async with EmbeddedJobQueue(store, kinds, run_jobs=False, heartbeat=5) as queue:
            dead_job = await queue.submit(
                BANK_REFRESH, {"customer": "dead"}, dedupe_key=refresh_key("dead")
            )
            other_job = await queue.submit("fetch", {"urls": "u.txt"})
            await store.claim("dead-host:1:x", long_ago, 10)
            live_job = await queue.submit(BANK_REFRESH, {"customer": "held"})
            await store.claim("live-host:2:y", now, 10, only=[live_job.id])

            with pytest.raises(ConfigError, match="limit must be positive"):
                await run_watchdog(queue, sessions, limit=timedelta(0))
            assert (await queue.get(dead_job.id)).state is JobState.RUNNING  # nothing changed

            found = await run_watchdog(queue, sessions, limit=timedelta(minutes=15))
            assert set(found.requeued) == {dead_job.id, other_job.id}
            assert found.failed == ()
            assert (found.customers, found.accesses) == ((dead[0],), (dead[1],))
            assert (await queue.get(live_job.id)).state is JobState.RUNNING

            again = await run_watchdog(queue, sessions, limit=timedelta(minutes=15))
            assert again == type(again)()  # idempotent: nothing left
        async with sessions() as session:
            states = dict((await session.execute(select(Access.id, Access.scrape_state))).all())
            codes = dict((await session.execute(select(Access.id, Access.result_code))).all())
        assert states == {dead[1]: ScrapeState.IDLE, held[1]: ScrapeState.IN_PROGRESS}
        assert codes[dead[1]] is ResultCode.TIMEOUT
    finally:
        await engine.dispose()


async def _never_run(context: JobContext) -> None:
    raise AssertionError("a queue that runs no job ran one")
