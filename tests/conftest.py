"""Shared fixtures: isolated environment here; real servers on loopback in ``tests/_servers.py``
and fresh databases in ``tests/_databases.py`` (plugins, so every test package sees them)."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests._servers", "tests._databases", "tests._watchdog"]

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
_SERVICE_VARS = ("WEBSHARE_API_KEY", "IPROYAL_API_KEY", "IPROYAL_ORDER_ID")
# The bulk fetcher's settings keep gofetch's names (scrapeflow.fetch._settings).
_GOFETCH_PREFIXES = ("FETCH_", "CONCURRENT_")
_GOFETCH_VARS = ("MAX_CPUS", "LOG_LEVEL", "REDIS_URL")


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy, scrapeflow or fetcher settings leak in from the machine running the tests."""
    for name in list(os.environ):
        if (
            name.upper() in _PROXY_VARS
            or name in _SERVICE_VARS
            or name in _GOFETCH_VARS
            or name.startswith(("SCRAPEFLOW_", *_GOFETCH_PREFIXES))
        ):
            monkeypatch.delenv(name)
    # One process serves (the default is one per core): tests of limits kept in memory count
    # one process's. tests/server/test_processes.py runs several, and the default.
    monkeypatch.setenv("SCRAPEFLOW_API_PROCESSES", "1")
