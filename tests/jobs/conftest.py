"""Job stores for the job tests: in memory, on SQLite and on PostgreSQL (an empty database)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from scrapeflow.jobs import JobStore, MemoryJobStore, SqlJobStore
from tests._databases import _pg_database


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def job_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobStore]:
    """A fresh job store on each backend (the queue under test opens and closes it)."""
    if request.param == "memory":
        yield MemoryJobStore()
    elif request.param == "sqlite":
        yield SqlJobStore(f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}")
    else:
        async with _pg_database(template=None) as url:
            yield SqlJobStore(url)


@pytest.fixture(params=["sqlite", "postgresql"])
async def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database shared by several queue processes."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
        return
    async with _pg_database(template=None) as url:
        yield url
