"""Jobs kept in memory (:class:`MemoryJobStore`): the same contract as SQL, for tests and for a
process that needs no persistence. Nothing survives the process."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from scrapeflow.jobs._model import ACTIVE_STATES, Job, JobScope, JobState, JobTally

__all__ = ["MemoryJobStore"]


class MemoryJobStore:
    """A :class:`~scrapeflow.jobs.JobStore` in a dict. Every step runs without an ``await``
    in the middle, so it is atomic within its event loop."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def add(self, job: Job) -> Job:
        if job.dedupe_key is not None:
            for other in self._jobs.values():
                if other.dedupe_key == job.dedupe_key and other.state in ACTIVE_STATES:
                    return _copy(other)
        if job.id in self._jobs:  # a follow-up queued again: the one queued before
            return _copy(self._jobs[job.id])
        self._jobs[job.id] = _copy(job)
        return job

    async def active(self, key: str | None) -> Job | None:
        if key is None:
            return None
        for job in self._jobs.values():
            if job.dedupe_key == key and job.state in ACTIVE_STATES:
                return _copy(job)
        return None

    async def get(self, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        return None if job is None else _copy(job)

    async def find(
        self,
        *,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        found = [
            _copy(j)
            for j in sorted(self._jobs.values(), key=lambda j: j.id, reverse=True)
            if (kind is None or j.kind == kind)
            and (not states or j.state in states)
            and (before is None or j.id < before)
        ]
        return found[:limit]

    async def latest(self, dedupe_key: str, since: datetime) -> Job | None:
        held = [j for j in self._jobs.values() if j.dedupe_key == dedupe_key]
        recent = [j for j in held if j.created_at >= since]
        return _copy(max(recent, key=lambda j: j.created_at)) if recent else None

    async def summaries(
        self,
        *,
        scope: JobScope,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        found = await self.find(kind=kind, states=states, limit=len(self._jobs), before=before)
        allowed = [j for j in found if scope.allows(j)][:limit]
        return [dataclasses.replace(j, params={}, result=None) for j in allowed]

    async def quota_used(self, submitted_by: str) -> int:
        return sum(
            j.cost
            for j in self._jobs.values()
            if j.submitted_by == submitted_by and j.state in ACTIVE_STATES
        )

    async def counts(self) -> dict[tuple[str, JobState], int]:
        found: dict[tuple[str, JobState], int] = {}
        for job in self._jobs.values():
            found[(job.kind, job.state)] = found.get((job.kind, job.state), 0) + 1
        return found

    async def tally(self, job_ids: Collection[str]) -> JobTally:
        tally = JobTally()
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None:
                tally.add(job.state, 1, job.finished_at)
        return tally

    async def claim(
        self,
        owner: str,
        now: datetime,
        limit: int,
        *,
        only: Collection[str] | None = None,
        kinds: Collection[str] | None = None,
        other_than: Collection[str] = (),
    ) -> list[Job]:
        queued = sorted(
            (
                j
                for j in self._jobs.values()
                if j.state is JobState.QUEUED
                and (only is None or j.id in only)
                and (kinds is None or j.kind in kinds)
                and j.kind not in other_than
            ),
            key=lambda j: (j.created_at, j.id),
        )
        for job in queued[: max(limit, 0)]:
            job.state, job.owner, job.started_at, job.heartbeat_at = (
                JobState.RUNNING,
                owner,
                now,
                now,
            )
            job.attempts += 1
        return [_copy(j) for j in queued[: max(limit, 0)]]

    async def heartbeat(
        self, owner: str, progress: dict[str, dict[str, int]], now: datetime
    ) -> set[str]:
        asked = set()
        for job_id, counts in progress.items():
            job = self._held(job_id, owner)
            if job is not None:
                job.heartbeat_at, job.progress = now, dict(counts)
                if job.cancel_requested:
                    asked.add(job_id)
        return asked

    async def cancels_asked(self, job_ids: Collection[str]) -> set[str]:
        return {
            job_id
            for job_id in job_ids
            if (job := self._jobs.get(job_id)) is not None
            and job.cancel_requested
            and job.state is JobState.RUNNING
        }

    async def finish(
        self,
        job_id: str,
        owner: str,
        state: JobState,
        now: datetime,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        progress: dict[str, int] | None = None,
    ) -> bool:
        job = self._held(job_id, owner)
        if job is None:
            return False
        job.state, job.finished_at, job.result, job.error, job.owner = (
            state,
            now,
            result,
            error,
            None,
        )
        if progress is not None:
            job.progress = dict(progress)
        return True

    async def release(self, job_id: str, owner: str) -> None:
        job = self._held(job_id, owner)
        if job is not None:
            job.state, job.owner, job.heartbeat_at = JobState.QUEUED, None, None

    async def cancel(self, job_id: str, now: datetime) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None:
            return None
        if job.state is JobState.QUEUED:
            job.state, job.finished_at = JobState.CANCELLED, now
        elif job.state is JobState.RUNNING:
            job.cancel_requested = True
        return _copy(job)

    async def requeue_stalled(
        self, older_than: datetime, max_attempts: int, *, only: Collection[str] | None = None
    ) -> list[str]:
        ids = []
        for job in self._jobs.values():
            stale = job.heartbeat_at is not None and job.heartbeat_at < older_than
            if job.state is JobState.RUNNING and stale and (only is None or job.id in only):
                ids.append(job.id)
                job.owner, job.heartbeat_at = None, None
                if job.attempts >= max_attempts:
                    job.state, job.finished_at = JobState.FAILED, older_than
                    job.error = (
                        f"gave up after {max_attempts} attempts: its process stopped each time"
                    )
                else:
                    job.state = JobState.QUEUED
        return ids

    def _held(self, job_id: str, owner: str) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.owner != owner or job.state is not JobState.RUNNING:
            return None
        return job


def _copy(job: Job) -> Job:
    return dataclasses.replace(job, params=dict(job.params), progress=dict(job.progress))
