"""One scrape without a database: a scraper run for one login, what it read kept in memory.

:func:`scrape_offline` is what ``scrapeflow bank try`` and ``bank record`` run against a live
bank, and what a replayed test runs against a recording: the scraper's own steps as the
launcher runs them (log in, contracts, accounts and movements at once), its batches kept by a
:class:`MemoryWriter` instead of written, how it ended as the launcher would store it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from scrapeflow.banking._models import AccountRecord, MovementRecord
from scrapeflow.banking._registry import get_scraper
from scrapeflow.banking._results import ResultCode
from scrapeflow.banking._scraper import (
    AccessSink,
    BasicScraper,
    Credential,
    IncrementalPolicy,
    ScrapeContext,
    result_for,
)
from scrapeflow.banking._vault import CredentialVault
from scrapeflow.banking._writequeue import WriteQueue
from scrapeflow.banking._writer import SyncWindow
from scrapeflow.errors import AccessFailed
from scrapeflow.http import HttpClient, HttpConfig

__all__ = ["MemoryWriter", "OfflineScrape", "scrape_offline"]

_ACCESS_ID = 1


class MemoryWriter:
    """A :class:`~scrapeflow.banking.Writer` that keeps the batches: accounts by ``bank_ref``,
    movements by account and key (a movement read twice is kept once, as stored rows are)."""

    def __init__(self) -> None:
        self.accounts: dict[str, AccountRecord] = {}
        self.movements: dict[str, dict[str, MovementRecord]] = {}
        self.batches = 0

    async def write_accounts(self, access_id: int, accounts: Sequence[AccountRecord]) -> None:
        self.batches += 1
        for account in accounts:
            self.accounts[account.bank_ref] = account

    async def write_movements(
        self, access_id: int, account_ref: str, movements: Sequence[MovementRecord]
    ) -> None:
        self.batches += 1
        kept = self.movements.setdefault(account_ref, {})
        for movement in movements:
            kept[movement.key] = movement

    async def sync_window(self, access_id: int, account_ref: str) -> SyncWindow:
        return SyncWindow()  # nothing stored: every account reads its first window


@dataclass
class OfflineScrape:
    """How one offline scrape ended and what it read."""

    bank: str
    result: ResultCode
    detail: str
    accounts: list[AccountRecord] = field(default_factory=list)
    """In ``bank_ref`` order."""
    movements: dict[str, list[MovementRecord]] = field(default_factory=dict)
    """By account ``bank_ref``, each in (operation date, key) order."""
    state: dict[str, Any] = field(default_factory=dict)
    """The session state the scraper left (what the launcher would keep, sealed)."""
    error: BaseException | None = None
    """What the scrape raised, when it did not succeed."""
    today: date | None = None

    @property
    def ok(self) -> bool:
        return self.result is ResultCode.SUCCESS


async def scrape_offline(
    bank: str | type[BasicScraper],
    *,
    login: str,
    password: str,
    base_url: str | None = None,
    otp: str | None = None,
    today: date | None = None,
    state: dict[str, Any] | None = None,
    http: HttpClient | None = None,
    policy: IncrementalPolicy | None = None,
    time_limit: float = 300.0,
) -> OfflineScrape:
    """Run ``bank``'s scraper (its code, or its class) once for ``login`` and keep what it
    read; nothing is written anywhere. ``base_url``: the bank's site (default: the scraper's
    ``default_url``); ``http``: an open client to use (one is made otherwise);
    ``time_limit``: seconds for the whole scrape (then ``timeout``, as the launcher)."""
    scraper_cls = get_scraper(bank) if isinstance(bank, str) else bank
    url = base_url or scraper_cls.default_url
    if not url:
        raise ValueError(f"no URL for bank {scraper_cls.bank!r}: give base_url")
    vault = CredentialVault([CredentialVault.generate_key()])
    writer = MemoryWriter()
    kept = dict(state or {})
    day = today or date.today()
    outcome = OfflineScrape(scraper_cls.bank, ResultCode.UNKNOWN, "", today=day)
    async with contextlib.AsyncExitStack() as stack:
        queue = await stack.enter_async_context(WriteQueue(writers=1))
        client = http
        if client is None:
            client = await stack.enter_async_context(HttpClient(HttpConfig()))
        context = ScrapeContext(
            access_id=_ACCESS_ID,
            login=login,
            credential=Credential(vault, vault.encrypt(password)),
            base_url=url,
            http=client,
            sink=AccessSink(writer, queue, _ACCESS_ID),
            today=day,
            policy=policy or IncrementalPolicy(),
            state=kept,
            otp=otp,
        )
        try:
            async with asyncio.timeout(time_limit):
                await scraper_cls(context).main()
            short = context.sink.shortfall()
            if short is not None:  # as the launcher ends it
                raise AccessFailed(ResultCode.SITE_CHANGED, short)
            outcome.result = ResultCode.SUCCESS
        except Exception as exc:
            outcome.result, outcome.detail = result_for(exc)
            outcome.error = exc
    outcome.accounts = [writer.accounts[ref] for ref in sorted(writer.accounts)]
    outcome.movements = {
        ref: sorted(found.values(), key=lambda m: (m.operation_date, m.key))
        for ref, found in sorted(writer.movements.items())
    }
    outcome.state = kept
    return outcome
