"""What every job queue backend does the same way over its :class:`JobStore`: making a new job
of a registered kind, reading jobs back (get, find, active, counts, tally), and telling its
``on_change`` listener of a job as stored."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.errors import JobNotFound, UnknownJobKind
from scrapeflow.jobs._model import (
    Job,
    JobScope,
    JobState,
    JobTally,
    customer_of,
    follow_up_id,
    new_job_id,
)
from scrapeflow.jobs._store import JobStore

__all__ = ["StoredJobs"]

_log = get_logger(__name__)


class StoredJobs:
    """The store-backed half of a :class:`~scrapeflow.jobs.JobQueue`. A backend sets ``store``,
    ``kinds`` and ``_created`` and tells, by :meth:`_live_counts`, the fresher progress of the
    jobs it runs itself."""

    store: JobStore
    kinds: dict[str, Any]
    on_change: Callable[[Job], Awaitable[None]] | None
    _created: set[str]

    def _new_job(
        self,
        kind: str,
        params: Mapping[str, Any] | None,
        dedupe_key: str | None,
        now: datetime,
        parent: Job | None = None,
        key: str = "",
        *,
        submitted_by: str | None = None,
        cost: int = 1,
    ) -> Job:
        """A queued job of a registered ``kind`` (:class:`UnknownJobKind` names the known); a
        follow-up of ``parent`` under ``key`` has the id those two make (:func:`follow_up_id`),
        and its submitter and customer; it costs nothing of the quota (its job counted it).
        """
        if kind not in self.kinds:
            known = ", ".join(sorted(self.kinds)) or "none"
            raise UnknownJobKind(f"no job kind {kind!r} (known: {known})")
        given = dict(params or {})
        if parent is not None:
            submitted_by, cost = parent.submitted_by, 0
        return Job(
            id=new_job_id() if parent is None else follow_up_id(parent.id, key),
            kind=kind,
            params=given,
            state=JobState.QUEUED,
            created_at=now,
            dedupe_key=dedupe_key,
            submitted_by=submitted_by,
            customer=customer_of(given) or (parent.customer if parent is not None else None),
            cost=cost,
        )

    async def _follow(self, parent: Job, kind: str, params: Mapping[str, Any], key: str) -> Job:
        """Queue the follow-up ``key`` of job ``parent`` (:meth:`JobContext.submit`)."""
        return await self._queue(self._new_job(kind, params, None, self._now(), parent, key))

    async def _wait_parts(self, parent: Job, jobs: Sequence[Job]) -> list[Job]:
        """Wait for ``parent``'s follow-ups ``jobs`` to end. Cancelled while the user cancels
        ``parent``, cancel those still active (a stopped worker leaves them to the queue)."""
        try:
            return [await self.wait(job.id) for job in jobs]
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel_parts(parent, jobs))
            raise

    async def _cancel_parts(self, parent: Job, jobs: Sequence[Job]) -> None:
        try:
            row = await self.store.get(parent.id)
            if row is None or not row.cancel_requested:
                return
            await asyncio.gather(*(self._cancel_quietly(job.id) for job in jobs))
        except Exception as exc:  # they run to their end: cancel them by their ids
            _log.warning("could not cancel a job's parts", job=parent.id, error=redact(repr(exc)))

    async def _cancel_quietly(self, job_id: str) -> None:
        with contextlib.suppress(JobNotFound):
            await self.cancel(job_id)

    async def wait(self, job_id: str) -> Job:
        raise NotImplementedError

    async def cancel(self, job_id: str) -> Job:
        raise NotImplementedError

    async def _queue(self, job: Job) -> Job:
        """Store ``job`` and hand it to the backend's workers; the job stored (another one when
        its dedupe key or id was taken)."""
        raise NotImplementedError

    def _now(self) -> datetime:
        return datetime.now(UTC)

    async def _tell(self, job_id: str) -> None:
        """Tell ``on_change`` the job as stored now."""
        if self.on_change is None:
            return
        try:
            job = await self.store.get(job_id)
            if job is not None:
                await self.on_change(job)
        except Exception as exc:  # a broken listener must not break the queue
            _log.warning("job listener failed", job=job_id, error=redact(repr(exc)))

    async def _tell_job(self, job: Job) -> None:
        """Tell ``on_change`` the job as just stored (by the write that returned it: no read)."""
        if self.on_change is None:
            return
        try:
            await self.on_change(job)
        except Exception as exc:  # a broken listener must not break the queue
            _log.warning("job listener failed", job=job.id, error=redact(repr(exc)))

    def _live_counts(self, job_id: str) -> dict[str, int] | None:
        """The progress of a job this process runs, fresher than its last heartbeat."""
        return None

    def submitted_here(self, job_id: str) -> bool:
        """Whether :meth:`submit` of this queue created the job (False: it joined the active job
        holding the dedupe key, or never saw it)."""
        return job_id in self._created

    async def get(self, job_id: str) -> Job:
        job = await self.store.get(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r}")
        live = self._live_counts(job_id)
        if live is not None:
            job.progress = dict(live)
        return job

    async def find(
        self,
        *,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        """Newest first; ``before`` a job id (the page after it)."""
        return await self.store.find(kind=kind, states=states, limit=limit, before=before)

    async def latest(self, dedupe_key: str, since: datetime) -> Job | None:
        """The newest job created since ``since`` that held ``dedupe_key`` (active or ended):
        one indexed look-up."""
        return await self.store.latest(dedupe_key, since)

    async def summaries(
        self,
        *,
        scope: JobScope,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]:
        """The jobs ``scope`` allows, newest first, without params and result (one query)."""
        return await self.store.summaries(
            scope=scope, kind=kind, states=states, limit=limit, before=before
        )

    async def quota_used(self, submitted_by: str) -> int:
        """What the active jobs of API key ``submitted_by`` take of its quota."""
        return await self.store.quota_used(submitted_by)

    async def active(self, dedupe_key: str) -> Job | None:
        """The queued or running job that holds ``dedupe_key`` (what ``submit`` with that key
        would return), or None."""
        return await self.store.active(dedupe_key)

    async def counts(self) -> dict[tuple[str, JobState], int]:
        """How many jobs there are of each kind in each state (what metrics show)."""
        return await self.store.counts()

    async def tally(self, job_ids: Collection[str]) -> JobTally:
        """How many of ``job_ids`` are in each state (unknown ids are left out), and when the
        last of them ended."""
        return await self.store.tally(job_ids)
