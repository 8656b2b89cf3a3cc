"""What a scrape read against what the database holds of it, per access and per batch: a
shortfall (two accounts read with one bank_ref, a writer that drops rows) ends the access
``site_changed`` with the counts, where it used to end ``success`` with fewer rows stored."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from scrapeflow.banking import (
    AccountRecord,
    ContractInfo,
    Launcher,
    MovementRecord,
    ResultCode,
    SqlWriter,
    SyncWindow,
    accesses_of,
    add_access,
    add_customer,
    migrate,
    register,
)
from scrapeflow.banking.scrapers.apibank import ApiBankScraper
from scrapeflow.banking.testing import OfflineScrape, scrape_offline
from scrapeflow.db import create_engine, session_factory
from scrapeflow.sandbox import Sandbox

from . import _harness as h


class OneRefScraper(ApiBankScraper):
    """A scraper with a bug: it gives every account of the login one bank_ref."""

    bank = "onerefbank"

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        read = await super().accounts(contract)
        return [
            AccountRecord(**{**{f: getattr(a, f) for f in a.__slots__}, "bank_ref": "same"})
            for a in read
        ]

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        return []


class DroppingWriter:
    """A writer of one's own tables (the three methods of ``Writer``) that leaves out each
    batch's last movement, and says how many it stored."""

    def __init__(self, engine: object) -> None:
        self.tables = SqlWriter(engine)

    async def write_accounts(self, access_id: int, accounts: Sequence[AccountRecord]) -> None:
        await self.tables.write_accounts(access_id, accounts)

    async def write_movements(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord]
    ) -> int:
        return await self.tables.write_movements(access_id, account_ref, movements[:-1])

    async def sync_window(self, access_id: int, account_ref: str) -> SyncWindow:
        return await self.tables.sync_window(access_id, account_ref)


async def _refresh(db_url: str, sandbox: Sandbox, tmp_path: Path, bank: str, **kwargs) -> tuple:
    await migrate(db_url)
    engine = create_engine(db_url)
    sessions = session_factory(engine)
    try:
        await add_customer(sessions, "cust-1", "Customer 1")
        login = await h.credentials(sandbox, "apibank", 1)
        await add_access(sessions, h.VAULT, "cust-1", bank, login["username"], login["password"])
        async with Launcher(
            db_url,
            vault=h.VAULT,
            bank_urls={**sandbox.urls, bank: sandbox.urls["apibank"]},
            today=lambda: sandbox.clock.now().date(),
            log_dir=tmp_path / "logs",
            **kwargs,
        ) as launcher:
            report = await launcher.refresh("cust-1")
        return report, (await accesses_of(sessions, "cust-1"))[0]
    finally:
        await engine.dispose()


async def test_accounts_read_with_one_bank_ref_end_site_changed_with_the_counts(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    register(OneRefScraper)
    report, view = await _refresh(db_url, sandbox, tmp_path, "onerefbank")
    (access,) = report.accesses
    truth = await h.truth(
        sandbox, "apibank", (await h.credentials(sandbox, "apibank", 1))["username"]
    )
    read = len(truth["accounts"])
    assert read > 1
    assert access.code is ResultCode.SITE_CHANGED
    assert f"read {read} accounts, the database holds 1 of them" in access.detail
    assert (view.accounts, view.accounts_stored) == (read, 1)
    assert view.result is ResultCode.SITE_CHANGED
    # Per batch, in the launch log: each contract's batch read its accounts, stored at most 1.
    batches = [
        json.loads(line)
        for line in report.log_file.read_text().splitlines()
        if '"batch"' in line and '"accounts"' in line
    ]
    assert sum(b["count"] for b in batches) == read
    assert sum(b["stored"] for b in batches) == 1


async def test_a_writer_that_stores_fewer_movements_than_read_ends_site_changed(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    engine = create_engine(db_url)
    try:
        report, view = await _refresh(
            db_url, sandbox, tmp_path, "apibank", writer=DroppingWriter(engine)
        )
    finally:
        await engine.dispose()
    (access,) = report.accesses
    assert access.code is ResultCode.SITE_CHANGED
    assert view.movements_stored < view.movements
    assert f"read {view.movements} movements, the database holds {view.movements_stored}" in (
        access.detail
    )
    assert view.accounts_stored == view.accounts


async def test_a_scrape_whose_reads_all_land_shows_equal_counts(
    db_url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    report, view = await _refresh(db_url, sandbox, tmp_path, "apibank")
    assert report.accesses[0].code is ResultCode.SUCCESS
    assert view.accounts_stored == view.accounts > 0
    assert view.movements_stored == view.movements > 0


async def _offline(
    sandbox: Sandbox, scraper: type[ApiBankScraper], *, customer: int
) -> OfflineScrape:
    """The kit's offline scrape of apibank's ``customer`` by ``scraper``."""
    login = await h.credentials(sandbox, "apibank", customer)
    return await scrape_offline(
        scraper,
        login=login["username"],
        password=login["password"],
        base_url=sandbox.urls["apibank"],
        today=await h.sandbox_today(sandbox, "apibank"),
    )


async def test_the_offline_scrape_of_the_kit_catches_it_too(sandbox: Sandbox) -> None:
    scrape = await _offline(sandbox, OneRefScraper, customer=2)
    assert scrape.result is ResultCode.SITE_CHANGED
    assert "the database holds 1 of them" in scrape.detail


class JointAccountScraper(ApiBankScraper):
    """A bank that lists the login's accounts under a second contract too (a joint holder's
    view): the same accounts, read twice, are one row each, and that is not a shortfall."""

    bank = "jointbank"

    async def contracts(self) -> Sequence[ContractInfo]:
        found = list(await super().contracts())
        return found + [ContractInfo(bank_ref=f"{c.bank_ref}-joint", name=c.name) for c in found]

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        own = ContractInfo(bank_ref=contract.bank_ref.removesuffix("-joint"), name=contract.name)
        return await super().accounts(own)


async def test_one_account_listed_under_two_contracts_is_no_shortfall(sandbox: Sandbox) -> None:
    scrape = await _offline(sandbox, JointAccountScraper, customer=3)
    assert scrape.result is ResultCode.SUCCESS, scrape.detail
    assert scrape.accounts
