"""A command that cannot get SQLite's write lock says so in one line, and stores nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from scrapeflow.banking import CredentialVault
from scrapeflow.cli._common import EXIT_UNEXPECTED
from scrapeflow.cli._main import main
from scrapeflow.db import _engine


def run(*args: str) -> int:
    with pytest.raises(SystemExit) as done:
        main(["bank", *args])
    return int(done.value.code or 0)


def test_a_write_lock_held_past_the_busy_timeout_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "bank.db"
    monkeypatch.setenv("SCRAPEFLOW_DB_URL", f"sqlite+aiosqlite:///{db}")
    monkeypatch.setenv("SCRAPEFLOW_VAULT_KEYS", CredentialVault.generate_key())
    monkeypatch.setenv("SCRAPEFLOW_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(_engine, "SQLITE_BUSY_TIMEOUT_MS", 300)
    assert run("add-customer", "cust-1") == 0
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # a process stopped inside its transaction
        capsys.readouterr()
        assert run("add-customer", "cust-2") == EXIT_UNEXPECTED
        err = capsys.readouterr().err
        assert "the database stayed locked for 0.3 s" in err
        assert "another process holds its write lock" in err
        assert "Traceback" not in err and "OperationalError" not in err
        assert len(err.strip().splitlines()) == 1
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    stored = sqlite3.connect(db)
    try:
        customers = [
            row[0] for row in stored.execute("SELECT external_id FROM customers ORDER BY id")
        ]
    finally:
        stored.close()
    assert customers == ["cust-1"]
    assert run("add-customer", "cust-2") == 0  # the lock gone, the same command goes through


def test_a_database_error_names_the_drivers_words_not_the_statement_or_its_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SQLAlchemy's text carries the statement and its parameters (a login, a token)."""
    from sqlalchemy.exc import OperationalError

    from scrapeflow.cli._main import _report

    error = OperationalError(
        "INSERT INTO accesses (login, secret) VALUES (?, ?)",
        ("jane.doe@example.com", b"vault-token"),
        sqlite3.OperationalError("disk I/O error"),
    )
    assert _report(error) == EXIT_UNEXPECTED
    err = capsys.readouterr().err
    assert "unexpected OperationalError: disk I/O error" in err
    assert "jane.doe" not in err and "vault-token" not in err and "INSERT" not in err
