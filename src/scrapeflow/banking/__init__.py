"""Bank aggregation: the schema of customers, accesses, accounts and movements, result codes,
idempotent writes and the credential vault.

>>> from scrapeflow.banking import ResultCode
>>> ResultCode.USER_LOCKED.message
'The bank locked this user; the customer must unlock it at the bank.'
"""

from __future__ import annotations

from scrapeflow.banking._models import (
    Access,
    Account,
    AccountRecord,
    AccountType,
    Base,
    Contract,
    Customer,
    FinancialEntity,
    InvalidAccount,
    Movement,
    MovementRecord,
    movement_key,
    upsert_accounts,
    upsert_movements,
    validate_currency,
    validate_iban,
)
from scrapeflow.banking._results import ResultCode, ScrapeState
from scrapeflow.banking._vault import KEY_FILE_ENV, KEYS_ENV, CredentialVault, VaultError

__all__ = [
    "KEYS_ENV",
    "KEY_FILE_ENV",
    "Access",
    "Account",
    "AccountRecord",
    "AccountType",
    "Base",
    "Contract",
    "CredentialVault",
    "Customer",
    "FinancialEntity",
    "InvalidAccount",
    "Movement",
    "MovementRecord",
    "ResultCode",
    "ScrapeState",
    "VaultError",
    "movement_key",
    "upsert_accounts",
    "upsert_movements",
    "validate_currency",
    "validate_iban",
]
