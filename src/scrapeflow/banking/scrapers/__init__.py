"""The scrapers of the sandbox's four banks, registered as ``scrapeflow.banks`` entry points.

Each shows one usual shape of a bank: ``formbank`` an HTML bank whose login the bank's own
JavaScript encrypts (run on embedded V8) and whose movements come as XLSX exports; ``apibank``
a JSON API with tokens and cursor pagination; ``legacybank`` server sessions, paginated HTML
tables and one-time codes by SMS; ``neobank`` today's kind: OAuth with PKCE, a push approval
on the phone, consent that expires, ETags.

Importing this package loads none of them (each pulls its own parsers): a class is loaded on
first use, as the registry does through the entry points.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapeflow.banking.scrapers.apibank import ApiBankScraper
    from scrapeflow.banking.scrapers.formbank import FormBankScraper
    from scrapeflow.banking.scrapers.legacybank import LegacyBankScraper
    from scrapeflow.banking.scrapers.neobank import NeoBankScraper

__all__ = ["ApiBankScraper", "FormBankScraper", "LegacyBankScraper", "NeoBankScraper"]

_MODULES = {
    "ApiBankScraper": "apibank",
    "FormBankScraper": "formbank",
    "LegacyBankScraper": "legacybank",
    "NeoBankScraper": "neobank",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
