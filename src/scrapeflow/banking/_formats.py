"""Reading what banks print: Spanish amounts and dates, ISO values, IBANs with spaces.

>>> parse_es_amount("-1.234,56 €")
Decimal('-1234.56')
>>> parse_es_date("02/03/2026")
datetime.date(2026, 3, 2)
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal, InvalidOperation

from scrapeflow.errors import AccessFailed

__all__ = ["compact", "parse_amount", "parse_es_amount", "parse_es_date", "parse_iso_date"]

_ES_AMOUNT = re.compile(r"[+-]?\d{1,3}(?:\.\d{3})*(?:,\d+)?|[+-]?\d+(?:,\d+)?")
_SITE_CHANGED = "site_changed"


def parse_es_amount(text: str) -> Decimal:
    """``"1.234,56 €"``, ``"-76,65"``, ``"1.762,83 EUR"`` as a ``Decimal``.

    Anything else raises :class:`~scrapeflow.errors.AccessFailed` with the site-changed code:
    a bank that prints amounts differently has changed its pages.
    """
    cleaned = text.replace("\xa0", " ").strip()
    for symbol in ("€", "EUR", "USD", "GBP", "$", "£"):
        cleaned = cleaned.replace(symbol, "")
    cleaned = cleaned.replace(" ", "")
    if cleaned.startswith("−"):  # a typographic minus
        cleaned = "-" + cleaned[1:]
    if not _ES_AMOUNT.fullmatch(cleaned):
        raise AccessFailed(_SITE_CHANGED, f"not a Spanish amount: {text[:40]!r}")
    return Decimal(cleaned.replace(".", "").replace(",", "."))


def parse_amount(text: str) -> Decimal:
    """A machine decimal string (``"-12.34"``) as a ``Decimal``; site-changed otherwise."""
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation:
        raise AccessFailed(_SITE_CHANGED, f"not a decimal amount: {str(text)[:40]!r}") from None
    if not value.is_finite():
        raise AccessFailed(_SITE_CHANGED, f"not a decimal amount: {str(text)[:40]!r}")
    return value


def parse_es_date(text: str) -> date:
    """``"dd/mm/aaaa"`` as a date; site-changed otherwise."""
    try:
        return datetime.strptime(text.strip(), "%d/%m/%Y").date()
    except ValueError:
        raise AccessFailed(_SITE_CHANGED, f"not a dd/mm/aaaa date: {text[:40]!r}") from None


def parse_iso_date(text: str) -> date:
    """``"2026-03-02"`` as a date; site-changed otherwise."""
    try:
        return date.fromisoformat(str(text).strip()[:10])
    except ValueError:
        raise AccessFailed(_SITE_CHANGED, f"not an ISO date: {str(text)[:40]!r}") from None


def compact(text: str) -> str:
    """Whitespace (non-breaking spaces too) removed: ``"ES12 3456 …"`` → ``"ES123456…"``."""
    return "".join(text.split())
