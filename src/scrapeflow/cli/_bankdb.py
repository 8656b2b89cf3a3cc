"""The bank database as the ``scrapeflow bank`` commands open it: migrated on use, a SQLite
file that does not exist refused unless the command creates it, errors as one line."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from scrapeflow.cli._common import EXIT_INTERRUPTED, err, fail, input_errors, run_async

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from scrapeflow.config import Settings

__all__ = ["customer_ids", "on_bank_db", "with_db"]

T = TypeVar("T")


async def with_db(
    config: Settings, work: Callable[[async_sessionmaker[AsyncSession]], Awaitable[T]]
) -> T:
    """Run ``work`` with sessions of the bank database, migrated first."""
    from scrapeflow.banking import migrate
    from scrapeflow.db import create_engine, session_factory

    await migrate(config.db_url)
    engine = create_engine(config.db_url)
    try:
        return await work(session_factory(engine))
    finally:
        await engine.dispose()


def on_bank_db(
    config: Settings,
    coro: Coroutine[Any, Any, T],
    *,
    interrupted: str = "interrupted: the watchdog frees what was in progress",
    creates: bool = False,
) -> T:
    """Run ``coro`` on the bank database; unless the command ``creates`` it (``migrate``,
    ``add-customer``), a SQLite file that does not exist is refused, not made: a typo in
    ``--db`` must not start an empty database."""
    from scrapeflow.db import database_errors, sqlite_file

    target = sqlite_file(config.db_url)
    if not creates and target is not None and not target.exists():
        coro.close()
        fail(
            f"no database at {str(target)!r} (--db or SCRAPEFLOW_DB_URL): check the path, or "
            "create it with `scrapeflow bank migrate` (adding a customer creates it too)"
        )
    try:
        with input_errors(), database_errors(config.db_url):
            return run_async(coro)
    except KeyboardInterrupt:
        err.print(interrupted)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def customer_ids(customers: Iterable[str]) -> list[str]:
    """The customer ids given, checked before the database is opened."""
    from scrapeflow.banking import validate_customer_id

    with input_errors():
        return [validate_customer_id(customer) for customer in customers]
