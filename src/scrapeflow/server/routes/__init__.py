"""One routes module per resource: customers (their accesses, refresh), what a UI reads of them
(status, accounts, movements), their sync and events, jobs, webhooks, the schedule, operations
(health, readiness, metrics) and the dashboard's page."""

from __future__ import annotations

from scrapeflow.server.routes import (
    banks,
    customers,
    dashboard,
    erasure,
    events,
    exports,
    jobs,
    operations,
    readings,
    schedule,
    sync,
    webhooks,
)

__all__ = [
    "banks",
    "customers",
    "dashboard",
    "erasure",
    "events",
    "exports",
    "jobs",
    "operations",
    "readings",
    "schedule",
    "sync",
    "webhooks",
]
