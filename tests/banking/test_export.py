"""Exports a user's tools read: OFX that a real OFX parser (ofxtools) accepts, CSV and JSON
with exact decimal text."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime
from decimal import Decimal

from ofxtools.Parser import OFXTree

from scrapeflow.banking import AccountType, to_csv, to_json, to_ofx
from scrapeflow.banking._reads import AccountView, MovementView

NOW = datetime(2026, 3, 2, 9, tzinfo=UTC)
CHECKING = AccountView(
    access_id=1,
    bank="legacybank",
    bank_ref="2-1",
    iban="ES4920381234560000020149",
    number="20381234560000020149",
    alias="Cuenta",
    type=AccountType.CHECKING,
    currency="EUR",
    balance=Decimal("1234.56"),
    updated_at=NOW,
)
CARD = AccountView(
    access_id=1,
    bank="legacybank",
    bank_ref="2-3",
    iban=None,
    number="4548 **** **** 0149",
    alias="Tarjeta",
    type=AccountType.CARD,
    currency="EUR",
    balance=Decimal("-80.10"),
    updated_at=NOW,
)


def movement(account: AccountView, ref: str, amount: str, *, pending: bool = False):
    return MovementView(
        bank=account.bank,
        account_ref=account.bank_ref,
        account=account.iban or account.number,
        currency="EUR",
        key=f"ref:{ref}",
        operation_date=date(2026, 3, 1),
        value_date=date(2026, 3, 2),
        amount=Decimal(amount),
        description=f"MOV {ref}",
        pending=pending,
        balance_after=None,
    )


MOVES = [
    movement(CHECKING, "A1", "-12.34"),
    movement(CHECKING, "A2", "1500.00"),
    movement(CHECKING, "A3", "-9.99", pending=True),
    movement(CARD, "C1", "-80.10"),
]


def test_ofx_is_accepted_by_an_ofx_parser_and_leaves_pending_out() -> None:
    tree = OFXTree()
    tree.parse(io.BytesIO(to_ofx([CHECKING, CARD], MOVES).encode()))
    ofx = tree.convert()
    by_account = {s.account.acctid: s for s in ofx.statements}
    bank = by_account["20381234560000020149"]
    assert bank.account.bankid == "2038" and bank.account.accttype == "CHECKING"
    assert sorted(t.trnamt for t in bank.transactions) == [Decimal("-12.34"), Decimal("1500.00")]
    assert {t.fitid for t in bank.transactions} == {"ref:A1", "ref:A2"}
    assert bank.balance.balamt == Decimal("1234.56")
    card = by_account["4548********0149"]
    assert [t.trnamt for t in card.transactions] == [Decimal("-80.10")]


def test_ofx_without_cards_has_no_empty_card_section() -> None:
    text = to_ofx([CHECKING], MOVES[:2])
    assert "CREDITCARDMSGSRSV1" not in text
    tree = OFXTree()
    tree.parse(io.BytesIO(text.encode()))
    assert len(tree.convert().statements) == 1


def test_csv_and_json_keep_exact_amounts_and_pending_flags() -> None:
    rows = list(csv.DictReader(io.StringIO(to_csv(MOVES, movements=True))))
    assert [(r["key"], r["amount"], r["pending"]) for r in rows] == [
        ("ref:A1", "-12.34", "False"),
        ("ref:A2", "1500.00", "False"),
        ("ref:A3", "-9.99", "True"),
        ("ref:C1", "-80.10", "False"),
    ]
    accounts = json.loads(to_json([CHECKING, CARD]))
    assert [(a["bank_ref"], a["balance"], a["type"]) for a in accounts] == [
        ("2-1", "1234.56", "checking"),
        ("2-3", "-80.10", "card"),
    ]
