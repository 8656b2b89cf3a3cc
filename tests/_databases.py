"""Databases for tests, fresh for every test (a pytest plugin, see ``tests/conftest.py``).

* ``db_url``: a database migrated to the bank schema's head, on SQLite and on PostgreSQL;
* ``sqlite_url``: the same on SQLite only, for tests whose point is not the backend;
* ``pg_url``: an empty PostgreSQL database, for what only PostgreSQL does;
* ``empty_db_url``: an empty database on each backend, for tests of ``migrate`` itself and of
  what it finds in a database.

Copying a database is quicker than migrating one, so each pytest process migrates one template
per backend, once: a SQLite file that each test gets a copy of, and a PostgreSQL database marked
as a template that each test gets a clone of (``CREATE DATABASE ... TEMPLATE``). Under
pytest-xdist each worker is such a process and migrates templates of its own: one migration per
worker costs less than a template shared between workers would (a lock, and a last worker to
drop it). The names carry the xdist worker (``gw0``…, else ``main``), the process id and a
random part, so workers and concurrent runs on one server do not collide; a test's database is
dropped after it, the template at the end of the session.

PostgreSQL is found at ``SCRAPEFLOW_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
a role that may create databases). When the server is unreachable the PostgreSQL half is
skipped, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from scrapeflow.banking import migrate
from tests._servers import unavailable

__all__: list[str] = []

_T = TypeVar("_T")

# Read at import, before the autouse clean_environ fixture drops SCRAPEFLOW_* variables.
_PG_SETTING = make_url(
    os.environ.get("SCRAPEFLOW_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"
)
_PG_ADMIN_DSN = _PG_SETTING.set(drivername="postgresql").render_as_string(hide_password=False)
_PG_SHOWN = _PG_SETTING.render_as_string(hide_password=True)

# This process's database names: the template is f"{_RUN}_tpl", the tests' f"{_RUN}_{n}". The
# worker's name tells, in a server's list of databases, which worker of a run left one behind.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_RUN = f"sf_test_{_WORKER}_{os.getpid()}_{secrets.token_hex(4)}"
_serial = itertools.count(1)

_BACKENDS = ["sqlite", "postgresql"]


def _pg_url(database: str) -> str:
    """The async URL of ``database`` on the server of ``SCRAPEFLOW_TEST_PG``."""
    url = _PG_SETTING.set(drivername="postgresql+asyncpg", database=database)
    return url.render_as_string(hide_password=False)


def _sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` on a loop of its own in another thread: a session fixture is set up in
    the middle of a test's setup, when that test's event loop may be running in this thread."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _connect_admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(_PG_ADMIN_DSN, timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        unavailable(f"PostgreSQL unreachable at {_PG_SHOWN}: {exc!r}")


async def _drop(admin: asyncpg.Connection, name: str) -> None:
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _create_pg_template(name: str) -> None:
    admin = await _connect_admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            await migrate(_pg_url(name))
            # A clone fails while anyone is connected to its template: let no one connect.
            await admin.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE true ALLOW_CONNECTIONS false')
        except BaseException:
            await _drop(admin, name)
            raise
    finally:
        await admin.close()


async def _drop_pg_template(name: str) -> None:
    admin = await _connect_admin()
    try:
        await admin.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE false')  # a template can't go
        await _drop(admin, name)
    finally:
        await admin.close()


@asynccontextmanager
async def _pg_database(template: str | None) -> AsyncIterator[str]:
    """A new PostgreSQL database (a clone of ``template``, or empty) for one test."""
    admin = await _connect_admin()
    try:
        name = f"{_RUN}_{next(_serial)}"
        source = "" if template is None else f' TEMPLATE "{template}"'
        await admin.execute(f'CREATE DATABASE "{name}"{source}')
        try:
            yield _pg_url(name)
        finally:
            await _drop(admin, name)
    finally:
        await admin.close()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """The name of this process's PostgreSQL template: the bank schema migrated to head."""
    name = f"{_RUN}_tpl"
    _run(_create_pg_template(name))
    yield name
    _run(_drop_pg_template(name))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This process's SQLite template: a file with the bank schema migrated to head."""
    path = tmp_path_factory.mktemp("db-template") / "bank.db"
    # migrate() disposes of its engine: the last connection's close folds the WAL into the file.
    _run(migrate(_sqlite_url(path)))
    return path


def _sqlite_copy(template: Path, tmp_path: Path) -> str:
    path = tmp_path / "bank.db"
    shutil.copyfile(template, path)
    return _sqlite_url(path)


@pytest.fixture(params=_BACKENDS)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The async URL of a database with the bank schema at head (and no rows), on each backend.

    ``migrate(db_url)`` on it is a no-op.
    """
    # Each half asks for its own template only: the SQLite half does not need the server.
    if request.param == "sqlite":
        yield _sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path)
        return
    async with _pg_database(template=request.getfixturevalue("pg_template")) as url:
        yield url


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """An empty PostgreSQL database, for what only PostgreSQL does (LISTEN/NOTIFY…)."""
    async with _pg_database(template=None) as url:
        yield url


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A SQLite database with the bank schema at head, for tests whose point is not the backend."""
    return _sqlite_copy(sqlite_template, tmp_path)


@pytest.fixture(params=_BACKENDS)
async def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The async URL of an empty database (no tables), on each backend."""
    if request.param == "sqlite":
        yield _sqlite_url(tmp_path / "empty.db")
        return
    async with _pg_database(template=None) as url:
        yield url
