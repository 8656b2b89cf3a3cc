"""Schema migrations (Alembic) run from code: no ``alembic.ini`` to ship or find.

The database layer knows how to run migrations, not which: an application passes its own
Alembic script directory (``scrapeflow.banking`` passes ``banking/migrations``).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from scrapeflow.db._engine import create_engine

__all__ = ["alembic_config", "migrate"]


def alembic_config(url: str, script_location: Path) -> Config:
    """An Alembic config for ``url``, e.g. for ``command.revision(..., autogenerate=True)``."""
    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


async def migrate(url: str, script_location: Path, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` of ``script_location``. Idempotent."""
    config = alembic_config(url, script_location)
    engine = create_engine(url)

    def upgrade(connection: Connection) -> None:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    try:
        async with engine.begin() as connection:
            await connection.run_sync(upgrade)
    finally:
        await engine.dispose()
