"""Alembic environment: runs on the connection ``scrapeflow.db.migrate`` hands over, or, from the
``alembic`` command line, on an async engine made from ``sqlalchemy.url``."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from scrapeflow.banking._models import Base
from scrapeflow.db._engine import create_engine

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


def _offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _offline()
elif (given := context.config.attributes.get("connection")) is not None:
    _run(given)
else:
    asyncio.run(_run_async(context.config.get_main_option("sqlalchemy.url") or ""))
