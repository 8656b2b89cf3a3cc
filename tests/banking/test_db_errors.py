"""A failed statement's error names the statement, never the values it carried."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from scrapeflow.db import create_engine, write

INSERT = text(
    "INSERT INTO customers (external_id, name, scrape_state, created_at)"
    " VALUES (:id, :name, 'IDLE', CURRENT_TIMESTAMP)"
)
VALUES = {"id": "cust-9", "name": "Jane Secretname"}


async def test_an_error_on_either_engine_leaves_the_parameters_out(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(INSERT, VALUES)
        with pytest.raises(IntegrityError) as failed:
            async with engine.begin() as connection:
                await connection.execute(INSERT, VALUES)
        shown = [str(failed.value), repr(failed.value)]
        with pytest.raises(IntegrityError) as failed:  # a transaction run whole (db.write)
            await write(engine, lambda connection: connection.execute(INSERT, VALUES))
        shown += [str(failed.value), repr(failed.value)]
    finally:
        await engine.dispose()
    assert all("INSERT INTO customers" in message for message in shown[::2])  # what failed
    for message in shown:
        assert "Secretname" not in message and "cust-9" not in message
