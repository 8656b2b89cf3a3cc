"""Logs configured for a terminal or as JSON: an exception's traceback is there, but neither
the local variables of its frames nor a credential in its message."""

from __future__ import annotations

import io
import json

import pytest

from scrapeflow._util.logs import configure_logging, get_logger

SECRET = "hunter2-S3cret"


def fail_login() -> None:
    password = SECRET  # a local a rich traceback would print
    raise RuntimeError(f"login refused at https://user:{password}@bank.example/login")


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
