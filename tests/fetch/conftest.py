"""Fetcher fixtures: the sandbox plain site, a store on local disk or S3, and the machine's Redis
(all from ``tests/_servers.py``)."""

from __future__ import annotations

import pytest

from tests._servers import REDIS_URL, RunningSite

__all__ = ["REDIS_URL"]  # until test_fetch imports it from tests._servers


@pytest.fixture(autouse=True)
def _aws(aws_sandbox: None) -> None:
    """Every fetch test runs without the machine's AWS settings."""


@pytest.fixture
def site(plain_site: RunningSite) -> str:
    """The base URL of the sandbox plain site."""
    return plain_site.url
