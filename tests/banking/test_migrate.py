"""Migrations run from code; a database already at the head is recognised without Alembic; a
database that is not ours is refused, and a migration that fails leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from scrapeflow.banking import MIGRATIONS_DIR, migrate
from scrapeflow.db import alembic_config, create_engine, head_revision
from scrapeflow.db import migrate as db_migrate
from scrapeflow.errors import ConfigError


def test_the_head_read_from_the_files_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    config = alembic_config("sqlite+aiosqlite://", MIGRATIONS_DIR)
    assert head_revision(MIGRATIONS_DIR) == ScriptDirectory.from_config(config).get_current_head()


def test_several_heads_or_a_computed_revision_are_left_to_alembic(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "a.py").write_text('revision = "a"\ndown_revision = None\n')
    (versions / "b.py").write_text('revision: str = "b"\ndown_revision: str | None = "a"\n')
    assert head_revision(tmp_path) == "b"
    (versions / "c.py").write_text('revision = "c"\ndown_revision = "a"\n')
    assert head_revision(tmp_path) is None  # two heads
    (versions / "c.py").write_text('revision = "c" + SUFFIX\ndown_revision = "b"\n')
    assert head_revision(tmp_path) is None


def test_a_migrated_database_is_checked_without_importing_alembic(empty_db_url: str) -> None:
    url = empty_db_url
    program = textwrap.dedent(
        f"""
        import asyncio, sys
        from scrapeflow.banking import migrate
        asyncio.run(migrate({url!r}))
        print("alembic" in sys.modules)
        """
    )
    run = [sys.executable, "-c", program]
    first = subprocess.run(run, capture_output=True, text=True, check=True)
    assert first.stdout.strip() == "True"  # an empty database: Alembic creates the schema
    again = subprocess.run(run, capture_output=True, text=True, check=True)
    assert again.stdout.strip() == "False"  # at the head already: one query


async def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return set(await connection.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def _execute(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            for statement in statements:
                await connection.execute(text(statement))
    finally:
        await engine.dispose()


async def test_a_database_of_another_application_is_refused_untouched(empty_db_url: str) -> None:
    await _execute(empty_db_url, "CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    with pytest.raises(ConfigError, match=r"tables of another application \(invoices\)"):
        await migrate(empty_db_url)
    assert await _tables(empty_db_url) == {"invoices"}
    await migrate(empty_db_url, adopt=True)  # asked for: the bank tables go in beside
    assert {"invoices", "customers", "alembic_version"} <= await _tables(empty_db_url)
    await migrate(empty_db_url)  # ours from now on


async def test_scrapeflows_own_tables_made_first_are_not_another_applications(
    empty_db_url: str,
) -> None:
    await _execute(
        empty_db_url,
        "CREATE TABLE scrapeflow_jobs (id INTEGER PRIMARY KEY)",
        # the distributed backend's dispatch tables: a worker may have started on it first
        "CREATE TABLE procrastinate_jobs (id INTEGER PRIMARY KEY)",
    )
    await migrate(empty_db_url)
    assert {"scrapeflow_jobs", "procrastinate_jobs", "customers"} <= await _tables(empty_db_url)


async def test_a_revision_from_elsewhere_is_refused(empty_db_url: str) -> None:
    await migrate(empty_db_url)
    await _execute(empty_db_url, "UPDATE alembic_version SET version_num = 'abc123'")
    with pytest.raises(ConfigError, match="at migration revision 'abc123'"):
        await migrate(empty_db_url)


async def test_a_failed_migration_leaves_no_trace(empty_db_url: str) -> None:
    """Adopting a database whose own 'customers' table is in the way: the first CREATE fails,
    and neither alembic_version nor any bank table stays behind (SQLite too)."""
    await _execute(empty_db_url, "CREATE TABLE customers (mine INTEGER)")
    with pytest.raises(ConfigError, match="cannot migrate the database"):
        await migrate(empty_db_url, adopt=True)
    assert await _tables(empty_db_url) == {"customers"}


async def test_a_migration_that_raises_midway_is_rolled_back(
    empty_db_url: str, tmp_path: Path
) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "versions").mkdir(parents=True)
    (scripts / "env.py").write_text(
        textwrap.dedent(
            """
            from alembic import context
            context.configure(connection=context.config.attributes["connection"])
            with context.begin_transaction():
                context.run_migrations()
            """
        )
    )
    for revision, parent, body in (
        ("a1", None, 'op.create_table("first", sa.Column("id", sa.Integer))'),
        ("b2", "a1", 'raise RuntimeError("this migration fails")'),
    ):
        (scripts / "versions" / f"{revision}.py").write_text(
            textwrap.dedent(
                f"""
                import sqlalchemy as sa
                from alembic import op

                revision = {revision!r}
                down_revision = {parent!r}

                def upgrade():
                    {body}
                """
            )
        )
    with pytest.raises(RuntimeError, match="this migration fails"):
        await db_migrate(empty_db_url, scripts)
    assert await _tables(empty_db_url) == set()
