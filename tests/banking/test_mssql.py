"""MS SQL Server support, shown without a server: the schema and the writes compile for mssql."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import cast

from sqlalchemy import Table
from sqlalchemy.dialects import mssql
from sqlalchemy.schema import CreateTable

from scrapeflow.banking import Base, Movement
from scrapeflow.db import portable_statements

# What a connection to SQL Server 2012+ detects: VARBINARY(max)/NVARCHAR(max), not IMAGE/NTEXT.
MSSQL = mssql.dialect(deprecate_large_types=True)


def test_the_schema_compiles_for_mssql():
    ddl = {t.name: str(CreateTable(t).compile(dialect=MSSQL)) for t in Base.metadata.sorted_tables}
    assert set(ddl) == {
        "customers",
        "financial_entities",
        "accesses",
        "contracts",
        "accounts",
        "movements",
        "movement_removals",
    }
    assert "amount NUMERIC(18, 2) NOT NULL" in ddl["movements"]
    assert "first_seen DATETIMEOFFSET NOT NULL" in ddl["movements"]
    assert "pending BIT NOT NULL" in ddl["movements"]
    assert "secret VARBINARY(max) NOT NULL" in ddl["accesses"]
    assert "description NVARCHAR(max) NOT NULL" in ddl["movements"]
    assert "UNIQUE (account_id, movement_key)" in ddl["movements"]


def test_the_movement_upsert_compiles_for_mssql():
    """SQL Server takes the select-then-write path (UPDATE changed rows, INSERT new ones)."""
    table = cast(Table, Movement.__table__)
    now = datetime(2026, 3, 5, tzinfo=UTC)

    def row(key: str, description: str, pending: bool) -> dict:
        return {
            "account_id": 7,
            "movement_key": key,
            "operation_date": date(2026, 3, 2),
            "value_date": date(2026, 3, 2),
            "amount": Decimal("-19.99"),
            "description": description,
            "balance_after": None,
            "pending": pending,
            "updated_at": now,
        }

    stored = {(7, "ref:R-3"): row("ref:R-3", "PENDIENTE MERCADONA", True)}
    statements = portable_statements(
        table,
        [row("ref:R-3", "COMPRA MERCADONA", False), row("ref:R-4", "NOMINA", False)],
        keys=("account_id", "movement_key"),
        existing=stored,
        touch="updated_at",
    )
    sql = [str(s.compile(dialect=MSSQL)) for s in statements]
    assert len(sql) == 2
    assert sql[0].startswith("UPDATE movements SET description=")
    assert "pending=" in sql[0] and "amount=" not in sql[0]  # only what changed
    assert "WHERE movements.account_id = " in sql[0]
    assert sql[1].startswith("INSERT INTO movements")


def test_the_migration_renders_for_mssql(capsys):
    from alembic import command

    from scrapeflow.banking import MIGRATIONS_DIR
    from scrapeflow.db import alembic_config

    command.upgrade(alembic_config("mssql+aioodbc://u@h/db", MIGRATIONS_DIR), "head", sql=True)
    out = capsys.readouterr().out
    assert "CREATE TABLE movements" in out and "DATETIMEOFFSET" in out
    assert "ALTER TABLE accesses ADD session_state" in out
