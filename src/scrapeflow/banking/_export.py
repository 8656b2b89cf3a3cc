"""Accounts and movements as CSV, JSON or OFX (what ``scrapeflow bank accounts/movements``
print with ``--format``). Amounts keep their exact decimal text; dates are ISO."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from xml.etree import ElementTree as ET

from scrapeflow.banking._models import AccountType
from scrapeflow.banking._reads import AccountView, MovementView

__all__ = ["ACCOUNT_COLUMNS", "MOVEMENT_COLUMNS", "to_csv", "to_json", "to_ofx"]

ACCOUNT_COLUMNS = (
    "access_id",
    "bank",
    "bank_ref",
    "iban",
    "number",
    "alias",
    "type",
    "currency",
    "balance",
    "updated_at",
)
MOVEMENT_COLUMNS = (
    "access_id",
    "bank",
    "account",
    "currency",
    "operation_date",
    "value_date",
    "amount",
    "description",
    "pending",
    "balance_after",
    "key",
)


def _cell(value: Any) -> Any:
    if isinstance(value, Decimal):
        return f"{value:.2f}"
    if isinstance(value, AccountType):
        return value.value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _row(item: AccountView | MovementView, columns: Sequence[str]) -> dict[str, Any]:
    return {c: _cell(getattr(item, c)) for c in columns}


def _columns(items: Sequence[AccountView] | Sequence[MovementView]) -> Sequence[str]:
    return ACCOUNT_COLUMNS if items and isinstance(items[0], AccountView) else MOVEMENT_COLUMNS


def to_csv(items: Sequence[AccountView] | Sequence[MovementView], *, movements: bool) -> str:
    columns = MOVEMENT_COLUMNS if movements else ACCOUNT_COLUMNS
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for item in items:
        writer.writerow(_row(item, columns))
    return out.getvalue()


def to_json(items: Sequence[AccountView] | Sequence[MovementView]) -> str:
    columns = _columns(items)
    return json.dumps([_row(item, columns) for item in items], ensure_ascii=False, indent=2)


_OFX_TYPES = {
    AccountType.CHECKING: "CHECKING",
    AccountType.SAVINGS: "SAVINGS",
    AccountType.LOAN: "CREDITLINE",
    AccountType.OTHER: "CHECKING",
}


def _ofx_date(value: Any) -> str:
    return (
        value.strftime("%Y%m%d")
        if not isinstance(value, datetime)
        else value.astimezone(UTC).strftime("%Y%m%d%H%M%S")
    )


def _sub(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    element = ET.SubElement(parent, tag)
    if text is not None:
        element.text = text
    return element


def _bank_id(account: AccountView) -> str:
    """OFX BANKID (at most 9): the bank code inside the IBAN, else the bank's code, cut."""
    if account.iban and len(account.iban) >= 8:
        return account.iban[4:8]
    return account.bank[:9]


def _account_id(account: AccountView) -> str:
    """OFX ACCTID (at most 22): the domestic number (BBAN), not the longer IBAN."""
    if account.iban:
        return (account.number or account.iban[4:])[:22]
    return (account.number or account.bank_ref).replace(" ", "")[:22]


def to_ofx(accounts: Sequence[AccountView], movements: Sequence[MovementView]) -> str:
    """An OFX 2.2 document: one statement per account (cards as credit-card statements).

    Pending movements are left out: they post later under the same FITID, which importers
    would not pick up as a change. Only booked movements are statements' transactions.
    """
    now = datetime.now(UTC)
    root = ET.Element("OFX")
    signon = _sub(_sub(root, "SIGNONMSGSRSV1"), "SONRS")
    status = _sub(signon, "STATUS")
    _sub(status, "CODE", "0")
    _sub(status, "SEVERITY", "INFO")
    _sub(signon, "DTSERVER", _ofx_date(now))
    _sub(signon, "LANGUAGE", "SPA")
    by_account: dict[tuple[str, str], list[MovementView]] = {}
    for movement in movements:
        if not movement.pending:
            by_account.setdefault((movement.bank, movement.account_ref), []).append(movement)
    message_sets: dict[bool, ET.Element] = {}
    for n, account in enumerate(accounts, start=1):
        card = account.type is AccountType.CARD
        if card not in message_sets:
            message_sets[card] = _sub(root, "CREDITCARDMSGSRSV1" if card else "BANKMSGSRSV1")
        wrapper = _sub(message_sets[card], "CCSTMTTRNRS" if card else "STMTTRNRS")
        _sub(wrapper, "TRNUID", str(n))
        wrapper_status = _sub(wrapper, "STATUS")
        _sub(wrapper_status, "CODE", "0")
        _sub(wrapper_status, "SEVERITY", "INFO")
        statement = _sub(wrapper, "CCSTMTRS" if card else "STMTRS")
        _sub(statement, "CURDEF", account.currency)
        if card:
            _sub(_sub(statement, "CCACCTFROM"), "ACCTID", _account_id(account))
        else:
            source = _sub(statement, "BANKACCTFROM")
            _sub(source, "BANKID", _bank_id(account))
            _sub(source, "ACCTID", _account_id(account))
            _sub(source, "ACCTTYPE", _OFX_TYPES[account.type])
        items = sorted(
            by_account.get((account.bank, account.bank_ref), []), key=lambda m: m.operation_date
        )
        transactions = _sub(statement, "BANKTRANLIST")
        _sub(transactions, "DTSTART", _ofx_date(items[0].operation_date if items else now))
        _sub(transactions, "DTEND", _ofx_date(items[-1].operation_date if items else now))
        for movement in items:
            entry = _sub(transactions, "STMTTRN")
            _sub(entry, "TRNTYPE", "CREDIT" if movement.amount > 0 else "DEBIT")
            _sub(entry, "DTPOSTED", _ofx_date(movement.value_date))
            _sub(entry, "DTUSER", _ofx_date(movement.operation_date))
            _sub(entry, "TRNAMT", f"{movement.amount:.2f}")
            _sub(entry, "FITID", movement.key[:255])
            _sub(entry, "NAME", movement.description[:32])
            _sub(entry, "MEMO", movement.description[:255])
        balance = _sub(statement, "LEDGERBAL")
        _sub(balance, "BALAMT", f"{account.balance:.2f}")
        _sub(balance, "DTASOF", _ofx_date(account.updated_at))
    ET.indent(root)
    header = (
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
        '<?OFX OFXHEADER="200" VERSION="220" SECURITY="NONE" OLDFILEUID="NONE" '
        'NEWFILEUID="NONE"?>\n'
    )
    return header + ET.tostring(root, encoding="unicode") + "\n"
