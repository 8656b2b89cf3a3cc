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
    assert len(set(messages.values())) == len(ResultCode) == 12
    assert all(m.endswith(".") and len(m) > 20 for m in messages.values())
    assert ResultCode("two_factor_required").message.startswith("The bank asks for a one-time code")
    assert ResultCode.SUCCESS.ok and not ResultCode.TIMEOUT.ok


NAMES = [
    ("customer id", "c" * 65, "the maximum is 64"),
    ("customer id", "a\nb", "control"),
    ("customer id", "a\u200bb", "invisible"),  # a zero-width space: two ids that look alike
    ("customer id", "a\udcffb", "not valid UTF-8"),  # a non-UTF-8 argument, as Python gets it
    ("customer name", "n" * 201, "the maximum is 200"),
    ("customer name", "Ana\x1b[31m", "control"),
    ("bank login", "u" * 201, "the maximum is 200"),
    ("bank login", "u\tv", "control"),
    ("password", "p" * 1025, "the maximum is 1024"),
    ("password", "p\udcff", "not valid UTF-8"),
]


@pytest.mark.parametrize(("field", "value", "message"), NAMES)
async def test_names_are_refused_never_cut(
    sqlite_url: str, field: str, value: str, message: str
) -> None:
    from scrapeflow.banking import CredentialVault, accesses_of, add_access, add_customer
    from scrapeflow.db import create_engine, session_factory

    engine = create_engine(sqlite_url)
    sessions = session_factory(engine)
    vault = CredentialVault([CredentialVault.generate_key()])
    try:
        await add_customer(sessions, "ana", "Ana María")  # non-ASCII is fine
        if field.startswith("customer"):
            customer = value if field == "customer id" else "bo"
            adding = add_customer(sessions, customer, value if field == "customer name" else "")
        else:
            login = value if field == "bank login" else "u1"
            password = value if field == "password" else "pw"
            adding = add_access(sessions, vault, "ana", "apibank", login, password)
        with pytest.raises(InputError, match=message) as info:
            await adding
        assert field in str(info.value)
        assert await accesses_of(sessions, "ana") == []
    finally:
        await engine.dispose()


def test_a_name_at_its_limit_is_kept_whole() -> None:
    from scrapeflow.banking import validate_customer_name, validate_password

    assert validate_customer_name(" " + "ñ" * 200 + " ") == "ñ" * 200
    assert validate_password(" p" * 512) == " p" * 512  # spaces are part of a password
