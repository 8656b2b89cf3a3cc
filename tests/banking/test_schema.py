from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from scrapeflow.banking import Base, migrate
from scrapeflow.db import create_engine
from scrapeflow.errors import ConfigError

TABLES = {
    "customers",
    "financial_entities",
    "accesses",
    "contracts",
    "accounts",
    "movements",
    "movement_removals",
}


async def test_migrate_creates_the_schema_and_is_idempotent(empty_db_url: str) -> None:
    await migrate(empty_db_url)
    await migrate(empty_db_url)  # a second upgrade is a no-op
    engine = create_engine(empty_db_url)
    try:
        async with engine.connect() as conn:
            tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
            version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
            movement_uniques = await conn.run_sync(
                lambda c: inspect(c).get_unique_constraints("movements")
            )
    finally:
        await engine.dispose()
    assert tables == TABLES | {"alembic_version"}
    assert version == [("0007",)]
    assert {tuple(u["column_names"]) for u in movement_uniques} == {("account_id", "movement_key")}


async def test_migration_matches_the_models(empty_db_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    await migrate(empty_db_url)
    engine = create_engine(empty_db_url)
    try:
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(
                    MigrationContext.configure(c, opts={"compare_type": True}), Base.metadata
                )
            )
    finally:
        await engine.dispose()
    assert diff == []


async def test_sqlite_connections_get_wal_foreign_keys_and_busy_timeout(tmp_path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    try:
        async with engine.connect() as conn:
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar()
            fks = (await conn.execute(text("PRAGMA foreign_keys"))).scalar()
            busy = (await conn.execute(text("PRAGMA busy_timeout"))).scalar()
    finally:
        await engine.dispose()
    assert (mode, fks, busy) == ("wal", 1, 30000)


def test_a_bad_url_is_a_config_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        create_engine("nosuchdb+driver://bob:hunter2@host/db")
    assert "hunter2" not in str(info.value)
    assert "nosuchdb" in str(info.value)


def test_a_bare_postgresql_url_gets_the_async_driver() -> None:
    engine = create_engine("postgresql://postgres@127.0.0.1/test")
    assert engine.dialect.driver == "asyncpg"
