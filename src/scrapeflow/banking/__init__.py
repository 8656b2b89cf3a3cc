"""Bank aggregation: customers' accounts and movements, scraped per access in parallel, into SQL.

* the schema (:class:`Customer`, :class:`Access`, :class:`Account`, :class:`Movement`…) and its
  migrations (:func:`migrate`); idempotent upserts;
* the scraper API (:class:`BasicScraper`) and the registry of scrapers (entry points
  ``scrapeflow.banks``); scrapers for the sandbox's three banks ship in
  ``scrapeflow.banking.scrapers``;
* the :class:`Writer` interface (:class:`SqlWriter` by default) and the :class:`WriteQueue`;
* result codes (:class:`ResultCode`) and the credential vault (:class:`CredentialVault`).

>>> from scrapeflow.banking import ResultCode
>>> ResultCode.USER_LOCKED.message
'The bank locked this user; the customer must unlock it at the bank.'
"""

from __future__ import annotations

from scrapeflow.banking._events import EventKind, EventSink, LaunchEvent
from scrapeflow.banking._formats import (
    parse_amount,
    parse_es_amount,
    parse_es_date,
    parse_iso_date,
)
from scrapeflow.banking._migrate import MIGRATIONS_DIR, migrate
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
from scrapeflow.banking._registry import ENTRY_POINT_GROUP, get_scraper, register, scrapers
from scrapeflow.banking._results import ResultCode, ScrapeState
from scrapeflow.banking._scraper import (
    AccessSink,
    BasicScraper,
    ContractInfo,
    Credential,
    IncrementalPolicy,
    ScrapeContext,
    result_for,
)
from scrapeflow.banking._vault import KEY_FILE_ENV, KEYS_ENV, CredentialVault, VaultError
from scrapeflow.banking._writequeue import WriteQueue, writers_for
from scrapeflow.banking._writer import SqlWriter, SyncWindow, Writer

__all__ = [
    "ENTRY_POINT_GROUP",
    "KEYS_ENV",
    "KEY_FILE_ENV",
    "MIGRATIONS_DIR",
    "Access",
    "AccessSink",
    "Account",
    "AccountRecord",
    "AccountType",
    "Base",
    "BasicScraper",
    "Contract",
    "ContractInfo",
    "Credential",
    "CredentialVault",
    "Customer",
    "EventKind",
    "EventSink",
    "FinancialEntity",
    "IncrementalPolicy",
    "InvalidAccount",
    "LaunchEvent",
    "Movement",
    "MovementRecord",
    "ResultCode",
    "ScrapeContext",
    "ScrapeState",
    "SqlWriter",
    "SyncWindow",
    "VaultError",
    "WriteQueue",
    "Writer",
    "get_scraper",
    "migrate",
    "movement_key",
    "parse_amount",
    "parse_es_amount",
    "parse_es_date",
    "parse_iso_date",
    "register",
    "result_for",
    "scrapers",
    "upsert_accounts",
    "upsert_movements",
    "validate_currency",
    "validate_iban",
    "writers_for",
]
