"""The ``scrapeflow_jobs`` table: its columns and indexes, a job as a row and back, and the
upgrades a table made by an older release gets at start-up (:func:`upgrade_jobs_table`).

Who submitted a job and the customer it works for were added after the first release: a table
made before gets them at start-up (the columns are nullable), with their indexes; its older jobs
get the customer their params name, and no submitter."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    select,
    text,
    update,
)
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.schema import CreateIndex

from scrapeflow.db import UTCDateTime, create_tables
from scrapeflow.jobs._model import ACTIVE_STATES, Job, JobState, customer_of

__all__ = [
    "ended_values",
    "job_from_row",
    "job_row",
    "jobs_from_rows",
    "jobs_table",
    "upgrade_jobs_table",
]

metadata = MetaData()
jobs_table = Table(
    "scrapeflow_jobs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("dedupe_key", String(200)),
    Column("active_key", String(200)),
    Column("progress", JSON, nullable=False),
    Column("error", Text),
    Column("attempts", Integer, nullable=False, default=0),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime),
    Column("finished_at", UTCDateTime),
    Column("heartbeat_at", UTCDateTime),
    Column("owner", String(64)),
    # Added after the first release: nullable, so an older table gets them at start-up.
    Column("submitted_by", String(64)),
    Column("customer", String(64)),
    Column("cost", Integer),
    # What may be large, last: SQLite keeps a row's bytes in order, and reading a column that
    # follows a megabyte of params walked the megabyte's overflow pages (a listing of 200 such
    # jobs read 200 MB). A table made with them in the middle is rebuilt at start-up.
    Column("params", JSON, nullable=False),
    Column("result", JSON),
    # One active job per dedupe key: the key is copied to active_key while the job is queued
    # or running, and cleared when it ends. A plain unique index (NULLs never collide) works the
    # same on every dialect, where a partial index would not.
    Index("ix_scrapeflow_jobs_active_key", "active_key", unique=True),
    Index("ix_scrapeflow_jobs_state_created", "state", "created_at"),
    Index("ix_scrapeflow_jobs_kind_state", "kind", "state"),
    Index("ix_scrapeflow_jobs_submitted_by", "submitted_by", "state"),
    Index("ix_scrapeflow_jobs_customer", "customer", "id"),
    Index("ix_scrapeflow_jobs_dedupe_key", "dedupe_key", "created_at"),
)
_LATER_INDEXES = frozenset(
    {
        "ix_scrapeflow_jobs_submitted_by",
        "ix_scrapeflow_jobs_customer",
        "ix_scrapeflow_jobs_dedupe_key",
    }
)
"""The indexes added after the first release: made at start-up on a table that predates them."""
_FILL_BATCH = 500
_INDEX_LOCK = 0x5C4A9E_0003
"""The PostgreSQL advisory lock processes starting together take turns on to add them."""


async def upgrade_jobs_table(engine: AsyncEngine) -> None:
    """Make the table, or bring one an older release made up to date: the later columns (by
    ``create_tables``), the large columns last, the later indexes, the customer of older jobs."""
    await create_tables(engine, metadata)
    await _large_columns_last(engine)
    # create_tables adds the later columns to an older table, not their indexes.
    later = [ix for ix in jobs_table.indexes if ix.name in _LATER_INDEXES]
    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            lock = text("SELECT pg_advisory_xact_lock(:key)")
            await connection.execute(lock, {"key": _INDEX_LOCK})
        for index in later:
            await connection.execute(CreateIndex(index, if_not_exists=True))
    await _fill_customers(engine)


async def _large_columns_last(engine: AsyncEngine) -> None:
    """On SQLite, a table made before params and result came last is rebuilt with them last,
    in one transaction (a crash leaves the old table whole); elsewhere nothing changes (a
    large value is stored apart from its row)."""
    if engine.dialect.name != "sqlite":
        return
    name = jobs_table.name
    async with engine.connect() as connection:
        info = f"PRAGMA table_info({name})"
        order = [r._mapping["name"] for r in await connection.exec_driver_sql(info)]
        if order.index("params") > order.index("state"):
            return
        await connection.exec_driver_sql("BEGIN IMMEDIATE")  # DDL too, in one transaction
        still = [r._mapping["name"] for r in await connection.exec_driver_sql(info)]
        if still != order:  # another process rebuilt it meanwhile
            await connection.rollback()
            return
        for index in jobs_table.indexes:
            await connection.exec_driver_sql(f"DROP INDEX IF EXISTS {index.name}")
        await connection.exec_driver_sql(f"ALTER TABLE {name} RENAME TO {name}__old")
        await connection.run_sync(jobs_table.create)
        columns = ", ".join(c.name for c in jobs_table.c)
        copy = f"INSERT INTO {name} ({columns}) SELECT {columns} FROM {name}__old"  # noqa: S608
        await connection.exec_driver_sql(copy)  # our table's own names, nothing given
        await connection.exec_driver_sql(f"DROP TABLE {name}__old")
        await connection.commit()


async def _fill_customers(engine: AsyncEngine) -> None:
    """Jobs stored before the customer column (their cost is empty) get the customer their
    params name, once: a restricted key's listing filters on it."""
    c = jobs_table.c
    # Only bank jobs name a customer: the others are marked in one statement, without
    # reading their params (a fetch or run job's may be a megabyte).
    async with engine.begin() as connection:
        await connection.execute(
            update(jobs_table).where(c.cost.is_(None), c.kind.not_like("bank.%")).values(cost=1)
        )
    while True:
        # Read, then write in a transaction of its own: on SQLite a transaction that read
        # and then writes is refused at once when another wrote meanwhile (no busy wait).
        async with engine.connect() as connection:
            rows = (
                await connection.execute(
                    select(c.id, c.params)
                    .where(c.cost.is_(None), c.kind.like("bank.%"))
                    .limit(_FILL_BATCH)
                )
            ).all()
        if not rows:
            return
        async with engine.begin() as connection:
            for row in rows:
                params = json.loads(row.params) if isinstance(row.params, str) else row.params
                customer = customer_of(params) if isinstance(params, dict) else None
                await connection.execute(
                    update(jobs_table)
                    .where(c.id == row.id, c.cost.is_(None))
                    .values(customer=customer, cost=1)
                )
        if len(rows) < _FILL_BATCH:
            return


def job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "params": job.params,
        "state": job.state.value,
        "dedupe_key": job.dedupe_key,
        "active_key": job.dedupe_key if job.state in ACTIVE_STATES else None,
        "progress": job.progress,
        "result": job.result,
        "error": job.error,
        "attempts": job.attempts,
        "cancel_requested": job.cancel_requested,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "heartbeat_at": job.heartbeat_at,
        "owner": job.owner,
        "submitted_by": job.submitted_by,
        "customer": job.customer,
        "cost": job.cost,
    }


_STATES = {state.value: state for state in JobState}
_COLUMNS = (
    "id",
    "kind",
    "state",
    "created_at",
    "dedupe_key",
    "progress",
    "error",
    "attempts",
    "cancel_requested",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "owner",
    "submitted_by",
    "customer",
    "cost",
)
"""The columns of every job row, read or summarised (``params`` and ``result`` are apart)."""


def jobs_from_rows(rows: Sequence[Row[Any]]) -> list[Job]:
    """The jobs of a result's rows, each as :func:`job_from_row` makes it, with the columns
    found once for all (a listing of 500 spent most of its time on look-ups by name)."""
    if not rows:
        return []
    at = {name: index for index, name in enumerate(rows[0]._fields)}
    values = itemgetter(*(at[name] for name in _COLUMNS))
    params, result = at.get("params"), at.get("result")
    jobs = []
    for row in rows:
        (
            ident,
            kind,
            state,
            created,
            dedupe,
            progress,
            error,
            attempts,
            cancel,
            started,
            finished,
            beat,
            owner,
            submitted_by,
            customer,
            cost,
        ) = values(row)
        jobs.append(
            Job(
                id=ident,
                kind=kind,
                params=(_loaded(row[params]) or {}) if params is not None else {},
                state=_STATES[state],
                created_at=created,
                dedupe_key=dedupe,
                progress=_loaded(progress) or {},
                result=_loaded(row[result]) if result is not None else None,
                error=error,
                attempts=attempts,
                cancel_requested=bool(cancel),
                started_at=started,
                finished_at=finished,
                heartbeat_at=beat,
                owner=owner,
                submitted_by=submitted_by,
                customer=customer,
                cost=1 if cost is None else cost,
            )
        )
    return jobs


def _loaded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def job_from_row(row: Any) -> Job:
    def loaded(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    # A summary's row has no params nor result: they stay empty.
    return Job(
        id=row["id"],
        kind=row["kind"],
        params=loaded(row.get("params")) or {},
        state=JobState(row["state"]),
        created_at=row["created_at"],
        dedupe_key=row["dedupe_key"],
        progress=loaded(row["progress"]) or {},
        result=loaded(row.get("result")),
        error=row["error"],
        attempts=row["attempts"],
        cancel_requested=bool(row["cancel_requested"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        heartbeat_at=row["heartbeat_at"],
        owner=row["owner"],
        submitted_by=row["submitted_by"],
        customer=row["customer"],
        cost=1 if row["cost"] is None else row["cost"],
    )


def ended_values(
    state: JobState,
    now: datetime,
    result: dict[str, Any] | None,
    error: str | None,
    progress: dict[str, int] | None,
) -> dict[str, Any]:
    """The columns a job's end writes (its dedupe key and owner let go)."""
    values: dict[str, Any] = {
        "state": state.value,
        "finished_at": now,
        "result": result,
        "error": error,
        "active_key": None,
        "owner": None,
    }
    if progress is not None:
        values["progress"] = progress
    return values
