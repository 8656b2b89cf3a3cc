"""The sandbox banks: four banks that differ the way real banks do.

* :class:`FormBank` — HTML forms, CSRF, a password encrypted by the bank's own JavaScript,
  XLSX exports, Spanish formats.
* :class:`ApiBank` — a JSON API with expiring tokens, cursor pagination and a rate limit.
* :class:`LegacyBank` — server-side sessions, a one-time code (2FA), paginated HTML tables,
  maintenance pages and sessions that expire mid-scrape.
* :class:`NeoBank` — today's kind: OAuth with PKCE and consent, a push approval, consent that
  expires after 90 days, card authorisations that post with another amount, ETags.

Each module's docstring documents its routes. All share :class:`BankSettings` (switches the
admin API changes at run time) and the ground truth of ``scrapeflow.sandbox._world``.
"""

from scrapeflow.sandbox.banks._apibank import ApiBank
from scrapeflow.sandbox.banks._base import DEFAULT_BANK_LATENCY_MS, BankSettings, BankSite
from scrapeflow.sandbox.banks._formbank import FormBank
from scrapeflow.sandbox.banks._legacybank import LegacyBank
from scrapeflow.sandbox.banks._neobank import NeoBank

__all__ = [
    "DEFAULT_BANK_LATENCY_MS",
    "ApiBank",
    "BankSettings",
    "BankSite",
    "FormBank",
    "LegacyBank",
    "NeoBank",
]
