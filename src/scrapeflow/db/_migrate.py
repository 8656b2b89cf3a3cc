"""Schema migrations (Alembic) run from code: no ``alembic.ini`` to ship or find."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from scrapeflow.db._engine import create_engine

__all__ = ["MIGRATIONS_DIR", "alembic_config", "migrate"]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url``, e.g. for ``command.revision(..., autogenerate=True)``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


async def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` (the latest by default). Idempotent.

    >>> await migrate("sqlite+aiosqlite:///scrapeflow.db")  # doctest: +SKIP
    """
    config = alembic_config(url)
    engine = create_engine(url)

    def upgrade(connection: Connection) -> None:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    try:
        async with engine.begin() as connection:
            await connection.run_sync(upgrade)
    finally:
        await engine.dispose()
