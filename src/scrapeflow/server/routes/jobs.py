"""``/v1/jobs``: list, get, cancel. A key restricted to customers sees only their refreshes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from scrapeflow.jobs import Job, JobState
from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import JobList, JobOut
from scrapeflow.server._work import BANK_REFRESH

__all__ = ["cancel_job", "get_job", "list_jobs", "router", "visible_job"]

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
Refresher = Annotated[ApiKey, Depends(caller_with(Scope.REFRESH))]
JobId = Annotated[str, "a job id"]


def _visible(key: ApiKey, job: Job) -> bool:
    if not key.customers:
        return True
    return job.kind == BANK_REFRESH and key.sees(str(job.params.get("customer", "")))


async def visible_job(state: State, key: ApiKey, job_id: str) -> Job:
    if len(job_id) > 64:
        raise Problem(404, "job-not-found", "no such job")
    job = await state.queue.get(job_id)  # JobNotFound: 404
    if not _visible(key, job):
        raise Problem(404, "job-not-found", f"no job {job_id!r}")  # not even its existence
    return job


@router.get("", response_model=JobList)
async def list_jobs(
    state: State,
    key: Reader,
    kind: Annotated[str | None, Query(max_length=64)] = None,
    job_state: Annotated[JobState | None, Query(alias="state")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[str | None, Query(max_length=64)] = None,
) -> JobList:
    """Jobs, newest first; ``before`` pages to older ones."""
    states = (job_state,) if job_state else ()
    found: list[Job] = []
    cursor = before
    while len(found) < limit:
        batch = await state.queue.find(kind=kind, states=states, limit=limit, before=cursor)
        found += [j for j in batch if _visible(key, j)]
        if len(batch) < limit:
            cursor = None
            break
        cursor = batch[-1].id
    page = found[:limit]
    more = len(found) > limit or cursor is not None
    return JobList(
        jobs=[JobOut.of(j) for j in page],
        next_before=page[-1].id if more and page else None,
    )


@router.get("/{job_id}", response_model=JobOut)
async def get_job(job_id: JobId, state: State, key: Reader) -> JobOut:
    """One job: state, progress counts, result summary or error."""
    return JobOut.of(await visible_job(state, key, job_id))


@router.post("/{job_id}/cancel", response_model=JobOut)
async def cancel_job(job_id: JobId, state: State, key: Refresher) -> JobOut:
    """Cancel a job: a queued one ends at once, a running one within 2 seconds; what it
    stored stays. Cancelling an ended job changes nothing."""
    job = await visible_job(state, key, job_id)
    if job.kind != BANK_REFRESH and not key.allows(Scope.JOBS):
        raise Problem(403, "forbidden", "this key lacks the 'jobs' scope")
    return JobOut.of(await state.queue.cancel(job.id))
