"""``GET /v1/jobs`` writes its page with orjson, not through the models: the same bytes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from scrapeflow.jobs import Job, JobState
from scrapeflow.server._schemas import JobList, JobSummaryOut


def test_a_page_written_straight_is_the_bytes_the_model_writes() -> None:
    at = datetime(2026, 11, 28, 22, 0, 0, tzinfo=UTC)
    jobs = [
        Job("j3", "fetch", {}, JobState.QUEUED, at, submitted_by="k1"),
        Job(
            "j2",
            "bank.refresh",
            {},
            JobState.SUCCEEDED,
            at.replace(microsecond=123_456),
            progress={"accesses": 3, "done": 3},
            attempts=2,
            started_at=at,
            finished_at=at.replace(second=59, microsecond=1),
            customer="ana ñ \u2603",
        ),
        Job(
            "j1",
            "run",
            {},
            JobState.FAILED,
            at,
            error='RuntimeError: "quoted" \\ and \n a new line',
            cancel_requested=True,
            started_at=at,
        ),
    ]
    for next_before in (None, "j1"):
        model = JobList(jobs=[JobSummaryOut.of(j) for j in jobs], next_before=next_before)
        for part in (1, 2, 100):  # written in parts or whole: the same bytes
            written = asyncio.run(JobList.json_of(jobs, next_before, part=part))
            assert written == model.model_dump_json().encode()
    assert asyncio.run(JobList.json_of([], None)) == b'{"jobs":[],"next_before":null}'
