"""Database fixtures: every test runs on SQLite (a temp file) and on PostgreSQL (a fresh database).

PostgreSQL is found at ``SCRAPEFLOW_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
each test creates its own database and drops it after. When the server is unreachable the
PostgreSQL half is skipped, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import Access, Customer, FinancialEntity, migrate
from scrapeflow.db import create_engine, session_factory
from scrapeflow.sandbox import Sandbox, SandboxConfig

_PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


# Read at import, before the autouse clean_environ fixture drops SCRAPEFLOW_* variables.
_PG_SETTING = os.environ.get("SCRAPEFLOW_TEST_PG", "")


def _pg_admin_dsn() -> str:
    return _PG_SETTING or _PG_ADMIN


async def _connect_admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(_pg_admin_dsn(), timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        where = make_url(_pg_admin_dsn()).render_as_string(hide_password=True)
        message = f"PostgreSQL unreachable at {where}: {exc!r}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(params=["sqlite", "postgresql"])
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database's async URL, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'bank.db'}"
        return
    admin = await _connect_admin()
    name = f"sf_test_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        base = _pg_admin_dsn().rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
        yield f"{base}/{name}"
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def session(db_url: str) -> AsyncIterator[AsyncSession]:
    """A session on a migrated database."""
    await migrate(db_url)
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as s:
            yield s
    finally:
        await engine.dispose()


@pytest.fixture
async def access_id(session: AsyncSession) -> int:
    """One customer with one access at one bank; the access's id."""
    customer = Customer(external_id="c-1", name="Ana")
    bank = FinancialEntity(code="formbank", name="Form Bank", country="ES")
    session.add_all([customer, bank])
    await session.flush()
    access = Access(customer_id=customer.id, entity_id=bank.id, login="12345678Z", secret=b"tok")
    session.add(access)
    await session.commit()
    return access.id


@pytest.fixture
async def sqlite_url(tmp_path: Path) -> str:
    """A migrated SQLite database, for tests whose point is not the backend."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'bank.db'}"
    await migrate(url)
    return url


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """A fresh sandbox (no hostility, 0-2 ms latency, its clock at the epoch) in a thread."""
    config = SandboxConfig(hostility="none", latency_ms=(0, 2), customers=1000)
    with Sandbox.in_thread(config) as running:
        yield running
