"""Migrations run from code; a database already at the head is recognised without Alembic."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from scrapeflow.banking import MIGRATIONS_DIR
from scrapeflow.db import alembic_config, head_revision


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
