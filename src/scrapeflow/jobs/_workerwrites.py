"""What a worker of several jobs writes and reads in one statement (the procrastinate backend):
the heartbeat of all its running jobs, their cancel flags, their states, their ends.

:class:`WorkerWrites` is a part of :class:`~scrapeflow.jobs.SqlJobStore`, kept apart so that
the store's own module holds the single-job steps every backend uses."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import String, Text, bindparam, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import UTCDateTime
from scrapeflow.jobs._jobtable import ended_values, job_from_row, jobs_table
from scrapeflow.jobs._model import Job, JobState

__all__ = ["WorkerWrites"]

_BEAT = text(
    """
    UPDATE scrapeflow_jobs AS j
    SET heartbeat_at = :now, progress = CAST(v.progress AS JSON)
    FROM unnest(:ids, :owners, :progress) AS v(id, owner, progress)
    WHERE j.id = v.id AND j.owner = v.owner AND j.state = 'running'
    RETURNING j.id, j.cancel_requested
    """
)
"""Every running job of a worker stamped in one statement (PostgreSQL)."""


class WorkerWrites:
    """Batched steps of one worker process over the jobs it runs."""

    @property
    def engine(self) -> AsyncEngine:
        raise NotImplementedError

    @property
    def single(self) -> AsyncEngine:
        """The engine for reads and one-statement writes
        (:func:`~scrapeflow.db.single_statements`)."""
        raise NotImplementedError

    async def beat(
        self, runs: Mapping[str, tuple[str, dict[str, int]]], now: datetime
    ) -> dict[str, bool]:
        """Stamp the heartbeat and progress of running jobs, each under its run's owner
        (``{job id: (owner, progress)}``), in one statement on PostgreSQL: the ids still held,
        each with whether its cancel was asked (an id left out was taken over, or ended)."""
        if not runs:
            return {}
        if self.engine.dialect.name != "postgresql":
            return await self._beat_each(runs, now)
        ids = list(runs)
        query = _BEAT.bindparams(
            bindparam("now", type_=UTCDateTime()),
            bindparam("ids", type_=ARRAY(String)),
            bindparam("owners", type_=ARRAY(String)),
            bindparam("progress", type_=ARRAY(Text)),
        )
        async with self.single.begin() as connection:
            rows = await connection.execute(
                query,
                {
                    "now": now,
                    "ids": ids,
                    "owners": [runs[job_id][0] for job_id in ids],
                    "progress": [json.dumps(runs[job_id][1]) for job_id in ids],
                },
            )
            return {row.id: bool(row.cancel_requested) for row in rows}

    async def _beat_each(
        self, runs: Mapping[str, tuple[str, dict[str, int]]], now: datetime
    ) -> dict[str, bool]:
        c = jobs_table.c
        held: dict[str, bool] = {}
        async with self.engine.begin() as connection:
            for job_id, (owner, counts) in runs.items():
                row = (
                    await connection.execute(
                        update(jobs_table)
                        .where(c.id == job_id, c.owner == owner, c.state == JobState.RUNNING.value)
                        .values(heartbeat_at=now, progress=counts)
                        .returning(c.id, c.cancel_requested)
                    )
                ).first()
                if row is not None:
                    held[row.id] = bool(row.cancel_requested)
        return held

    async def cancels_asked(self, job_ids: Collection[str]) -> set[str]:
        """Which of these running jobs a user asked to cancel: one indexed read."""
        if not job_ids:
            return set()
        c = jobs_table.c
        query = select(c.id).where(
            c.id.in_(list(job_ids)),
            c.cancel_requested.is_(True),
            c.state == JobState.RUNNING.value,
        )
        async with self.single.connect() as connection:
            return set((await connection.execute(query)).scalars())

    async def states(
        self, job_ids: Collection[str]
    ) -> dict[str, tuple[JobState, str | None, datetime | None]]:
        """The state, owner and heartbeat of each of these jobs (unknown ids left out): one
        read."""
        c = jobs_table.c
        found: dict[str, tuple[JobState, str | None, datetime | None]] = {}
        ids = list(job_ids)
        async with self.single.connect() as connection:
            for start in range(0, len(ids), 500):  # bounded IN lists on every dialect
                rows = await connection.execute(
                    select(c.id, c.state, c.owner, c.heartbeat_at).where(
                        c.id.in_(ids[start : start + 500])
                    )
                )
                found.update(
                    {row.id: (JobState(row.state), row.owner, row.heartbeat_at) for row in rows}
                )
        return found

    async def many(self, job_ids: Sequence[str]) -> list[Job]:
        """These jobs, in the order given (unknown ids left out): one read."""
        if not job_ids:
            return []
        async with self.single.connect() as connection:
            rows = await connection.execute(
                select(jobs_table).where(jobs_table.c.id.in_(list(job_ids)))
            )
            found = {row.id: job_from_row(row._mapping) for row in rows}
        return [found[job_id] for job_id in job_ids if job_id in found]

    async def finish_run(
        self,
        job_id: str,
        owner: str,
        state: JobState,
        now: datetime,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        progress: dict[str, int] | None = None,
    ) -> Job | None:
        """:meth:`finish` that returns the job as ended (None when ``owner`` no longer held
        it): one statement, and what a listener is told needs no second read."""
        c = jobs_table.c
        values = ended_values(state, now, result, error, progress)
        async with self.single.begin() as connection:
            row = (
                await connection.execute(
                    update(jobs_table)
                    .where(c.id == job_id, c.owner == owner, c.state == JobState.RUNNING.value)
                    .values(**values)
                    .returning(*jobs_table.c)
                )
            ).first()
        return None if row is None else job_from_row(row._mapping)
