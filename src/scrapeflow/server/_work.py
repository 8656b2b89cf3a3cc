"""The job kinds the service runs, by name: what ``POST …/refresh`` and ``POST /v1/jobs`` queue;
and the queue that runs them, on the ``jobs_backend`` setting (the service's own, or
procrastinate workers: the same kinds, in ``scrapeflow worker`` processes).

Bank work runs in a lane of its own (:func:`refresh_lane`, ``refresh_concurrency``): a
customer's refresh or one-time code never waits behind fetch or run jobs (``job_concurrency``).
A refresh spread over workers waits for its ``bank.access`` parts, which are in its lane too;
it cannot deadlock on them: a part still queued when its refresh waits runs inside the
refresh's own slot (:meth:`~scrapeflow.jobs.JobContext.join`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.config import Settings
from scrapeflow.jobs import (
    JobContext,
    JobHandler,
    JobQueue,
    Lane,
    even_slices,
    part_ids,
    run_parts,
)
from scrapeflow.server._events import EventLog

if TYPE_CHECKING:
    from scrapeflow.banking import BankJobEvent
    from scrapeflow.executors import RunJobs
    from scrapeflow.fetch import FeedChainJobs

RUN_BATCH = "batch"
"""The follow-up keys of a run job's batches: batch-0, batch-1…"""

__all__ = [
    "api_job_kinds",
    "chain_job_kinds",
    "job_kinds",
    "job_queue",
    "refresh_lane",
    "run_batches",
]


def refresh_lane(settings: Settings) -> Lane:
    """The lane of bank work: refreshes, their accesses, one-time codes."""
    from scrapeflow.banking import BANK_ACCESS, BANK_OTP, BANK_REFRESH

    kinds = frozenset({BANK_REFRESH, BANK_ACCESS, BANK_OTP})
    return Lane("refresh", kinds, settings.refresh_concurrency)


def job_kinds(
    settings: Settings,
    events: EventLog,
    engine: AsyncEngine | None = None,
    *,
    feed: FeedChainJobs | None = None,
) -> dict[str, JobHandler]:
    """The handlers of this service's job kinds, on ``settings``: the bank's (``bank.refresh``,
    ``bank.access``, ``bank.otp``: what they do is told to ``events`` as it happens, under the
    refresh's job), the API's (``fetch``, ``run``) and the chains' (``feed.page``). On the
    procrastinate backend a refresh is spread over the workers, one job per access. ``engine``:
    the process's engine on ``db_url``, for the jobs that keep state there."""
    from scrapeflow.banking import bank_job_kinds

    async def deliver(event: BankJobEvent) -> None:
        await events.append(event.name, event.data(), customer=event.customer, job_id=event.job_id)

    per_access = settings.jobs_backend == "procrastinate"
    return (
        bank_job_kinds(settings, on_event=deliver, per_access=per_access)
        | api_job_kinds(settings, engine)
        | chain_job_kinds(settings, feed)
    )


def chain_job_kinds(settings: Settings, feed: FeedChainJobs | None = None) -> dict[str, JobHandler]:
    """The kinds that are chains of follow-up jobs, queued by code (not ``POST /v1/jobs``):
    ``feed.page``, a cursor feed walked page by page on any worker (``feed``: its handler, to
    close when the queue stops; else one of the settings' own)."""
    from scrapeflow.fetch import FEED_PAGE_KIND, FeedChainJobs

    return {FEED_PAGE_KIND: (feed or FeedChainJobs.from_settings(settings)).run}


def api_job_kinds(settings: Settings, engine: AsyncEngine | None = None) -> dict[str, JobHandler]:
    """The kinds ``POST /v1/jobs`` creates: ``fetch`` (the bulk fetcher, into the service's
    store), ``run`` (a task list through executors chosen by registered name) and ``crawl``
    (links followed and items read by selectors, without code). Raises
    :class:`~scrapeflow.errors.ConfigError` for a bad fetch setting, before the service starts.
    ``engine``: the process's engine, shared by the run jobs that keep their statuses in the
    database (on the procrastinate backend) instead of one each."""
    from scrapeflow.crawl import CRAWL_KIND, CrawlJobs
    from scrapeflow.executors import RUN_KIND, RunJobs
    from scrapeflow.fetch import FETCH_KIND, FetchJobs

    fetch_jobs = FetchJobs.from_settings(settings)
    run_jobs = RunJobs.from_settings(settings, engine=engine)
    crawl_jobs = CrawlJobs.from_settings(settings, engine=engine)

    async def fetch(context: JobContext) -> Mapping[str, Any]:
        return await fetch_jobs.run_shards(context)

    async def run(context: JobContext) -> Mapping[str, Any]:
        batches = context.params.get("batches", 1)
        if not isinstance(batches, int) or isinstance(batches, bool) or batches <= 1:
            return await run_jobs.run(context.job.id, context.params, context.progress)
        return await _run_batches(run_jobs, context)

    async def crawl(context: JobContext) -> Mapping[str, Any]:
        return await crawl_jobs.run(context.job.id, context.params, context.progress)

    return {FETCH_KIND: fetch, RUN_KIND: run, CRAWL_KIND: crawl}


async def _run_batches(run_jobs: RunJobs, context: JobContext) -> dict[str, Any]:
    """A ``run`` job of several ``batches``: each batch of its tasks a ``run`` job of its own
    (any worker may take one), the job summing what they did."""
    from scrapeflow.executors import RUN_KIND, RunJobParams

    checked = RunJobParams.from_params(context.params, registry=run_jobs.registry)
    whole = checked.as_params()
    common = {k: v for k, v in whole.items() if k not in ("tasks", "batches")}
    slices = even_slices(len(checked.tasks), checked.batches)
    parts = [common | {"tasks": whole["tasks"][s.start : s.stop]} for s in slices]
    ended = await run_parts(context, RUN_KIND, parts, prefix=RUN_BATCH)
    summary: dict[str, Any] = {"batches": [job.id for job in ended]}
    for name in ("tasks", "succeeded", "skipped", "failed"):
        summary[name] = sum(int((job.result or {}).get(name) or 0) for job in ended)
    summary["executors"] = list(checked.executors)
    context.progress(
        done=summary["tasks"],
        total=summary["tasks"],
        succeeded=summary["succeeded"],
        skipped=summary["skipped"],
        failed=summary["failed"],
    )
    return summary


def run_batches(job_id: str, params: Mapping[str, Any]) -> list[tuple[str, range]]:
    """The batches of a ``run`` job split into several: each one's job id and task indexes
    (none for a job of one batch)."""
    batches, tasks = params.get("batches", 1), params.get("tasks")
    if not isinstance(batches, int) or batches <= 1 or not isinstance(tasks, list):
        return []
    slices = even_slices(len(tasks), batches)
    return list(zip(part_ids(job_id, RUN_BATCH, len(slices)), slices, strict=True))


@asynccontextmanager
async def job_queue(
    settings: Settings, events: EventLog, engine: AsyncEngine, *, run_jobs: bool
) -> AsyncIterator[JobQueue]:
    """The queue of ``settings.jobs_backend``, open. ``run_jobs``: this process runs jobs (the
    service on the embedded backend, a worker on procrastinate's); else it only submits, looks
    and cancels (the service on procrastinate's). What the kinds keep between jobs (the feed
    chain's HTTP client) is closed after the queue."""
    from scrapeflow.fetch import FeedChainJobs

    feed = FeedChainJobs.from_settings(settings)
    kinds = job_kinds(settings, events, engine, feed=feed)
    queue: AbstractAsyncContextManager[JobQueue]
    if settings.jobs_backend == "procrastinate":
        from scrapeflow.jobs import ProcrastinateJobQueue

        queue = ProcrastinateJobQueue(
            settings.db_url,
            kinds,
            run_jobs=run_jobs,
            concurrency=settings.job_concurrency,
            heartbeat=settings.job_heartbeat,
            on_change=events.job_changed,
            engine=engine,
            lanes=[refresh_lane(settings)],
        )
    else:
        from scrapeflow.jobs import EmbeddedJobQueue, SqlJobStore

        queue = EmbeddedJobQueue(
            SqlJobStore(settings.db_url, engine=engine),
            kinds,
            concurrency=settings.job_concurrency,
            heartbeat=settings.job_heartbeat,
            run_jobs=run_jobs,
            on_change=events.job_changed,
            lanes=[refresh_lane(settings)],
        )
    try:
        async with queue as opened:
            yield opened
    finally:
        await feed.aclose()
