"""A table made by an older release gets the nullable columns a newer one added, at start-up,
on each backend; its rows stay and read the new columns as empty."""

from __future__ import annotations

import asyncio

from sqlalchemy import Column, Integer, MetaData, String, Table, insert, inspect, select

from scrapeflow.db import UTCDateTime, create_engine, create_tables


def _table(*extra: Column[object]) -> tuple[MetaData, Table]:
    metadata = MetaData()
    table = Table(
        "sf_test_grown",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("name", String(20), nullable=False),
        *extra,
    )
    return metadata, table


async def test_missing_nullable_columns_are_added(empty_db_url: str) -> None:
    engine = create_engine(empty_db_url)
    try:
        old_metadata, old = _table()
        await create_tables(engine, old_metadata)
        async with engine.begin() as connection:
            await connection.execute(insert(old).values(id=1, name="kept"))
        new_metadata, new = _table(
            Column("expires_at", UTCDateTime, nullable=True),
            Column("note", String(30), nullable=True),
        )
        # Processes starting together on the old table: each adds or finds the columns.
        engines = [create_engine(empty_db_url) for _ in range(4)]
        try:
            await asyncio.gather(*(create_tables(e, new_metadata) for e in engines))
        finally:
            for other in engines:
                await other.dispose()
        async with engine.connect() as connection:
            columns = await connection.run_sync(
                lambda c: {col["name"] for col in inspect(c).get_columns("sf_test_grown")}
            )
            row = (await connection.execute(select(new))).one()
    finally:
        await engine.dispose()
    assert columns == {"id", "name", "expires_at", "note"}
    assert (row.id, row.name, row.expires_at, row.note) == (1, "kept", None, None)
