"""One routes module per resource: customers (status, refresh, accounts, movements) and jobs."""

from __future__ import annotations

from scrapeflow.server.routes import customers, events, jobs

__all__ = ["customers", "events", "jobs"]
