from __future__ import annotations

from decimal import Decimal

import pytest

from scrapeflow.banking import (
    Account,
    AccountRecord,
    AccountType,
    InvalidAccount,
    ResultCode,
    validate_iban,
)
from scrapeflow.errors import InputError


def test_a_bad_iban_checksum_is_refused_with_a_clear_error():
    with pytest.raises(InvalidAccount, match=r"invalid IBAN 'ES9221000418450200051332'.*checksum"):
        AccountRecord("A", AccountType.CHECKING, "EUR", Decimal(0), iban="ES9221000418450200051332")


def test_the_model_validates_the_iban_too():
    with pytest.raises(InputError, match="invalid IBAN"):
        Account(iban="ES0000000000000000000000")


def test_a_valid_iban_is_stored_compact():
    assert validate_iban("es91 2100 0418 4502 0005 1332") == "ES9121000418450200051332"
    record = AccountRecord(
        "A", AccountType.CHECKING, "EUR", Decimal(0), iban="ES91 2100 0418 4502 0005 1332"
    )
    assert record.iban == "ES9121000418450200051332"


def test_an_account_needs_an_iban_or_the_banks_number():
    with pytest.raises(InvalidAccount, match="neither an IBAN nor a number"):
        AccountRecord("card-1", AccountType.CARD, "EUR", Decimal(0))
    assert AccountRecord("card-1", AccountType.CARD, "EUR", Decimal(0), number="4111").iban is None


@pytest.mark.parametrize("currency", ["eur", "EURO", "", "€"])
def test_a_currency_must_be_an_iso_4217_code(currency: str):
    with pytest.raises(InvalidAccount, match="ISO 4217"):
        AccountRecord("A", AccountType.CHECKING, currency, Decimal(0), number="1")


def test_every_result_code_has_its_own_message():
    messages = {code: code.message for code in ResultCode}
    assert len(set(messages.values())) == len(ResultCode) == 9
    assert all(m.endswith(".") and len(m) > 20 for m in messages.values())
    assert ResultCode("two_factor_required").message.startswith("The bank asks for a one-time code")
    assert ResultCode.SUCCESS.ok and not ResultCode.TIMEOUT.ok
