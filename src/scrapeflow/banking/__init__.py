"""Bank aggregation: customers' accounts and movements, scraped per access in parallel, into SQL.

* the schema (:class:`Customer`, :class:`Access`, :class:`Account`, :class:`Movement`…) and its
  migrations (:func:`migrate`); idempotent upserts;
* the scraper API (:class:`BasicScraper`) and the registry of scrapers (entry points
  ``scrapeflow.banks``); scrapers for the sandbox's three banks ship in
  ``scrapeflow.banking.scrapers``;
* the :class:`Writer` interface (:class:`SqlWriter` by default) and the :class:`WriteQueue`;
* the :class:`Launcher` (refresh a customer: one scraper per access, in parallel), its events
  and its log file per launch; scrape state (claims, heartbeats, finishes) and
  :func:`reset_stuck`, the watchdog that frees what a killed launch left in progress;
* bank work as jobs (:func:`bank_job_kinds`: ``bank.refresh``, its ``bank.access`` parts when
  spread over workers, and ``bank.otp``; deduplicated per customer by :func:`refresh_key`),
  their reports (:func:`refresh_reports`) and the watchdog as the job queue's stalled-job sweep
  plus the reset of stuck rows (:func:`run_watchdog`);
* result codes (:class:`ResultCode`) and the credential vault (:class:`CredentialVault`);
* customers and accesses (:func:`add_customer`, :func:`add_access`, checked by
  :func:`validate_customer_id` and its kin), reading back
  (:func:`accounts_of`, :func:`movements_of`), the sync cursor (:func:`movement_changes`: what
  was added, modified and removed since a client's cursor) and exports (CSV, JSON, OFX).

>>> from scrapeflow.banking import ResultCode
>>> ResultCode.USER_LOCKED.message
'The bank locked this user; the customer must unlock it at the bank.'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The shipped scrapers' package first: importing it later (the registry loads entry points)
# would otherwise rebind this package's ``scrapers`` from the function to that package.
from scrapeflow.banking import scrapers as _shipped_scrapers  # noqa: F401
from scrapeflow.banking._registry import ENTRY_POINT_GROUP, get_scraper, register, scrapers

if TYPE_CHECKING:
    from scrapeflow.banking._directory import (
        MAX_PASSWORD,
        add_access,
        add_customer,
        change_password,
        enable_access,
        find_customer,
        rename_customer,
        validate_customer_id,
        validate_customer_name,
        validate_login,
        validate_password,
    )
    from scrapeflow.banking._events import EventKind, EventSink, LaunchEvent
    from scrapeflow.banking._export import to_csv, to_json, to_ofx
    from scrapeflow.banking._formats import (
        compact,
        parse_amount,
        parse_es_amount,
        parse_es_date,
        parse_iso_date,
    )
    from scrapeflow.banking._jobs import (
        BANK_ACCESS,
        BANK_EVENT_NAMES,
        BANK_OTP,
        BANK_REFRESH,
        BankJobEvent,
        BankJobEventSink,
        BankJobs,
        bank_job_kinds,
        otp_key,
        refresh_key,
        refresh_reports,
    )
    from scrapeflow.banking._launcher import Launcher
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
        MovementKeys,
        MovementRecord,
        MovementRemoval,
        movement_key,
        upsert_accounts,
        upsert_movements,
        validate_currency,
        validate_iban,
    )
    from scrapeflow.banking._newbank import BANK_KINDS, new_bank
    from scrapeflow.banking._reads import (
        AccessView,
        AccountView,
        CustomerPage,
        CustomerState,
        CustomerView,
        MovementPosition,
        MovementView,
        Reads,
        accesses_of,
        accounts_of,
        customer_page,
        customer_row_id,
        customer_status,
        customer_views,
        movement_page,
        movement_position,
        movements_of,
    )
    from scrapeflow.banking._reports import AccessReport, LaunchLimits, LaunchReport
    from scrapeflow.banking._results import (
        NEEDS_A_PERSON,
        Outcome,
        ResultCode,
        ScrapeState,
        outcome_of,
    )
    from scrapeflow.banking._scraper import (
        AccessSink,
        BasicScraper,
        ContractInfo,
        Credential,
        IncrementalPolicy,
        ScrapeContext,
        result_for,
    )
    from scrapeflow.banking._setup import bank_sites, launcher_from_settings
    from scrapeflow.banking._state import StuckReset, reset_stuck
    from scrapeflow.banking._sync import (
        MovementChange,
        MovementChanges,
        RemovedMovement,
        movement_changes,
    )
    from scrapeflow.banking._vault import KEY_FILE_ENV, KEYS_ENV, CredentialVault, VaultError
    from scrapeflow.banking._watchdog import WatchdogReport, run_watchdog
    from scrapeflow.banking._writequeue import GroupedWrite, WriteQueue, queued_writes, writers_for
    from scrapeflow.banking._writer import (
        SqlWriter,
        StoredAccounts,
        StoredMovements,
        SyncWindow,
        Writer,
    )

# Everything else is loaded on first use (PEP 562): a command that lists customers does not
# pay for the launcher, the jobs or the scraper API (aiohttp). ``scrapers`` above is bound at
# import, over the subpackage of the same name.
_LAZY_FROM = {
    "_directory": (
        "MAX_PASSWORD",
        "add_access",
        "add_customer",
        "change_password",
        "enable_access",
        "find_customer",
        "rename_customer",
        "validate_customer_id",
        "validate_customer_name",
        "validate_login",
        "validate_password",
    ),
    "_events": ("EventKind", "EventSink", "LaunchEvent"),
    "_export": ("to_csv", "to_json", "to_ofx"),
    "_formats": ("compact", "parse_amount", "parse_es_amount", "parse_es_date", "parse_iso_date"),
    "_jobs": (
        "BANK_ACCESS",
        "BANK_EVENT_NAMES",
        "BANK_OTP",
        "BANK_REFRESH",
        "BankJobEvent",
        "BankJobEventSink",
        "BankJobs",
        "bank_job_kinds",
        "otp_key",
        "refresh_key",
        "refresh_reports",
    ),
    "_launcher": ("Launcher",),
    "_migrate": ("MIGRATIONS_DIR", "migrate"),
    "_models": (
        "Access",
        "Account",
        "AccountRecord",
        "AccountType",
        "Base",
        "Contract",
        "Customer",
        "FinancialEntity",
        "InvalidAccount",
        "Movement",
        "MovementKeys",
        "MovementRecord",
        "MovementRemoval",
        "movement_key",
        "upsert_accounts",
        "upsert_movements",
        "validate_currency",
        "validate_iban",
    ),
    "_reads": (
        "AccessView",
        "AccountView",
        "CustomerPage",
        "CustomerState",
        "CustomerView",
        "MovementPosition",
        "MovementView",
        "Reads",
        "accesses_of",
        "accounts_of",
        "customer_page",
        "customer_row_id",
        "customer_status",
        "customer_views",
        "movement_page",
        "movement_position",
        "movements_of",
    ),
    "_newbank": ("BANK_KINDS", "new_bank"),
    "_reports": ("AccessReport", "LaunchLimits", "LaunchReport"),
    "_results": ("NEEDS_A_PERSON", "Outcome", "ResultCode", "ScrapeState", "outcome_of"),
    "_scraper": (
        "AccessSink",
        "BasicScraper",
        "ContractInfo",
        "Credential",
        "IncrementalPolicy",
        "ScrapeContext",
        "result_for",
    ),
    "_setup": ("bank_sites", "launcher_from_settings"),
    "_state": ("StuckReset", "reset_stuck"),
    "_sync": ("MovementChange", "MovementChanges", "RemovedMovement", "movement_changes"),
    "_vault": ("KEY_FILE_ENV", "KEYS_ENV", "CredentialVault", "VaultError"),
    "_watchdog": ("WatchdogReport", "run_watchdog"),
    "_writequeue": ("GroupedWrite", "WriteQueue", "queued_writes", "writers_for"),
    "_writer": ("SqlWriter", "StoredAccounts", "StoredMovements", "SyncWindow", "Writer"),
}
_LAZY = {name: f"{__name__}.{module}" for module, names in _LAZY_FROM.items() for name in names}

__all__ = [
    "BANK_ACCESS",
    "BANK_EVENT_NAMES",
    "BANK_KINDS",
    "BANK_OTP",
    "BANK_REFRESH",
    "ENTRY_POINT_GROUP",
    "KEYS_ENV",
    "KEY_FILE_ENV",
    "MAX_PASSWORD",
    "MIGRATIONS_DIR",
    "NEEDS_A_PERSON",
    "Access",
    "AccessReport",
    "AccessSink",
    "AccessView",
    "Account",
    "AccountRecord",
    "AccountType",
    "AccountView",
    "BankJobEvent",
    "BankJobEventSink",
    "BankJobs",
    "Base",
    "BasicScraper",
    "Contract",
    "ContractInfo",
    "Credential",
    "CredentialVault",
    "Customer",
    "CustomerPage",
    "CustomerState",
    "CustomerView",
    "EventKind",
    "EventSink",
    "FinancialEntity",
    "GroupedWrite",
    "IncrementalPolicy",
    "InvalidAccount",
    "LaunchEvent",
    "LaunchLimits",
    "LaunchReport",
    "Launcher",
    "Movement",
    "MovementChange",
    "MovementChanges",
    "MovementKeys",
    "MovementPosition",
    "MovementRecord",
    "MovementRemoval",
    "MovementView",
    "Outcome",
    "Reads",
    "RemovedMovement",
    "ResultCode",
    "ScrapeContext",
    "ScrapeState",
    "SqlWriter",
    "StoredAccounts",
    "StoredMovements",
    "StuckReset",
    "SyncWindow",
    "VaultError",
    "WatchdogReport",
    "WriteQueue",
    "Writer",
    "accesses_of",
    "accounts_of",
    "add_access",
    "add_customer",
    "bank_job_kinds",
    "bank_sites",
    "change_password",
    "compact",
    "customer_page",
    "customer_row_id",
    "customer_status",
    "customer_views",
    "enable_access",
    "find_customer",
    "get_scraper",
    "launcher_from_settings",
    "migrate",
    "movement_changes",
    "movement_key",
    "movement_page",
    "movement_position",
    "movements_of",
    "new_bank",
    "otp_key",
    "outcome_of",
    "parse_amount",
    "parse_es_amount",
    "parse_es_date",
    "parse_iso_date",
    "queued_writes",
    "refresh_key",
    "refresh_reports",
    "register",
    "rename_customer",
    "reset_stuck",
    "result_for",
    "run_watchdog",
    "scrapers",
    "to_csv",
    "to_json",
    "to_ofx",
    "upsert_accounts",
    "upsert_movements",
    "validate_currency",
    "validate_customer_id",
    "validate_customer_name",
    "validate_iban",
    "validate_login",
    "validate_password",
    "writers_for",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
