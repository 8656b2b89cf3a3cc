"""Each shipped scraper against a recording of a session at its sandbox bank (made with
``scrapeflow bank record``; the legacy bank's asks for a one-time code, the neobank's polls a push
and checks the OAuth state it gets back), compared with the
golden file beside it: offline, no bank, no database. The kit's example of a scraper's test
(docs/writing-a-bank.md)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from scrapeflow.banking import AccountRecord, MovementRecord
from scrapeflow.banking.scrapers.apibank import ApiBankScraper
from scrapeflow.banking.testing import replay
from scrapeflow.errors import GoldenMismatch

RECORDINGS = Path(__file__).parent / "recordings"


@pytest.mark.parametrize("bank", ["formbank", "apibank", "legacybank", "neobank"])
async def test_the_scraper_reads_its_recorded_session(bank: str) -> None:
    scrape = await replay(RECORDINGS / f"{bank}.har", golden=RECORDINGS / f"{bank}.json")
    assert scrape.ok
    assert scrape.accounts and any(scrape.movements.values())


async def test_a_scraper_that_reads_otherwise_fails_against_the_golden_file() -> None:
    """A change that flips the sign of card movements: caught offline, by name."""

    class Flipped(ApiBankScraper):
        async def movements(self, account: AccountRecord, since: date) -> list[MovementRecord]:
            read = await super().movements(account, since)
            return [replace(m, amount=-m.amount) for m in read]

    with pytest.raises(GoldenMismatch, match=r"\.amount: expected \"-?\d+\.\d\d\", read"):
        await replay(RECORDINGS / "apibank.har", bank=Flipped, golden=RECORDINGS / "apibank.json")
