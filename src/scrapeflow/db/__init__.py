"""Database infrastructure: async engines and sessions, migrations, portable column types and
idempotent upserts.

SQLite (``sqlite+aiosqlite:///path``) is the embedded default; PostgreSQL
(``postgresql+asyncpg://user@host/db``) is tested; MS SQL Server works through the ``mssql``
dialect with an async ODBC driver: ``pip install aioodbc`` plus Microsoft's ODBC Driver 18, then
``mssql+aioodbc://user:pw@host/db?driver=ODBC+Driver+18+for+SQL+Server``.

>>> engine = create_engine("sqlite+aiosqlite:///scrapeflow.db")  # doctest: +SKIP

The bank schema's migrations live with it: ``await scrapeflow.banking.migrate(url)``. An error
saying a database cannot be used at all (corrupt, read-only, not a database) is told apart from
the rest by :func:`unusable_reason`; :func:`database_errors` turns it into a ``ConfigError``.
"""

from __future__ import annotations

from scrapeflow.db._engine import (
    DEFAULT_URL,
    create_engine,
    session_factory,
    single_statements,
    sqlite_file,
)
from scrapeflow.db._errors import connection_lost, database_errors, unusable_reason
from scrapeflow.db._migrate import alembic_config, head_revision, migrate
from scrapeflow.db._quick import QuickQuery, QuickReads
from scrapeflow.db._quickwrite import write
from scrapeflow.db._tables import create_tables
from scrapeflow.db._types import Money, UTCDateTime
from scrapeflow.db._upsert import portable_statements, upsert, upsert_sync

__all__ = [
    "DEFAULT_URL",
    "Money",
    "QuickQuery",
    "QuickReads",
    "UTCDateTime",
    "alembic_config",
    "connection_lost",
    "create_engine",
    "create_tables",
    "database_errors",
    "head_revision",
    "migrate",
    "portable_statements",
    "session_factory",
    "single_statements",
    "sqlite_file",
    "unusable_reason",
    "upsert",
    "upsert_sync",
    "write",
]
