"""The kit's pytest plugin (entry point ``pytest11``): ``pytest --update-golden`` writes the
golden files of the replays it runs instead of comparing with them."""

from __future__ import annotations

import os

import pytest

from scrapeflow.banking.testing._golden import UPDATE_ENV

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("scrapeflow").addoption(
        "--update-golden",
        action="store_true",
        help="write the golden files of scrapeflow.banking.testing.replay() instead of "
        "comparing with them",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--update-golden", default=False):
        os.environ[UPDATE_ENV] = "1"
