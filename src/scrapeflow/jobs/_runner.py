"""The embedded job queue: jobs run as asyncio tasks in this process, kept in a :class:`JobStore`.

:class:`EmbeddedJobQueue` claims queued jobs up to ``concurrency``, runs each with the handler of
its kind, stamps a heartbeat on the jobs it holds, and ends each ``succeeded``, ``failed`` or
``cancelled``. Jobs whose heartbeat stopped — their process was killed — are put back in the
queue and run again (a job's effects are idempotent), up to ``max_attempts``. A job queued when
the process stops is simply still queued when it starts again. Stopping (:meth:`stop`) takes
no new job, lets running ones finish within a grace period, then puts them back in the queue.

**Lanes.** Jobs of some kinds may run in a lane of their own (:class:`Lane`: its kinds, its
concurrency): the queue claims for each lane separately, so the jobs of one lane never wait
behind another's (a customer's refresh never waits for fetches). The kinds no lane names share
the queue's ``concurrency``. A lane's concurrency bounds everything it runs, parts included: a
job waiting for its parts (:meth:`JobContext.join`) holds no place while it waits, and each part
takes one like any job.

Cancelling a queued job ends it at once; a running one is stopped within ``poll`` seconds by
the process that runs it (at once when that is this process), and what it had stored stays.

A queue made with ``only_submitted=True`` runs only the jobs its own
:meth:`~EmbeddedJobQueue.submit` returned — those it created and those it joined through their
dedupe key — and watches only those for a stopped heartbeat: a command-line run beside the
service does its own work and leaves the service's queue alone.
:meth:`~EmbeddedJobQueue.requeue_stalled` is the stalled-job sweep as a one-shot call (a
watchdog run from cron).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Protocol

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow._util.tasks import stop_task
from scrapeflow.errors import InputError, JobNotFound, UnknownJobKind
from scrapeflow.jobs._model import Job, JobScope, JobState, JobTally
from scrapeflow.jobs._reads import StoredJobs
from scrapeflow.jobs._store import JobStore

__all__ = [
    "EmbeddedJobQueue",
    "Followers",
    "JobContext",
    "JobHandler",
    "JobKinds",
    "JobQueue",
    "Lane",
]

_log = get_logger(__name__)
_MAX_ERROR = 1_000


class JobQueue(Protocol):
    """Submit jobs, look at them, cancel them. Nothing above ``scrapeflow.jobs`` knows which
    backend runs them."""

    async def submit(
        self,
        kind: str,
        params: Mapping[str, Any] | None = None,
        *,
        dedupe_key: str | None = None,
        submitted_by: str | None = None,
        cost: int = 1,
    ) -> Job: ...

    async def get(self, job_id: str) -> Job: ...

    async def latest(self, dedupe_key: str, since: datetime) -> Job | None: ...

    async def summaries(
        self,
        *,
        scope: JobScope,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]: ...

    async def quota_used(self, submitted_by: str) -> int: ...

    async def active(self, dedupe_key: str) -> Job | None: ...

    async def find(
        self,
        *,
        kind: str | None = None,
        states: Sequence[JobState] = (),
        limit: int = 100,
        before: str | None = None,
    ) -> list[Job]: ...

    async def tally(self, job_ids: Collection[str]) -> JobTally: ...

    async def counts(self) -> dict[tuple[str, JobState], int]: ...

    async def cancel(self, job_id: str) -> Job: ...

    async def wait(self, job_id: str) -> Job: ...


@dataclass(frozen=True, slots=True)
class Lane:
    """Jobs of ``kinds`` run in a lane of their own, up to ``concurrency`` at once, never
    queued behind the other kinds' jobs (nor they behind these).

    >>> Lane("refresh", frozenset({"bank.refresh", "bank.otp"}), 4).holds("bank.otp")
    True
    """

    name: str
    kinds: frozenset[str]
    concurrency: int

    def holds(self, kind: str) -> bool:
        """Whether jobs of ``kind`` run in this lane."""
        return kind in self.kinds


FollowUp = Callable[[Job, str, Mapping[str, Any], str], Awaitable[Job]]
"""How a queue queues a follow-up: ``(parent, kind, params, key) -> the follow-up job``."""
Join = Callable[[Job, Sequence[Job]], Awaitable[list[Job]]]
"""How a queue waits for follow-ups: ``(parent, jobs) -> the jobs, ended``."""
_MAX_FOLLOW_UP_KEY = 200
_CANCEL_WAIT = 2.0
"""Seconds a cancel waits for a job another process runs to stop, before it answers."""


@dataclass(frozen=True, slots=True)
class Followers:
    """What a queue gives a running job to queue follow-ups and wait for them."""

    submit: FollowUp
    join: Join


class JobContext:
    """What a running job's handler gets: the job, a place to report its progress, and the
    queue it runs on, to queue follow-up jobs (:meth:`submit`) and wait for them (:meth:`join`).
    """

    def __init__(self, job: Job, followers: Followers | None = None) -> None:
        self.job = job
        self.counts: dict[str, int] = dict(job.progress)
        self._followers = followers

    @property
    def params(self) -> dict[str, Any]:
        return self.job.params

    def progress(self, **counts: int) -> None:
        """Set progress counters (``done=10, total=300``); stored with the next heartbeat."""
        self.counts.update(counts)

    async def submit(self, kind: str, params: Mapping[str, Any] | None = None, *, key: str) -> Job:
        """Queue a follow-up job of ``kind`` (the next page of a cursor chain, a part of this
        job's work), on the queue this job runs on, to run on any of its workers.

        ``key`` names the follow-up among this job's: run again after a crash, this job queues
        the same key again and gets the job it queued the first time — queued, running or
        ended — never a second one, so a chain never forks. The job is queued at once, whatever
        becomes of this one (a follow-up of a job that then fails still runs; one this job
        :meth:`join` s is cancelled with it)."""
        if not isinstance(key, str) or not 0 < len(key) <= _MAX_FOLLOW_UP_KEY:
            raise InputError(
                f"a follow-up's key is a string of 1 to {_MAX_FOLLOW_UP_KEY} characters"
            )
        return await self._queue().submit(self.job, kind, dict(params or {}), key)

    async def join(self, jobs: Sequence[Job]) -> list[Job]:
        """Wait for follow-ups this job queued to end; the jobs as they ended, in order.

        This job gives its place in its lane back while it waits, and those still queued run
        here, in this job's process, each taking a place as one frees, beside the others
        running where other workers took them: a queue whose every place was taken by jobs
        waiting for their parts still gets them done, and the lane's concurrency bounds all it
        runs, parts included. Cancelled by the user, this job cancels them too; stopped with
        its worker, it leaves them to the queue (and finds them again when it runs again)."""
        return await self._queue().join(self.job, list(jobs))

    def _queue(self) -> Followers:
        if self._followers is None:
            raise RuntimeError("this job was not started by a queue: it has no follow-ups")
        return self._followers


JobHandler = Callable[[JobContext], Awaitable[Mapping[str, Any] | None]]
"""Runs one job: reads ``context.job.params``, reports ``context.progress(...)``, returns the
result summary (JSON-ready) or None. Raising fails the job (its message is recorded); being
cancelled ends it ``cancelled``. A job may run again after a crash: its effects must be
idempotent."""

JobKinds = Mapping[str, JobHandler]
"""The job kinds a queue runs, by name. Kinds are chosen by name only, never by import path."""


class EmbeddedJobQueue(StoredJobs):
    """A :class:`JobQueue` that runs jobs in this process. Use as an async context manager.

    >>> async with EmbeddedJobQueue(SqlJobStore(url), {"echo": echo}) as queue:  # doctest: +SKIP
    ...     job = await queue.submit("echo", {"text": "hi"})
    ...     done = await queue.wait(job.id)

    ``only_submitted``: claim only the jobs :meth:`submit` returned here (created or joined),
    never another process's queued jobs; ``run_jobs=False``: claim nothing (a process that only
    submits, or a watchdog). ``lanes``: kinds run beside the others with a concurrency of their
    own (``concurrency`` is the rest's).
    """

    def __init__(
        self,
        store: JobStore,
        kinds: JobKinds,
        *,
        concurrency: int = 4,
        heartbeat: float = 5.0,
        stalled_after: float | None = None,
        poll: float = 0.5,
        max_attempts: int = 5,
        run_jobs: bool = True,
        only_submitted: bool = False,
        clock: Callable[[], datetime] | None = None,
        on_change: Callable[[Job], Awaitable[None]] | None = None,
        lanes: Sequence[Lane] = (),
    ) -> None:
        if concurrency < 1 or heartbeat <= 0 or poll <= 0 or max_attempts < 1:
            raise ValueError("concurrency, heartbeat, poll and max_attempts must be positive")
        if any(lane.concurrency < 1 for lane in lanes):
            raise ValueError("a lane's concurrency must be positive")
        self.lanes = tuple(lanes)
        """Lanes of their own for some kinds; the rest share ``concurrency``."""
        self.store = store
        self.kinds = dict(kinds)
        self.concurrency = concurrency
        self.heartbeat = heartbeat
        self.stalled_after = stalled_after if stalled_after is not None else 3 * heartbeat
        if self.stalled_after <= heartbeat:
            raise ValueError("stalled_after must be longer than the heartbeat interval")
        self.poll = poll
        self.max_attempts = max_attempts
        self.run_jobs = run_jobs
        self.owner = f"{socket.gethostname()[:30]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._clock = clock or (lambda: datetime.now(UTC))
        self.on_change = on_change
        """Told of each job this process starts and of how it ends (live delivery)."""
        self._created: set[str] = set()
        self._claimable: set[str] | None = set() if only_submitted else None
        """With ``only_submitted``: the ids :meth:`submit` returned, the only ones run here."""
        self._running: dict[str, tuple[asyncio.Task[None], JobContext]] = {}
        self._cancelling: set[str] = set()
        self._written: dict[str, dict[str, int]] = {}
        """Each running job's progress as last written: between beats only a change is."""
        self._checked = -math.inf
        self._joining: set[str] = set()
        """Jobs waiting for their parts (:meth:`_join`): they hold no place of their lane."""
        self._finished: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._woken_for: set[str] | None = None
        """The kinds queued here since the last claim, or None: claim for every lane (a place
        freed, a tick of the poll, jobs other processes may have queued)."""
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self._stop_asked: float | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> EmbeddedJobQueue:
        await self.store.open()
        if self.run_jobs:
            self._loop = asyncio.create_task(self._serve(), name="job-queue")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        await self.store.close()

    def stop_taking(self) -> None:
        """Take no new job from now on (running ones go on, their heartbeats too): the first
        step of a shutdown, at the signal; :meth:`stop`'s grace counts from here."""
        self._stopping = True
        if self._stop_asked is None:
            self._stop_asked = asyncio.get_running_loop().time()

    async def stop(self, grace: float = 10.0) -> None:
        """Take no new job; let running ones finish within ``grace`` seconds (counted from
        :meth:`stop_taking` when it came first), then put them back in the queue (they run
        again after a restart)."""
        self.stop_taking()
        assert self._stop_asked is not None
        grace = max(0.0, grace - (asyncio.get_running_loop().time() - self._stop_asked))
        loop, self._loop = self._loop, None
        await stop_task(loop)
        tasks = [task for task, _ in self._running.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for task, _ in list(self._running.values()):
            task.cancel()  # not in _cancelling: released, not cancelled
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

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
            kind, params, dedupe_key, self._clock(), submitted_by=submitted_by, cost=cost
        )
        return await self._queue(job)

    def _now(self) -> datetime:
        return self._clock()

    async def _queue(self, job: Job) -> Job:
        stored = await self.store.add(job)
        if self._claimable is not None:
            self._claimable.add(stored.id)
        # Woken before the event is stored: a chain's next page is claimed meanwhile. Its
        # ``job.queued`` still comes first (appended before this task lets the loop run).
        self._wake_up(stored.kind)
        if stored is job:  # stored now, not found (a dedupe key's holder, a follow-up)
            self._created.add(job.id)
            await self._tell_job(job)  # as written: no read of it back
        return stored

    def _live_counts(self, job_id: str) -> dict[str, int] | None:
        local = self._running.get(job_id)
        return None if local is None else local[1].counts

    async def cancel(self, job_id: str) -> Job:
        """Cancel a job: a queued one ends at once, a running one within ``poll`` seconds."""
        before = await self.store.get(job_id)
        job = await self.store.cancel(job_id, self._clock())
        if job is None or before is None:
            raise JobNotFound(f"no job {job_id!r}")
        local = self._running.get(job_id)
        if local is not None:
            self._cancelling.add(job_id)
            local[0].cancel()
            await asyncio.gather(local[0], return_exceptions=True)
            return await self.get(job_id)
        if before.state is JobState.QUEUED and job.state is JobState.CANCELLED:
            await self._tell(job_id)  # ended in the queue, never ran
        elif job.state is JobState.RUNNING:
            # Run by another process on this database (another of the service's processes, a
            # command): it stops the job at its poll. The answer waits for that, a while.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CANCEL_WAIT):
                    return await self.wait(job_id)
            return await self.get(job_id)
        return job

    async def requeue_stalled(self, *, silent_for: float | None = None) -> list[Job]:
        """Put back in the queue the running jobs silent for more than ``silent_for`` seconds
        (never less than ``stalled_after``): their process died. One that has had
        ``max_attempts`` fails instead. The jobs as they are after; with ``only_submitted``,
        only this queue's. The queue does this at each heartbeat; a process that runs no job
        (a watchdog) calls it."""
        after = max(silent_for or 0.0, self.stalled_after)
        cutoff = self._clock() - timedelta(seconds=after)
        ids = await self.store.requeue_stalled(cutoff, self.max_attempts, only=self._claimable)
        if ids:
            _log.warning("jobs whose process stopped are run again", jobs=ids)
        found = [await self.store.get(job_id) for job_id in ids]
        return [job for job in found if job is not None]

    async def wait(self, job_id: str) -> Job:
        """The job once it has ended (bound it with ``asyncio.timeout``)."""
        while True:
            job = await self.get(job_id)
            if job.state.final:
                return job
            event = self._finished.setdefault(job_id, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll):
                    await event.wait()

    async def _join(self, parent: Job, jobs: Sequence[Job]) -> list[Job]:
        """:meth:`JobContext.join` here: the parent takes no place of its lane while it waits,
        so its queued parts start in this process as places free (each taking one), like any
        job of their lane."""
        self._joining.add(parent.id)
        self._wake_up()
        try:
            return await self._wait_parts(parent, jobs)
        finally:
            self._joining.discard(parent.id)

    # -- running jobs ----------------------------------------------------------------------

    def _wake_up(self, kind: str | None = None) -> None:
        """Have the dispatcher claim: for a job of ``kind`` just queued here, or (None) for
        whatever may be claimable."""
        if kind is None:
            self._woken_for = None
        elif self._woken_for is not None:
            self._woken_for.add(kind)
        self._wake.set()

    async def _serve(self) -> None:
        next_beat = 0.0
        loop = asyncio.get_running_loop()
        while True:
            # Taken before the claim: a wake while it runs is seen at the next turn, not lost.
            self._wake.clear()
            kinds, self._woken_for = self._woken_for, set()
            try:
                now = loop.time()
                if now >= next_beat:
                    next_beat = now + self.heartbeat
                    await self._beat()
                elif self._running and now - self._checked >= self.poll:
                    self._checked = now
                    await self._check_cancellations()
                if not self._stopping:
                    await self._claim_lanes(kinds)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a database hiccup: try again at the next tick
                _log.warning("job queue tick failed", error=redact(repr(exc)))
                self._woken_for = None
            try:
                async with asyncio.timeout(self.poll):
                    await self._wake.wait()
            except TimeoutError:
                self._woken_for = None  # the poll's tick: what other processes queued too

    async def _claim_lanes(self, kinds: set[str] | None = None) -> None:
        """Claim what each lane has room for, the lanes' kinds apart from the rest's; with
        ``kinds`` (those queued here since the last claim), only in the lanes they run in (a
        chain's next page is not claimed after two empty claims of the other lanes)."""
        laned = frozenset().union(*(lane.kinds for lane in self.lanes))
        # A job waiting for its parts holds no place: they take them.
        running = [
            ctx.job.kind
            for job_id, (_, ctx) in self._running.items()
            if job_id not in self._joining
        ]
        for lane in self.lanes:
            if kinds is not None and not kinds & lane.kinds:
                continue
            free = lane.concurrency - sum(1 for kind in running if lane.holds(kind))
            if free > 0:
                for job in await self.store.claim(
                    self.owner, self._clock(), free, only=self._claimable, kinds=lane.kinds
                ):
                    self._start(job)
        if kinds is not None and kinds <= laned:
            return
        free = self.concurrency - sum(1 for kind in running if kind not in laned)
        if free > 0:
            for job in await self.store.claim(
                self.owner, self._clock(), free, only=self._claimable, other_than=laned
            ):
                self._start(job)

    async def _beat(self) -> None:
        """Stamp what this process runs, note cancellations, requeue what others left stalled."""
        progress = {job_id: dict(ctx.counts) for job_id, (_, ctx) in self._running.items()}
        asked = await self.store.heartbeat(self.owner, progress, self._clock())
        self._written.update(progress)
        self._cancel_local(asked)
        await self.requeue_stalled()

    async def _check_cancellations(self) -> None:
        """Between beats: the progress that changed written, the cancel flags read (one read;
        a stamp of every running job at each tick held SQLite's writer for as many updates)."""
        changed = {
            job_id: dict(ctx.counts)
            for job_id, (_, ctx) in self._running.items()
            if ctx.counts != self._written.get(job_id)
        }
        if changed:
            await self.store.heartbeat(self.owner, changed, self._clock())
            self._written.update(changed)
        self._cancel_local(await self.store.cancels_asked(list(self._running)))

    def _cancel_local(self, asked: set[str]) -> None:
        for job_id in asked:
            local = self._running.get(job_id)
            if local is not None and job_id not in self._cancelling:
                self._cancelling.add(job_id)
                local[0].cancel()

    def _start(self, job: Job) -> None:
        context = JobContext(job, Followers(self._follow, self._join))
        task = asyncio.create_task(self._run(context), name=f"job-{job.id}")
        self._running[job.id] = (task, context)

    async def _run(self, context: JobContext) -> None:
        job = context.job
        state, result, error = JobState.FAILED, None, None
        release = False
        # job.running, as the claim wrote it (no read of it back), told beside the handler: the
        # handler does not wait for the event's write. One turn of the loop lets the telling
        # take its place among the events before anything the handler tells; the job's end is
        # told once it is done.
        told = asyncio.ensure_future(self._tell_job(job))
        try:
            await asyncio.sleep(0)
            handler = self.kinds.get(job.kind)
            if handler is None:
                raise UnknownJobKind(f"no job kind {job.kind!r} in this process")
            outcome = await handler(context)
            state, result = JobState.SUCCEEDED, dict(outcome) if outcome else None
        except asyncio.CancelledError:
            if job.id in self._cancelling:
                state, error = JobState.CANCELLED, "cancelled"
            else:
                release = True  # a shutdown: the job runs again after the restart
        except Exception as exc:
            error = redact(f"{type(exc).__name__}: {exc}")[:_MAX_ERROR]
            _log.info("job failed", job=job.id, kind=job.kind, error=error)
        finally:
            try:
                await asyncio.shield(self._settle(context, state, result, error, release, told))
            finally:
                self._running.pop(job.id, None)
                self._written.pop(job.id, None)
                self._cancelling.discard(job.id)
                event = self._finished.pop(job.id, None)
                if event is not None:
                    event.set()
                self._wake_up()

    async def _settle(
        self,
        context: JobContext,
        state: JobState,
        result: dict[str, Any] | None,
        error: str | None,
        release: bool,
        told: asyncio.Future[None],
    ) -> None:
        job = context.job
        try:
            await told  # job.running first (its telling catches its own errors)
            if release:
                await self.store.release(job.id, self.owner)
            else:
                now, progress = self._clock(), dict(context.counts)
                ended = await self.store.finish(
                    job.id, self.owner, state, now, result=result, error=error, progress=progress
                )
                if ended:  # as this write left it: no read of it back
                    await self._tell_job(
                        replace(
                            job,
                            state=state,
                            finished_at=now,
                            result=result,
                            error=error,
                            progress=progress,
                            owner=None,
                        )
                    )
                else:  # no longer this process's (found stalled, run elsewhere): as it stands
                    await self._tell(job.id)
        except Exception as exc:  # its heartbeat stops: it is found stalled and run again
            _log.error("could not store a job's end", job=job.id, error=redact(repr(exc)))
