"""The distributed job queue: ``scrapeflow_jobs`` keeps each job, procrastinate dispatches it.

:class:`ProcrastinateJobQueue` is the :class:`~scrapeflow.jobs.JobQueue` of several machines
on one PostgreSQL database. A job's row (params, state, progress, result, error, dedupe key,
heartbeat, cancel flag) is written exactly as :class:`~scrapeflow.jobs.SqlJobStore` writes it,
with the same conditional writes; procrastinate carries the *dispatch*: a ``scrapeflow.run``
task per job that wakes a worker through NOTIFY, its workers' liveness, and the abort of a
running job on whichever machine runs it.

* A delivery claims the row in one statement (queued → running, owner = this delivery; a row
  an earlier delivery of the same dispatch left, dead, is taken over in it), and ends it
  ``succeeded``, ``failed`` or ``cancelled`` in one more. Between the two it costs nothing of
  its own: one loop per process stamps every job it runs, heartbeat and progress, in one
  statement every ``heartbeat`` seconds, and reads their cancel flags in one every second. A
  duplicate delivery finds the row taken and does nothing; a delivery whose row was taken
  over stops at the next beat. Every queue delivers at least once: effects are idempotent.
* A lane runs at most its concurrency of jobs at once in a process, parts included: a job
  waiting for its parts holds no place, each part it runs itself takes one.
* procrastinate's worker rides a database outage out (:class:`OutageRidingJobManager`): its
  jobs go on, and those the outage cut are handed back the moment the database answers.
* Stopping a worker lets running jobs finish within ``grace`` seconds; the rest go back to the
  queue (the row to ``queued``, the dispatch to ``todo``) and another worker runs them.
* A sweep every ``sweep_every`` seconds, in every process that opens the queue (workers and
  the API alike, each on its own timer, outside the job queue: it never waits behind the jobs it
  rescues, and no slot it needs can be held by a job waiting on a dead worker) re-queues the
  dispatches of dead workers, puts running rows whose heartbeat stopped back in the queue (or
  fails them after ``max_attempts``), and dispatches queued rows that no dispatch waits for (a
  defer that failed after the row was stored). Its writes are conditional: sweeps that meet do
  each thing once.
* Lanes (:class:`~scrapeflow.jobs.Lane`): a lane's kinds are dispatched on a procrastinate
  queue of their own (``{queue}.{lane}``), which a worker of its own runs with the lane's
  concurrency, beside the worker of the other kinds (``queue``): a refresh is never queued
  behind fetches.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from types import TracebackType
from typing import Any

from procrastinate import App, PsycopgConnector
from procrastinate import JobContext as DispatchContext
from procrastinate.exceptions import AlreadyEnqueued
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow._util.tasks import reraise_if_cancelling, stop_task
from scrapeflow.errors import JobNotFound
from scrapeflow.jobs._batched import Batched
from scrapeflow.jobs._delivery import DeliveryRunner
from scrapeflow.jobs._dispatch import (
    RESUMED_PRIORITY,
    RUN_TASK,
    SWEEP_TASK,
    OutageRidingJobManager,
    RetryReleased,
    dispatch_lock,
    ensure_schema,
    live_dispatches,
    psycopg_conninfo,
    undispatched,
)
from scrapeflow.jobs._model import Job, JobState
from scrapeflow.jobs._pgpool import PromptReconnectPool
from scrapeflow.jobs._reads import StoredJobs
from scrapeflow.jobs._runner import Followers, JobKinds, Lane
from scrapeflow.jobs._store import SqlJobStore

__all__ = ["ProcrastinateJobQueue"]

_log = get_logger(__name__)


class ProcrastinateJobQueue(StoredJobs):
    """A :class:`~scrapeflow.jobs.JobQueue` over procrastinate workers on PostgreSQL.

    >>> async with ProcrastinateJobQueue(url, kinds, concurrency=8) as queue:  # doctest: +SKIP
    ...     job = await queue.submit("fetch", {"urls": "s3://b/urls.txt"})
    ...     done = await queue.wait(job.id)

    ``run_jobs=False``: only submit, look and cancel (the API process); with ``run_jobs=True``
    a procrastinate worker runs up to ``concurrency`` jobs in this process, and takes part in
    the sweep. A job is stalled when its heartbeat is older than ``stalled_after`` (default
    three heartbeats): a killed worker's job runs again elsewhere within about
    ``stalled_after + sweep_every + poll`` seconds. ``poll`` bounds how long a re-queued
    dispatch waits for a worker (new ones wake a worker at once) and how often :meth:`wait`
    looks. ``engine``: the job rows go through this engine (the process's own, shared with
    its other tables) rather than one of the queue's.
    """

    store: SqlJobStore

    def __init__(
        self,
        db_url: str,
        kinds: JobKinds,
        *,
        run_jobs: bool = True,
        concurrency: int = 4,
        queue: str = "scrapeflow",
        heartbeat: float = 5.0,
        stalled_after: float | None = None,
        sweep_every: int = 5,
        poll: float = 1.0,
        grace: float = 10.0,
        max_attempts: int = 5,
        on_change: Callable[[Job], Awaitable[None]] | None = None,
        engine: AsyncEngine | None = None,
        lanes: Sequence[Lane] = (),
    ) -> None:
        if concurrency < 1 or heartbeat <= 0 or poll <= 0 or max_attempts < 1 or grace < 0:
            raise ValueError(
                "concurrency, heartbeat, poll, grace and max_attempts must be positive"
            )
        if not 1 <= sweep_every <= 59:
            raise ValueError("sweep_every must be between 1 and 59 seconds")
        self.store = SqlJobStore(db_url, engine=engine)
        self.kinds = dict(kinds)
        self.run_jobs = run_jobs
        self.concurrency = concurrency
        self.queue = queue
        if any(lane.concurrency < 1 for lane in lanes):
            raise ValueError("a lane's concurrency must be positive")
        self.lanes = tuple(lanes)
        """Lanes of their own for some kinds (``{queue}.{lane}``); the rest share ``queue``."""
        self._queues = {lane.name: f"{queue}.{lane.name}" for lane in self.lanes}
        self.heartbeat = heartbeat
        self.stalled_after = stalled_after if stalled_after is not None else 3 * heartbeat
        if self.stalled_after <= heartbeat:
            raise ValueError("stalled_after must be longer than the heartbeat interval")
        self.poll = poll
        self.grace = grace
        self.sweep_timeout = max(30.0, 6.0 * sweep_every)
        self.max_attempts = max_attempts
        self.on_change = on_change
        """Told of each job submitted or cancelled here, and of those this process runs."""
        self.name = f"{socket.gethostname()[:30]}:{os.getpid()}"
        self.app = App(
            connector=PsycopgConnector(
                pool_factory=PromptReconnectPool,
                conninfo=psycopg_conninfo(db_url),
                min_size=1,
                max_size=concurrency + sum(lane.concurrency for lane in self.lanes) + 3,
            )
        )
        # Its worker rides a database outage out instead of stopping, and its jobs with it.
        self.app.job_manager = OutageRidingJobManager(self.app.connector)
        self._places = {queue: asyncio.Semaphore(concurrency)} | {
            self._queues[lane.name]: asyncio.Semaphore(lane.concurrency) for lane in self.lanes
        }
        """Each lane's places in this process: what it runs at once, parts included."""
        self._runner = DeliveryRunner(
            self.store,
            self.kinds,
            name=self.name,
            heartbeat=self.heartbeat,
            stalled_after=self.stalled_after,
            max_attempts=max_attempts,
            poll=poll,
            tell=self._tell_job,
            followers=lambda dispatch: Followers(self._follow, partial(self._join, dispatch)),
            place_of=self._places.__getitem__,
            queue_of=self._queue_of,
            redispatch=lambda job: self._dispatch(job.id, job.kind, resumed=True, strict=True),
        )
        self._run = self.app.task(
            name=RUN_TASK, queue=queue, pass_context=True, retry=RetryReleased()
        )(self._runner.deliver)
        # Registered, no longer periodic: a sweep an earlier version queued still runs (and
        # does no harm); sweeps now run on each process's own timer (see _sweep_forever).
        sweep = self.app.task(name=SWEEP_TASK, queue=queue, queueing_lock=f"{SWEEP_TASK}:{queue}")
        sweep(self._sweep)
        self.sweep_every = sweep_every
        self._created: set[str] = set()
        self._queueing: Batched[Job, Job] = Batched(self._queue_all, "job queueing")
        self._worker: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> ProcrastinateJobQueue:
        await self.store.open()
        try:
            if await ensure_schema(self.store.engine):
                _log.info("applied procrastinate's schema")
            await self.app.open_async()
        except BaseException:
            await self.store.close()
            raise
        if self.run_jobs:
            self._worker = asyncio.create_task(self._run_workers(), name="procrastinate-workers")
            self._watch = asyncio.create_task(self._runner.watch(), name="job watch")
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="stalled-job sweep")
        return self

    async def _sweep_forever(self) -> None:
        """The sweep every ``sweep_every`` seconds (a random first wait, so that processes
        started together do not sweep in step), until the queue stops. A sweep that fails (the
        database away) is logged; the next one tries again."""
        await asyncio.sleep(random.uniform(0, self.sweep_every))
        while True:
            try:
                await self._sweep(0)
            except Exception as exc:
                _log.warning("the stalled-job sweep failed", error=redact(repr(exc)))
            await asyncio.sleep(self.sweep_every)

    async def _run_workers(self) -> None:
        """A procrastinate worker per lane, and one for the other kinds; when one ends by
        itself (the database went away), the others stop too, and this ends as it did."""
        plan = [(self.queue, self.concurrency, self.name)] + [
            (self._queues[lane.name], lane.concurrency, f"{self.name}:{lane.name}")
            for lane in self.lanes
        ]
        workers = [
            asyncio.create_task(self._one_worker(queue, concurrency, name), name=f"worker {queue}")
            for queue, concurrency, name in plan
        ]
        try:
            done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        for worker in done:
            worker.result()

    async def _one_worker(self, queue: str, concurrency: int, name: str) -> None:
        """procrastinate's worker of ``queue``, started again when it stops by itself (its
        row in ``procrastinate_workers`` pruned by a worker that took this process, held up a
        moment, for dead: it can fetch no job under that id), 1, 2, 4… (at most 30) s apart."""
        pause = 1.0
        while True:
            started = time.monotonic()
            try:
                await self._worker_once(queue, concurrency, name)
            except Exception as exc:
                _log.warning(
                    "a job worker stopped: starting it again", queue=queue, error=redact(repr(exc))
                )
            else:
                return
            pause = 1.0 if time.monotonic() - started > 60 else min(2 * pause, 30.0)
            await asyncio.sleep(pause)

    async def _worker_once(self, queue: str, concurrency: int, name: str) -> None:
        await self.app.run_worker_async(
            queues=[queue],
            name=name,
            concurrency=concurrency,
            wait=True,
            fetch_job_polling_interval=self.poll,
            abort_job_polling_interval=self.poll,
            shutdown_graceful_timeout=self.grace,
            listen_notify=True,
            delete_jobs="successful",  # the record is scrapeflow_jobs
            install_signal_handlers=False,
            update_heartbeat_interval=self.heartbeat,
            stalled_worker_timeout=self.stalled_after,
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.stop()
            await self.app.close_async()
        finally:
            await self.store.close()

    async def stop(self) -> None:
        """Take no new job; let running ones finish within ``grace`` seconds, then put them
        back in the queue, where another worker takes them."""
        sweeper, self._sweeper = self._sweeper, None
        await stop_task(sweeper)
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.cancel()
            try:
                # procrastinate bounds its own shutdown; this bounds it whatever happens
                async with asyncio.timeout(self.grace + 15):
                    await worker
            except asyncio.CancelledError:
                reraise_if_cancelling()  # the worker ended; this stop goes on unless cancelled
            except Exception as exc:
                _log.error("job worker stopped badly", error=redact(repr(exc)))
        watch, self._watch = self._watch, None  # after the runs: they beat until they end
        await stop_task(watch)

    # -- the JobQueue interface ------------------------------------------------------------

    async def submit(
        self,
        kind: str,
        params: Mapping[str, Any] | None = None,
        *,
        dedupe_key: str | None = None,
        submitted_by: str | None = None,
        cost: int = 1,
    ) -> Job:
        """Queue a job of a registered ``kind``; with ``dedupe_key``, the active job holding
        that key is returned instead of a new one. ``submitted_by``: the API key's id that asks
        (its owner), ``cost`` what it takes of that key's quota."""
        job = self._new_job(
            kind, params, dedupe_key, self._now(), submitted_by=submitted_by, cost=cost
        )
        return await self._queue(job)

    async def _queue(self, job: Job) -> Job:
        return await self._queueing(job)

    async def _queue_all(self, jobs: list[Job]) -> list[Job | Exception]:
        """Store the jobs queued at the same moment (a refresh's parts, a burst of submits) in
        one transaction and dispatch them in one statement; in order, the jobs stored, or the
        error that kept one from it (the others are told and dispatched all the same)."""
        stored = await self.store.add_all(jobs)
        # stored now, not found (a dedupe key's holder, a follow-up)
        new = [job for job, found in zip(jobs, stored, strict=True) if found is job]
        self._created.update(job.id for job in new)
        # Told before they are dispatched: a worker may start one the moment it is, and its
        # job.running must come after its job.queued.
        await asyncio.gather(*(self._tell_job(job) for job in new))
        await self._dispatch_all(new)
        return stored

    @property
    def worker(self) -> asyncio.Task[None] | None:
        """The procrastinate worker this process runs (``run_jobs``), while it runs. It may end
        by itself (a database outage it could not ride out): a worker process then opens the
        queue again once the database answers (``scrapeflow worker`` does)."""
        return self._worker

    def _live_counts(self, job_id: str) -> dict[str, int] | None:
        local = self._runner.running.get(job_id)
        return None if local is None else local.counts

    async def cancel(self, job_id: str) -> Job:
        """Cancel a job: a queued one ends at once; a running one is asked to stop (the job
        returned has ``cancel_requested``), and its worker, wherever it is, stops it within
        moments (NOTIFY), or at its next heartbeat."""
        before = await self.store.get(job_id)
        job = await self.store.cancel(job_id, datetime.now(UTC))
        if job is None or before is None:
            raise JobNotFound(f"no job {job_id!r}")
        ended_queued = before.state is JobState.QUEUED and job.state is JobState.CANCELLED
        if ended_queued or (job.state is JobState.RUNNING and job.cancel_requested):
            try:
                manager = self.app.job_manager
                for dispatch in await live_dispatches(manager, job_id):
                    await manager.cancel_job_by_id_async(dispatch, abort=True)
            except Exception as exc:  # the heartbeat still carries the cancel to the worker
                _log.warning(
                    "could not abort a job's dispatch", job=job_id, error=redact(repr(exc))
                )
        if ended_queued:
            await self._tell(job_id)
        return job

    async def wait(self, job_id: str) -> Job:
        """The job once it has ended (bound it with ``asyncio.timeout``)."""
        while True:
            job = await self.get(job_id)
            if job.state.final:
                return job
            event = self._runner.finished.setdefault(job_id, asyncio.Event())
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll):
                        await event.wait()
            finally:
                if not event.is_set():  # only a run in this process sets and drops it
                    self._runner.finished.pop(job_id, None)

    async def requeue_stalled(self) -> list[Job]:
        """The sweep, once: re-queue the dispatches of dead workers, put running jobs silent
        for ``stalled_after`` back in the queue (or fail those that had ``max_attempts``), and
        dispatch queued jobs that no dispatch waits for. The jobs put back or failed, as after.
        """
        manager = self.app.job_manager
        for queue in (self.queue, *self._queues.values()):
            for dispatch in await manager.get_stalled_jobs(
                queue=queue, seconds_since_heartbeat=self.stalled_after
            ):
                try:
                    await manager.retry_job(dispatch, priority=RESUMED_PRIORITY)
                except Exception as exc:  # another sweep got there first
                    _log.info("stalled dispatch not retried", dispatch=dispatch.id, error=repr(exc))
        cutoff = datetime.now(UTC) - timedelta(seconds=self.stalled_after)
        ids = await self.store.requeue_stalled(cutoff, self.max_attempts)
        if ids:
            _log.warning("jobs whose worker stopped are run again", jobs=ids)
        changed: list[Job] = []
        for job_id in ids:
            job = await self.store.get(job_id)
            if job is None:
                continue
            if job.state is JobState.QUEUED:
                await self._dispatch(job_id, job.kind, resumed=True)
            await self._tell(job_id)
            changed.append(job)
        for job_id in await undispatched(self.store.engine, cutoff):
            _log.warning("a queued job had no dispatch: dispatching it", job=job_id)
            queued = await self.store.get(job_id)
            if queued is not None:
                await self._dispatch(job_id, queued.kind, resumed=queued.attempts > 0)
        return changed

    async def _join(self, dispatch: DispatchContext, parent: Job, jobs: Sequence[Job]) -> list[Job]:
        """:meth:`JobContext.join` in the delivery ``dispatch``: the parts still queued run
        here, inside it, as places of their lane free (the parent holds none while it waits);
        those other workers took are waited for. Cancelled by the user, the parent cancels
        them."""
        try:
            return await self._runner.join(dispatch, parent, jobs)
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel_parts(parent, jobs))
            raise

    # -- dispatch and delivery -------------------------------------------------------------

    def _queue_of(self, kind: str) -> str:
        """The procrastinate queue of a job of ``kind``: its lane's, else the queue's."""
        lane = next((lane for lane in self.lanes if lane.holds(kind)), None)
        return self.queue if lane is None else self._queues[lane.name]

    async def _dispatch_all(self, jobs: Sequence[Job]) -> None:
        """:meth:`_dispatch` of new jobs, in one statement when there are several; one by one
        when that fails (one of them already has its dispatch, or the database is away)."""
        if len(jobs) > 1:
            try:
                await self.app.job_manager.batch_defer_jobs_async(
                    [
                        self._run.configure(
                            queueing_lock=dispatch_lock(job.id), queue=self._queue_of(job.kind)
                        ).make_new_job(job_id=job.id)
                        for job in jobs
                    ]
                )
            except Exception:  # noqa: S110 - each is tried, and its error logged, below
                pass
            else:
                return
        for job in jobs:
            await self._dispatch(job.id, job.kind)

    async def _dispatch(
        self, job_id: str, kind: str, *, resumed: bool = False, strict: bool = False
    ) -> None:
        """Defer the job's dispatch on its lane's queue; one that already waits will do (the
        queueing lock). A ``resumed`` job (it ran before: handed back, or its run died) goes
        before the jobs that never ran (:data:`RESUMED_PRIORITY`). An error is logged and left
        to the sweep, which dispatches a queued job without one, or raised when ``strict``
        (the caller tries again: a part handed back while the database is away)."""
        try:
            await self._run.configure(
                queueing_lock=dispatch_lock(job_id),
                queue=self._queue_of(kind),
                priority=RESUMED_PRIORITY if resumed else 0,
            ).defer_async(job_id=job_id)
        except AlreadyEnqueued:
            pass
        except Exception as exc:  # the row stays queued: the sweep dispatches it later
            if strict:
                raise
            _log.warning("could not dispatch a job", job=job_id, error=redact(repr(exc)))

    async def _sweep(self, timestamp: int) -> None:
        # Bounded: a sweep stuck on a dead connection would hold a worker slot for good.
        try:
            async with asyncio.timeout(self.sweep_timeout):
                await self.requeue_stalled()
        except TimeoutError:
            _log.warning("a sweep took too long: the next one goes on", seconds=self.sweep_timeout)
