"""Storage fixtures: every test runs on local disk and on a real S3 server on loopback (``target``
and the session's S3 server are in ``tests/_servers.py``). Nothing reaches AWS."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from scrapeflow.storage import BlobStore

# Until the test modules import these from tests._s3 directly.
from tests._s3 import PROGRAM, Target, make_s3_target

__all__ = ["PROGRAM", "Target", "make_s3_target"]


@pytest.fixture(autouse=True)
def _aws(aws_sandbox: None) -> None:
    """Every storage test runs without the machine's AWS settings."""


@pytest.fixture
async def store(target: Target) -> AsyncIterator[BlobStore]:
    async with target.store() as store:
        yield store
