"""The launcher against the sandbox's three banks: exact data, incremental runs, result codes,
limits, events, the launch log, and that no password is written anywhere."""

from __future__ import annotations

import asyncio
from datetime import date, timedelta
from pathlib import Path

import pytest
import yarl
from sqlalchemy import select, text

from scrapeflow.banking import (
    Access,
    CredentialVault,
    Customer,
    EventKind,
    Launcher,
    LaunchEvent,
    LaunchLimits,
    ResultCode,
    ScrapeState,
    accesses_of,
    add_access,
    add_customer,
    migrate,
    register,
)
from scrapeflow.banking.scrapers.apibank import ApiBankScraper
from scrapeflow.banking.scrapers.formbank import FormBankScraper
from scrapeflow.db import create_engine, session_factory
from scrapeflow.errors import ConfigError, InputError, RefreshInProgress, VaultError
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.sandbox import Sandbox

from . import _harness as h

BANKS = ("formbank", "apibank", "legacybank")


async def _customer(db_url: str, sandbox: Sandbox, n: int, banks=BANKS) -> dict[str, dict]:
    """Customer ``cust-n`` with an access at each bank; {bank: {access_id, username, password}}."""
    engine = create_engine(db_url)
    sessions = session_factory(engine)
    try:
        await add_customer(sessions, f"cust-{n}", f"Customer {n}")
        found = {}
        for bank in banks:
            cred = await h.credentials(sandbox, bank, n)
            access_id = await add_access(
                sessions, h.VAULT, f"cust-{n}", bank, cred["username"], cred["password"]
            )
            found[bank] = {**cred, "access_id": access_id}
        return found
    finally:
        await engine.dispose()


def _launcher(db_url: str, sandbox: Sandbox, tmp_path: Path, **kwargs) -> Launcher:
    kwargs.setdefault("http", None)
    kwargs.setdefault("vault", h.VAULT)
    kwargs.setdefault("bank_urls", sandbox.urls)
    return Launcher(
        db_url,
        today=lambda: sandbox.clock.now().date(),
        log_dir=tmp_path / "logs",
        **kwargs,
    )


class Seen:
    """An ``on_event`` that lets a test wait for an event instead of sleeping a guess."""

    def __init__(self) -> None:
        self.events: list[LaunchEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: LaunchEvent) -> None:
        self.events.append(event)
        self._changed.set()

    async def wait(self, kind: EventKind, **match: object) -> None:
        while not any(
            e.kind is kind and all(getattr(e, k) == v for k, v in match.items())
            for e in self.events
        ):
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), timeout=30)


async def _assert_exact(db_url, sandbox, accesses, since: date) -> int:
    compared = 0
    for bank, info in accesses.items():
        accounts, movements = await h.stored(db_url, info["access_id"])
        expected = await h.truth(sandbox, bank, info["username"], since=since)
        compared += h.assert_exact(accounts, movements, expected, since=since)
    return compared


async def test_refresh_stores_every_bank_exactly_and_marks_the_customer(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 1)
    events: list[LaunchEvent] = []
    async with _launcher(db_url, sandbox, tmp_path, on_event=events.append) as launcher:
        report = await launcher.refresh("cust-1")

    assert [a.code for a in report.accesses] == [ResultCode.SUCCESS] * 3, report
    since = sandbox.clock.now().date() - timedelta(days=14)
    assert await _assert_exact(db_url, sandbox, accesses, since) > 0
    assert all(a.accounts > 0 and a.balances_seconds is not None for a in report.accesses)

    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as session:
            customer = await session.scalar(select(Customer))
            rows = (await session.scalars(select(Access).order_by(Access.id))).all()
    finally:
        await engine.dispose()
    assert customer.scrape_state is ScrapeState.ALL_UPDATED
    assert customer.scrape_finished_at is not None
    assert [(r.result_code, r.scrape_state) for r in rows] == [
        (ResultCode.SUCCESS, ScrapeState.IDLE)
    ] * 3
    assert [r.accounts_count for r in rows] == [a.accounts for a in report.accesses]

    # events: started first, finished last; each access's batches before its own end
    kinds = [e.kind for e in events]
    assert kinds[0] is EventKind.LAUNCH_STARTED and kinds[-1] is EventKind.LAUNCH_FINISHED
    for access in report.accesses:
        own = [e.kind for e in events if e.access_id == access.access_id]
        assert own[0] is EventKind.ACCOUNTS and own[-1] is EventKind.ACCESS_FINISHED
        assert (
            sum(
                e.count
                for e in events
                if e.access_id == access.access_id and e.kind is EventKind.MOVEMENTS
            )
            == access.movements
        )

    # one log file, named after the customer and the launch
    logs = list((tmp_path / "logs").iterdir())
    assert [p.name for p in logs] == [report.log_file.name]
    assert "customer-cust-1" in logs[0].name and report.launch_id in logs[0].name
    log_text = logs[0].read_text()
    assert '"launch finished"' in log_text and '"access finished"' in log_text


async def test_five_incremental_runs_with_the_clock_moving(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 3)
    first_day = sandbox.clock.now().date() - timedelta(days=14)
    movements_read = []
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        for run in range(5):
            if run:
                sandbox.clock.advance(timedelta(days=1, hours=5))
            report = await launcher.refresh("cust-3")
            assert report.ok, report
            movements_read.append(sum(a.movements for a in report.accesses))
            # exact after every run: nothing missing, nothing doubled, pending ones posted
            assert await _assert_exact(db_url, sandbox, accesses, first_day) > 0
    # later runs read only their window, not the whole history again
    assert max(movements_read[1:]) < movements_read[0]


async def test_a_second_refresh_of_the_same_customer_is_refused_while_one_runs(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    await _customer(db_url, sandbox, 5, banks=("formbank",))
    sandbox.sites["formbank"].guard.latency_ms = (50.0, 50.0)  # the first runs a while
    seen = Seen()
    async with _launcher(db_url, sandbox, tmp_path, on_event=seen) as launcher:
        first = asyncio.create_task(launcher.refresh("cust-5"))
        await seen.wait(EventKind.LAUNCH_STARTED)
        with pytest.raises(RefreshInProgress, match="cust-5"):
            await launcher.refresh("cust-5")
        assert (await first).ok


async def test_per_bank_limit_serialises_accesses_at_one_bank(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    await _customer(db_url, sandbox, 1, banks=("apibank",))
    await _customer(db_url, sandbox, 3, banks=("apibank",))
    events: list[LaunchEvent] = []
    limits = LaunchLimits(per_bank=1)
    async with _launcher(db_url, sandbox, tmp_path, limits=limits, on_event=events.append) as la:
        reports = await la.refresh_many(["cust-1", "cust-3"])
    assert all(r.ok for r in reports)
    batches = (EventKind.ACCOUNTS, EventKind.MOVEMENTS)
    order = [e.access_id for e in events if e.kind in batches]
    # With one slot at the bank, one access is scraped after the other: each one's batches
    # land together, in the order read. (Its ACCESS_FINISHED may come after the next access's
    # first batch: the slot is the bank's session, given back when the scrape ends, while
    # the access finishes once its writes have landed.)
    first = order[0]
    assert len(set(order)) == 2
    assert order == sorted(order, key=lambda access: access != first)


async def test_two_factor_ends_the_run_then_the_code_resumes_it(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 2, banks=("legacybank",))
    access_id = accesses["legacybank"]["access_id"]
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        report = await launcher.refresh("cust-2")
        assert report.accesses[0].code is ResultCode.TWO_FACTOR_REQUIRED
        code = (
            await h.admin(
                sandbox, "legacybank", f"/__admin/otp/{accesses['legacybank']['username']}"
            )
        )["code"]
        resumed = await launcher.scrape_access(access_id, otp=code)
        assert resumed.code is ResultCode.SUCCESS, resumed
        # the trusted device is remembered (encrypted): the next refresh needs no code
        again = await launcher.refresh("cust-2")
        assert again.ok, again
    since = sandbox.clock.now().date() - timedelta(days=14)
    assert await _assert_exact(db_url, sandbox, accesses, since) > 0


async def test_result_codes_from_real_bank_behaviour(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Wrong password, locked user, blocked IP, maintenance, layout change, time limit."""
    await migrate(db_url)
    engine = create_engine(db_url)
    sessions = session_factory(engine)
    try:
        await add_customer(sessions, "wrong")
        await add_access(sessions, h.VAULT, "wrong", "formbank", "00000001R", "not-the-password")
        await _customer(db_url, sandbox, 13, banks=("apibank",))  # n % 97 == 13: locked
    finally:
        await engine.dispose()
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        wrong = await launcher.refresh("wrong")
        locked = await launcher.refresh("cust-13")
    assert wrong.accesses[0].code is ResultCode.WRONG_CREDENTIALS
    assert locked.accesses[0].code is ResultCode.USER_LOCKED

    await _customer(db_url, sandbox, 1)
    expectations = [
        ("legacybank", "/__admin/settings", {"maintenance_rate": 1.0}, ResultCode.BANK_UNAVAILABLE),
        ("formbank", "/__admin/settings", {"layout": 2}, ResultCode.SITE_CHANGED),
        ("apibank", "/__admin/block", {"ip": "127.0.0.1", "seconds": 60}, ResultCode.BLOCKED),
    ]
    for bank, path, body, _ in expectations:
        await h.admin(sandbox, bank, path, body)
    async with (
        h.fast_http() as http,
        _launcher(db_url, sandbox, tmp_path, http=http) as launcher,
    ):
        report = await launcher.refresh("cust-1")
    got = {a.bank: a.code for a in report.accesses}
    assert got == {bank: code for bank, _, _, code in expectations}
    assert all(a.detail for a in report.accesses)

    # time limit: a slow bank and a short limit
    sandbox.sites["apibank"].guard.latency_ms = (400, 400)
    await h.admin_delete(sandbox, "apibank", "/__admin/block")
    async with _launcher(
        db_url, sandbox, tmp_path, limits=LaunchLimits(access_timeout=0.5)
    ) as launcher:
        slow = await launcher.scrape_access(
            next(a.access_id for a in report.accesses if a.bank == "apibank")
        )
    assert slow.code is ResultCode.TIMEOUT


async def test_a_broken_scraper_ends_unknown_and_the_others_finish(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    class BrokenScraper(FormBankScraper):
        """A third-party scraper with a bug: it trips over its own data."""

        bank = "brokenbank"

        async def contracts(self):
            raise KeyError("contrato")

    register(BrokenScraper)
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 1, banks=("apibank",))
    engine = create_engine(db_url)
    try:
        cred = await h.credentials(sandbox, "formbank", 1)
        await add_access(
            session_factory(engine),
            h.VAULT,
            "cust-1",
            "brokenbank",
            cred["username"],
            cred["password"],
        )
    finally:
        await engine.dispose()
    urls = {**sandbox.urls, "brokenbank": sandbox.urls["formbank"]}
    async with Launcher(
        db_url,
        vault=h.VAULT,
        bank_urls=urls,
        today=lambda: sandbox.clock.now().date(),
        log_dir=tmp_path / "logs",
    ) as launcher:
        report = await launcher.refresh("cust-1")
    codes = {a.bank: a for a in report.accesses}
    assert codes["apibank"].code is ResultCode.SUCCESS
    assert codes["brokenbank"].code is ResultCode.UNKNOWN
    assert "KeyError" in codes["brokenbank"].detail
    assert "Traceback" in report.log_file.read_text()  # the operator gets the traceback
    assert accesses


async def test_no_password_in_logs_state_rows_or_status(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 2)  # legacy 2FA: state is saved too
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        await launcher.refresh("cust-2")
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            dump = repr((await conn.execute(text("SELECT * FROM accesses"))).all())
        views = await accesses_of(session_factory(engine), "cust-2")
    finally:
        await engine.dispose()
    haystack = dump + repr(views) + "".join(p.read_text() for p in (tmp_path / "logs").iterdir())
    for info in accesses.values():
        assert info["password"] not in haystack
    assert "two_factor_required" in haystack  # the state rows were really read


async def test_refresh_many_checks_every_customer_before_touching_any(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    await _customer(db_url, sandbox, 1, banks=("apibank",))
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        with pytest.raises(InputError, match="nosuch"):
            await launcher.refresh_many(["cust-1", "nosuch"])
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as session:
            access = await session.scalar(select(Access))
            customer = await session.scalar(select(Customer))
    finally:
        await engine.dispose()
    assert (access.scrape_state, access.result_code) == (ScrapeState.IDLE, None)
    assert customer.scrape_state is ScrapeState.IDLE


async def test_a_customer_already_refreshing_is_refused_the_others_run(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    await _customer(db_url, sandbox, 1, banks=("formbank",))
    await _customer(db_url, sandbox, 3, banks=("apibank",))
    sandbox.sites["formbank"].guard.latency_ms = (50.0, 50.0)
    seen = Seen()
    async with _launcher(db_url, sandbox, tmp_path, on_event=seen) as launcher:
        first = asyncio.create_task(launcher.refresh("cust-1"))
        await seen.wait(EventKind.LAUNCH_STARTED)
        reports = await launcher.refresh_many(["cust-1", "cust-3"])
        assert (await first).ok
    assert reports[0].refused and "already being refreshed" in reports[0].refused
    assert not reports[0].ok and reports[0].accesses == []
    assert reports[1].ok
    # one log per launch that ran: the refused one left none
    assert sorted(p.name.split("_")[1] for p in (tmp_path / "logs").iterdir()) == [
        "customer-cust-1",
        "customer-cust-3",
    ]


async def test_a_busy_bank_does_not_hold_slots_other_banks_need(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    """per_bank=1, overall=2: two form-bank accesses wait for their bank without taking the
    second overall slot, so the API bank's access runs beside the first form-bank one."""
    await migrate(db_url)
    for n in (1, 3):
        await _customer(db_url, sandbox, n, banks=("formbank",))
    await _customer(db_url, sandbox, 5, banks=("formbank", "apibank"))
    sandbox.sites["formbank"].guard.latency_ms = (40.0, 40.0)
    events: list[LaunchEvent] = []
    limits = LaunchLimits(per_bank=1, overall=2)
    async with _launcher(db_url, sandbox, tmp_path, limits=limits, on_event=events.append) as la:
        reports = await la.refresh_many(["cust-1", "cust-3", "cust-5"])
    assert all(r.ok for r in reports)
    seen = [(e.kind, e.bank) for e in events if e.bank]
    api_start = seen.index((EventKind.ACCOUNTS, "apibank"))
    first_form_end = seen.index((EventKind.ACCESS_FINISHED, "formbank"))
    assert api_start < first_form_end


async def test_stopping_a_launch_keeps_the_state_of_accesses_that_never_ran(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 2, banks=("apibank", "legacybank"))
    legacy_id = accesses["legacybank"]["access_id"]
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        await launcher.refresh("cust-2")  # legacy: 2FA, its pending login is saved
        engine = create_engine(db_url)
        try:
            async with session_factory(engine)() as session:
                saved = (await session.get(Access, legacy_id)).session_state
            assert saved
            sandbox.sites["apibank"].guard.latency_ms = (300.0, 300.0)
            slow = LaunchLimits(overall=1)  # the legacy access waits behind the slow one
            seen = Seen()
            async with _launcher(db_url, sandbox, tmp_path, limits=slow, on_event=seen) as stopping:
                task = asyncio.create_task(stopping.refresh("cust-2"))
                await seen.wait(EventKind.LAUNCH_STARTED)
                await asyncio.sleep(0.3)  # the API bank's access is at its first requests
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            async with session_factory(engine)() as session:
                after = await session.get(Access, legacy_id)
                assert h.VAULT.decrypt(after.session_state) == h.VAULT.decrypt(saved)
                assert after.scrape_state is ScrapeState.IDLE
        finally:
            await engine.dispose()


async def test_an_access_being_resumed_is_not_scraped_twice(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    await migrate(db_url)
    accesses = await _customer(db_url, sandbox, 1, banks=("formbank", "apibank"))
    form_id = accesses["formbank"]["access_id"]
    sandbox.sites["formbank"].guard.latency_ms = (50.0, 50.0)
    seen = Seen()
    async with _launcher(db_url, sandbox, tmp_path, on_event=seen) as launcher:
        alone = asyncio.create_task(launcher.scrape_access(form_id))
        await seen.wait(EventKind.ACCOUNTS, access_id=form_id)  # claimed, mid-scrape
        report = await launcher.refresh("cust-1")
        assert (await alone).code is ResultCode.SUCCESS
    assert [a.bank for a in report.accesses] == ["apibank"]
    assert "access skipped" in report.log_file.read_text()


async def _states(db_url: str) -> list[tuple]:
    """Every customer's and access's state, result, counts and times, as stored."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as connection:
            customers = (
                await connection.execute(
                    select(Customer.id, Customer.scrape_state, Customer.scrape_finished_at)
                )
            ).all()
            accesses = (
                await connection.execute(
                    select(
                        Access.id,
                        Access.scrape_state,
                        Access.result_code,
                        Access.accounts_count,
                        Access.movements_count,
                        Access.scrape_finished_at,
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    return sorted(customers) + sorted(accesses)


async def test_a_launch_its_configuration_cannot_do_is_refused_before_any_claim(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    """No URL for a bank, a vault without the key: refused naming them, for every customer
    before any starts; the last success, its counts and times stay."""
    await migrate(db_url)
    first = await _customer(db_url, sandbox, 1, banks=("apibank",))
    third = await _customer(db_url, sandbox, 3, banks=("formbank",))
    async with _launcher(db_url, sandbox, tmp_path) as launcher:
        assert all(r.ok for r in await launcher.refresh_many(["cust-1", "cust-3"]))
    stored = await _states(db_url)
    logs = sorted((tmp_path / "logs").iterdir())

    no_formbank = {k: v for k, v in sandbox.urls.items() if k != "formbank"}
    async with _launcher(db_url, sandbox, tmp_path, bank_urls=no_formbank) as launcher:
        with pytest.raises(ConfigError, match=r"no URL for bank 'formbank' \(access \d+ of "):
            await launcher.refresh_many(["cust-1", "cust-3"])
        with pytest.raises(ConfigError, match="no URL for bank 'formbank'"):
            await launcher.scrape_access(third["formbank"]["access_id"])
    other_key = CredentialVault([CredentialVault.generate_key()])
    async with _launcher(db_url, sandbox, tmp_path, vault=other_key) as launcher:
        with pytest.raises(VaultError, match="SCRAPEFLOW_VAULT_KEYS") as info:
            await launcher.refresh("cust-1")
        with pytest.raises(VaultError):
            await launcher.scrape_access(first["apibank"]["access_id"], otp="123456")
    assert first["apibank"]["password"] not in str(info.value)
    assert await _states(db_url) == stored
    assert sorted((tmp_path / "logs").iterdir()) == logs  # no launch began


async def test_a_scrapers_default_url_serves_when_none_is_configured(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    class HostedApiBank(ApiBankScraper):
        """A bank whose scraper knows its own site."""

        bank = "hostedbank"
        default_url = sandbox.urls["apibank"]

    register(HostedApiBank)
    await migrate(db_url)
    cred = await h.credentials(sandbox, "apibank", 2)
    engine = create_engine(db_url)
    try:
        sessions = session_factory(engine)
        await add_customer(sessions, "cust-2")
        await add_access(
            sessions, h.VAULT, "cust-2", "hostedbank", cred["username"], cred["password"]
        )
    finally:
        await engine.dispose()
    async with _launcher(db_url, sandbox, tmp_path, bank_urls={}) as launcher:
        report = await launcher.refresh("cust-2")
    assert report.ok and report.accesses[0].accounts > 0


async def test_a_bank_that_declares_its_rate_limit_is_paced_at_it_not_refused(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    """The API bank's scraper declares the bank's limit (10 requests a second per client IP,
    bursts of 20): eight of its accesses at once, about 60 requests, three times the burst, go
    at that pace and none is refused with a 429 (each of which the bank makes wait a second)."""
    await migrate(db_url)
    for n in range(1, 9):
        await _customer(db_url, sandbox, n, banks=("apibank",))
    api = yarl.URL(sandbox.urls["apibank"])
    async with HttpClient(HttpConfig(max_connections=400)) as http:
        async with _launcher(db_url, sandbox, tmp_path, http=http) as launcher:
            reports = await launcher.refresh_many([f"cust-{n}" for n in range(1, 9)])
        traffic = http.stats.hosts[f"{api.host}:{api.port}"]
    assert all(report.ok for report in reports)
    assert traffic.requests > 3 * 20  # past the bank's burst: its limit was met
    assert (traffic.throttled, traffic.ok) == (0, traffic.requests)
