"""Jobs read back from their rows: a listing's fast way gives the jobs one row at a time gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from scrapeflow.jobs import Job, JobScope, JobState
from scrapeflow.jobs._jobtable import job_from_row, jobs_from_rows, jobs_table
from scrapeflow.jobs._store import SqlJobStore


@pytest.mark.asyncio
async def test_rows_made_in_bulk_are_the_jobs_made_one_by_one(tmp_path: Path) -> None:
    store = SqlJobStore(f"sqlite+aiosqlite:///{tmp_path / 'jobs.sqlite'}")
    await store.open()
    try:
        at = datetime(2026, 11, 28, 22, 0, tzinfo=UTC)
        await store.add(Job("a", "fetch", {"urls": ["http://x/1"]}, JobState.QUEUED, at))
        await store.add(
            Job(
                "b",
                "bank.refresh",
                {"customer": "ana"},
                JobState.QUEUED,
                at + timedelta(seconds=1),
                dedupe_key="refresh:ana",
                submitted_by="k1",
                customer="ana",
                cost=3,
            )
        )
        [claimed] = await store.claim("me", at, 1, kinds={"bank.refresh"})
        await store.finish(
            claimed.id, "me", JobState.FAILED, at, result={"n": 1}, error="E", progress={"d": 2}
        )
        async with store.engine.connect() as connection:
            rows = (await connection.execute(select(jobs_table).order_by(jobs_table.c.id))).all()
        assert jobs_from_rows(rows) == [job_from_row(row._mapping) for row in rows]
        assert [job.state for job in jobs_from_rows(rows)] == [JobState.QUEUED, JobState.FAILED]
        # A listing's summaries: the same jobs without their params and results.
        summaries = await store.summaries(scope=JobScope(everything=True), limit=10)
        whole = {job.id: job for job in jobs_from_rows(rows)}
        assert [job.id for job in summaries] == ["b", "a"]
        for job in summaries:
            assert (job.params, job.result) == ({}, None)
            assert job.progress == whole[job.id].progress
            assert (job.state, job.error, job.cost) == (
                whole[job.id].state,
                whole[job.id].error,
                whole[job.id].cost,
            )
        assert jobs_from_rows([]) == []
    finally:
        await store.close()
