"""A job knows who submitted it and the customer it works for: a database made before these
existed gets their columns and indexes at start-up, on each backend, its jobs kept; a key's
quota and an idempotency key's job are read from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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
    inspect,
)
from sqlalchemy import insert as sql_insert

from scrapeflow.db import UTCDateTime, create_engine
from scrapeflow.jobs import Job, JobScope, JobState, SqlJobStore, new_job_id


def _first_release_table() -> tuple[MetaData, Table]:
    """``scrapeflow_jobs`` as the first release made it."""
    metadata = MetaData()
    table = Table(
        "scrapeflow_jobs",
        metadata,
        Column("id", String(32), primary_key=True),
        Column("kind", String(64), nullable=False),
        Column("params", JSON, nullable=False),
        Column("state", String(16), nullable=False),
        Column("dedupe_key", String(200)),
        Column("active_key", String(200)),
        Column("progress", JSON, nullable=False),
        Column("result", JSON),
        Column("error", Text),
        Column("attempts", Integer, nullable=False, default=0),
        Column("cancel_requested", Boolean, nullable=False, default=False),
        Column("created_at", UTCDateTime, nullable=False),
        Column("started_at", UTCDateTime),
        Column("finished_at", UTCDateTime),
        Column("heartbeat_at", UTCDateTime),
        Column("owner", String(64)),
        Index("ix_scrapeflow_jobs_active_key", "active_key", unique=True),
    )
    return metadata, table


async def test_an_older_jobs_table_gets_owners_and_their_indexes(empty_db_url: str) -> None:
    engine = create_engine(empty_db_url)
    old_id = new_job_id()
    try:
        metadata, old = _first_release_table()
        async with engine.begin() as connection:
            await connection.run_sync(metadata.create_all)
            await connection.execute(
                sql_insert(old).values(
                    id=old_id,
                    kind="bank.refresh",
                    params={"customer": "ana"},
                    state="succeeded",
                    progress={},
                    attempts=1,
                    cancel_requested=False,
                    created_at=datetime.now(UTC),
                )
            )
        store = SqlJobStore(empty_db_url, engine=engine)
        await store.open()
        await store.open()  # idempotent: a second process starting finds them made

        async with engine.connect() as connection:
            columns, indexes = await connection.run_sync(
                lambda sync: (
                    {c["name"] for c in inspect(sync).get_columns("scrapeflow_jobs")},
                    {i["name"] for i in inspect(sync).get_indexes("scrapeflow_jobs")},
                )
            )
        assert {"submitted_by", "customer", "cost"} <= columns
        if engine.dialect.name == "sqlite":  # rebuilt with what may be large last
            async with engine.connect() as connection:
                info = await connection.exec_driver_sql("PRAGMA table_info(scrapeflow_jobs)")
                assert [r._mapping["name"] for r in info][-2:] == ["params", "result"]
        assert {
            "ix_scrapeflow_jobs_submitted_by",
            "ix_scrapeflow_jobs_customer",
            "ix_scrapeflow_jobs_dedupe_key",
        } <= indexes

        kept = await store.get(old_id)
        assert kept is not None and kept.params == {"customer": "ana"}
        assert (kept.submitted_by, kept.customer, kept.cost) == (None, "ana", 1)
        theirs = JobScope(customer_kinds=frozenset({"bank.refresh"}), customers=frozenset({"ana"}))
        assert [job.id for job in await store.summaries(scope=theirs)] == [old_id]

        now = datetime.now(UTC)
        for n, (state, cost) in enumerate(
            [(JobState.RUNNING, 5), (JobState.QUEUED, 1), (JobState.SUCCEEDED, 9)]
        ):
            await store.add(
                Job(
                    id=new_job_id() + str(n),
                    kind="fetch",
                    params={"urls": ["https://example.org/"]},
                    state=state,
                    created_at=now,
                    dedupe_key=f"jobs:k1:{n}",
                    submitted_by="k1",
                    cost=cost,
                )
            )
        assert await store.quota_used("k1") == 6  # the ended job takes no place
        assert await store.quota_used("k2") == 0
        found = await store.latest("jobs:k1:2", now - timedelta(hours=1))
        assert found is not None and found.state is JobState.SUCCEEDED
        assert await store.latest("jobs:k1:2", now + timedelta(hours=1)) is None

        mine = await store.summaries(scope=JobScope(submitted_by="k1"))
        assert len(mine) == 3 and all(job.params == {} for job in mine)
        assert await store.summaries(scope=JobScope(submitted_by="k2")) == []
        everything = await store.summaries(scope=JobScope(everything=True))
        assert old_id in {job.id for job in everything}
        await store.close()
    finally:
        await engine.dispose()
