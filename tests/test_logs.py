"""Logs configured for a terminal or as JSON: an exception's traceback is there, but neither
the local variables of its frames nor a credential in its message."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapeflow._util.logs import configure_logging, get_logger

SECRET = "hunter2-S3cret"


def fail_login() -> None:
    password = SECRET  # a local a rich traceback would print
    raise RuntimeError(f"login refused at https://user:{password}@bank.example/login")


@pytest.fixture(autouse=True)
def logging_as_before() -> Iterator[None]:
    """configure_logging sets the process's loggers (the root's too): put them back after, so
    the tests that follow in this process log as they would have."""
    loggers = [logging.getLogger(), logging.getLogger("scrapeflow")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    yield
    for logger, handlers, level, propagate in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.mark.parametrize("as_json", [False, True])
def test_a_logged_exception_shows_its_traceback_but_no_secret(as_json: bool) -> None:
    stream = io.StringIO()
    configure_logging("INFO", json=as_json, stream=stream)
    try:
        fail_login()
    except RuntimeError:
        get_logger("scrapeflow.test").exception("login failed", access=7)
    text = stream.getvalue()
    assert "login failed" in text and "RuntimeError: login refused at https://" in text
    assert "fail_login" in text  # the frames are there
    assert SECRET not in text
    if as_json:
        record = json.loads(text.splitlines()[0])
        assert record["access"] == 7 and "Traceback" in record["exception"]


def test_with_log_json_every_librarys_records_are_json_lines(tmp_path: Path) -> None:
    """The service under ``--log-json``: a record of uvicorn's (an invalid request) is a JSON
    line like scrapeflow's own, not the library's plain text."""
    from scrapeflow.banking import CredentialVault

    env = {
        **os.environ,
        "SCRAPEFLOW_DB_URL": f"sqlite+aiosqlite:///{tmp_path / 'service.db'}",
        "SCRAPEFLOW_VAULT_KEYS": CredentialVault.generate_key(),
    }
    command = [sys.executable, "-m", "scrapeflow", "--log-json", "serve", "--port", "0"]
    service = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert service.stdout is not None
        line = service.stdout.readline()
        assert line.startswith("serving on http://"), line
        host, port = line.split("//")[1].strip().split(":")
        with socket.create_connection((host, int(port)), timeout=10) as garbage:
            garbage.sendall(b"GARBAGE\r\n\r\n")
            assert garbage.recv(100).startswith(b"HTTP/1.1 400")
    finally:
        service.terminate()
        _, stderr = service.communicate(timeout=30)
    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]  # each is JSON
    assert any(
        record["logger"] == "uvicorn.error" and record["event"] == "Invalid HTTP request received."
        for record in lines
    ), stderr
    assert all({"event", "level", "timestamp"} <= set(record) for record in lines)
