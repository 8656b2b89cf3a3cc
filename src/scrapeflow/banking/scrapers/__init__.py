"""The scrapers of the sandbox's three banks, registered as ``scrapeflow.banks`` entry points.

Each shows one usual shape of a bank: ``formbank`` an HTML bank whose login the bank's own
JavaScript encrypts (run on embedded V8) and whose movements come as XLSX exports; ``apibank``
a JSON API with tokens and cursor pagination; ``legacybank`` server sessions, paginated HTML
tables and one-time codes by SMS.
"""

from __future__ import annotations

from scrapeflow.banking.scrapers.apibank import ApiBankScraper
from scrapeflow.banking.scrapers.formbank import FormBankScraper
from scrapeflow.banking.scrapers.legacybank import LegacyBankScraper

__all__ = ["ApiBankScraper", "FormBankScraper", "LegacyBankScraper"]
