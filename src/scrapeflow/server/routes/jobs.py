"""``/v1/jobs``: create (``fetch``, ``run``), list, get, cancel, results.

Who sees what: an unrestricted ``admin`` key every job; any other key the fetch and run jobs
it submitted (their parts included) and the refreshes and one-time codes of its customers (a
key restricted to customers: of those; else of any). Another key's job is a 404, as if it did
not exist. A key restricted to customers creates no job here. A listing is one query, filtered
by those rules in SQL, and shows summaries (no params, no results); one job's view shows its
params bounded (the first items of each list, and their count), URLs with their secrets as
``***``.

Fair use: a key has at most ``max_jobs_per_key`` fetch and run jobs queued or running, a job
split into shards or batches counting each part (429 ``too-many-jobs`` beyond); every URL a
client gives passes the egress policy before the job is queued (422 ``egress-blocked``).

Nothing a client sends names code or a place: executors are registered names, URLs are
fetched, and where a job writes is the service's choice (``jobs_store``, ``jobs_dir``).

``Idempotency-Key``: a POST that carries one gets, for the same key from the same API key
within 24 hours, the job the first one made (202, same id), whatever its state; the same key
with another body is refused (422 ``idempotency-key-reused``). The first job is found by an
index on its key, whatever the number of jobs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse

from scrapeflow.banking import BANK_OTP, BANK_REFRESH
from scrapeflow.jobs import Job, JobScope, JobState
from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import (
    AccessResultOut,
    CrawlJobIn,
    CrawlPageOut,
    FetchItemOut,
    FetchJobIn,
    JobIn,
    JobList,
    JobOut,
    JobResults,
    RunJobIn,
    RunTaskOut,
)
from scrapeflow.server._work import run_batches

__all__ = [
    "cancel_job",
    "create_job",
    "get_job",
    "job_results",
    "job_scope",
    "list_jobs",
    "router",
    "visible_job",
]

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
Maker = Annotated[ApiKey, Depends(caller_with(Scope.JOBS))]
IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="Retry safely: the same key gives the same job (24 hours).",
    ),
]
_IDEMPOTENCY_HOURS = 24
JobId = Annotated[str, "a job id"]
_CUSTOMER_KINDS = frozenset({BANK_REFRESH, BANK_OTP})


def job_scope(key: ApiKey) -> JobScope:
    """The jobs ``key`` sees and may cancel (see the module)."""
    if key.allows(Scope.ADMIN) and not key.customers:
        return JobScope(everything=True)
    if key.customers:
        return JobScope(customer_kinds=_CUSTOMER_KINDS, customers=frozenset(key.customers))
    return JobScope(submitted_by=key.id, customer_kinds=_CUSTOMER_KINDS)


async def visible_job(state: State, key: ApiKey, job_id: str) -> Job:
    """The job, if ``key`` may see it; else 404 ``job-not-found``, as for no job at all."""
    if len(job_id) > 64:
        raise Problem(404, "job-not-found", "no such job")
    job = await state.queue.get(job_id)  # JobNotFound: 404
    if not job_scope(key).allows(job):
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
) -> Response:
    """The jobs this key sees, newest first, as summaries (no params, no results: ``GET
    /v1/jobs/{id}`` has them); ``before`` pages to older ones."""
    states = (job_state,) if job_state else ()
    found = await state.queue.summaries(
        scope=job_scope(key), kind=kind, states=states, limit=limit + 1, before=before
    )
    page = found[:limit]
    next_before = page[-1].id if len(found) > limit else None
    return Response(await JobList.json_of(page, next_before), media_type="application/json")


@router.get("/{job_id}", response_model=JobOut)
async def get_job(job_id: JobId, state: State, key: Reader) -> JobOut:
    """One job: state, progress counts, result summary or error."""
    return JobOut.of(await visible_job(state, key, job_id))


async def _canceller(request: Request) -> ApiKey:
    """A key that may cancel some job: ``refresh`` (a refresh) or ``jobs`` (the others)."""
    try:
        return await caller_with(Scope.REFRESH)(request)
    except Problem as exc:
        if exc.status != 403:
            raise
    try:
        return await caller_with(Scope.JOBS)(request)
    except Problem as exc:
        if exc.status != 403:
            raise
    raise Problem(403, "forbidden", "this key lacks the 'refresh' and 'jobs' scopes")


@router.post("/{job_id}/cancel", response_model=JobOut)
async def cancel_job(
    job_id: JobId, state: State, key: Annotated[ApiKey, Depends(_canceller)]
) -> JobOut:
    """Cancel a job this key sees: a queued one ends at once, a running one within 2 seconds;
    what it stored stays. Cancelling an ended job changes nothing. A refresh or a one-time code
    needs the ``refresh`` scope, any other job the ``jobs`` scope."""
    job = await visible_job(state, key, job_id)
    needed = Scope.REFRESH if job.kind in _CUSTOMER_KINDS else Scope.JOBS
    if not key.allows(needed):
        raise Problem(403, "forbidden", f"this key lacks the {needed.value!r} scope")
    return JobOut.of(await state.queue.cancel(job.id))


@router.post("", status_code=202, response_model=JobOut)
async def create_job(
    body: JobIn, state: State, key: Maker, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Create a ``fetch`` job (URLs into the service's store) or a ``run`` job (tasks through
    registered executors): 202 with the job at once, ``Location`` its URL. Bank jobs are
    created by their customer's endpoints. Every URL must pass the egress policy (422
    ``egress-blocked``); the key's queued and running jobs, with this one's parts, must fit
    its quota (429 ``too-many-jobs``)."""
    if key.customers:
        raise Problem(403, "forbidden", "a key restricted to customers creates no fetch or run job")
    wanted = body.root
    params = _checked_params(wanted)
    await state.egress.check_urls(_client_urls(params))  # EgressBlocked: 422
    dedupe = _dedupe_key(key, idempotency_key) if idempotency_key is not None else None
    job = None
    if dedupe is not None:
        horizon = datetime.now(UTC) - timedelta(hours=_IDEMPOTENCY_HOURS)
        job = await state.queue.latest(dedupe, horizon)
    if job is None:
        cost = 1 + _parts(params)
        async with state.job_quota.turn(key.id):
            # A first request with the same Idempotency-Key may have made it meanwhile.
            job = await state.queue.active(dedupe) if dedupe is not None else None
            if job is None:
                await state.job_quota.check(key.id, cost, state.queue.quota_used)
                job = await state.queue.submit(
                    wanted.kind, params, dedupe_key=dedupe, submitted_by=key.id, cost=cost
                )
    if dedupe is not None and (job.kind != wanted.kind or job.params != params):
        raise Problem(
            422,
            "idempotency-key-reused",
            f"this Idempotency-Key made job {job.id} with another body; use a new key",
        )
    return JSONResponse(
        JobOut.of(job).model_dump(mode="json"),
        status_code=202,
        headers={"Location": f"/v1/jobs/{job.id}"},
    )


def _checked_params(wanted: FetchJobIn | RunJobIn | CrawlJobIn) -> dict[str, Any]:
    """The params as the job keeps them, checked by the library that runs the kind."""
    raw = wanted.params.model_dump(mode="json")
    if isinstance(wanted, FetchJobIn):
        from scrapeflow.fetch import FetchJobParams

        return FetchJobParams.from_params(raw).as_params()  # InputError: 422
    if isinstance(wanted, CrawlJobIn):
        from scrapeflow.crawl import CrawlJobParams

        return CrawlJobParams.from_params(raw).as_params()
    from scrapeflow.executors import RunJobParams

    return RunJobParams.from_params(raw).as_params()


def _dedupe_key(key: ApiKey, idempotency_key: str) -> str:
    """One client's idempotency key, as the queue's dedupe key: another API key's same text
    is another key, and the text itself is not kept."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
    return f"jobs:{key.id}:{digest}"


def _parts(params: dict[str, Any]) -> int:
    """The parts a job will queue (its shards or batches; none when it runs whole): each
    counts in its key's quota, beside the job."""
    from scrapeflow.jobs import even_slices

    split = params.get("shards", params.get("batches", 1))
    items = params.get("urls", params.get("tasks", []))
    if not isinstance(split, int) or split <= 1 or not isinstance(items, list):
        return 0
    return len(even_slices(len(items), split))


def _client_urls(params: dict[str, Any]) -> Iterator[str]:
    """Every URL of a job's params that the client gave: a fetch job's, a run job's tasks',
    a crawl job's start URLs."""
    for url in (*params.get("urls", ()), *params.get("start_urls", ())):
        if isinstance(url, str):
            yield url
    for task in params.get("tasks", ()):
        given = task.get("params") if isinstance(task, dict) else None
        url = given.get("url") if isinstance(given, dict) else None
        if isinstance(url, str):
            yield url


@router.get("/{job_id}/results", response_model=JobResults)
async def job_results(
    job_id: JobId,
    state: State,
    key: Reader,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JobResults:
    """Per item, in the job's order, as it stands now (while the job runs, and after):
    each URL of a ``fetch`` job (outcome, HTTP status, SHA-384 and size of the stored body),
    each task of a ``run`` job (its state, and each executor's status and output), each
    access of a bank job (from its result summary). ``next_cursor`` pages on."""
    from scrapeflow.crawl import CRAWL_KIND, CrawlJobs
    from scrapeflow.executors import RUN_KIND, RunJobs
    from scrapeflow.fetch import FETCH_KIND, FetchJobs

    job = await visible_job(state, key, job_id)
    start = _decode_cursor(cursor, job.id) if cursor else 0
    active = not job.state.final
    items: list[FetchItemOut] | list[RunTaskOut] | list[CrawlPageOut] | list[AccessResultOut]
    if job.kind == FETCH_KIND:
        fetched = await FetchJobs.from_settings(state.settings).outcomes(
            job.id, job.params, active=active, start=start, limit=limit + 1
        )
        items = [FetchItemOut.of(outcome) for outcome in fetched]
    elif job.kind == CRAWL_KIND:
        pages = await CrawlJobs.from_settings(state.settings, engine=state.engine).pages(
            job.id, active=active, start=start, limit=limit + 1
        )
        items = [CrawlPageOut.of(page) for page in pages]
    elif job.kind == RUN_KIND:
        # On the procrastinate backend the statuses are in the service's database: read them
        # through its engine rather than opening one per page.
        run_jobs = RunJobs.from_settings(state.settings, engine=state.engine)
        ran = await run_jobs.outcomes(
            job.id,
            job.params,
            active=active,
            start=start,
            limit=limit + 1,
            batches=run_batches(job.id, job.params),
        )
        items = [RunTaskOut.of(outcome) for outcome in ran]
    else:
        items = _accesses(job)[start : start + limit + 1]
    more = len(items) > limit
    return JobResults(
        job_id=job.id,
        kind=job.kind,
        state=job.state.value,
        items=items[:limit],
        next_cursor=_encode_cursor(job.id, start + limit) if more else None,
    )


def _accesses(job: Job) -> list[AccessResultOut]:
    """A bank job's accesses, from its result summary (none before it ends)."""
    result = job.result or {}
    if job.kind == BANK_REFRESH:
        rows = result.get("accesses") or []
    elif job.kind == BANK_OTP and result:
        rows = [result]
    else:
        rows = []
    return [
        AccessResultOut(
            access_id=row["access_id"],
            bank=row["bank"],
            result=row["result"],
            accounts=row["accounts"],
            movements=row["movements"],
        )
        for row in rows
    ]


def _encode_cursor(job_id: str, position: int) -> str:
    return base64.urlsafe_b64encode(f"{job_id}:{position}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, job_id: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        owner, _, position = raw.rpartition(":")
        if owner != job_id or not position.isdigit():
            raise ValueError
        return int(position)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Problem(
            422, "invalid-cursor", "cursor is not one this API gave for this job"
        ) from None
