"""Running procrastinate's deliveries of jobs: claim the row, watch every run, store its end.

A delivery of ``scrapeflow.run`` claims the job's row in ``scrapeflow_jobs`` (queued → running,
owner = this run; a row whose run is known dead is taken over in the same statement), runs the
handler of its kind, and ends the row ``succeeded``, ``failed`` or ``cancelled``. Every write is
conditional on the owner, so a duplicate or a zombie delivery never ends a job twice.

**One watch per process.** The runs of a process share one loop (:meth:`DeliveryRunner.watch`):
every second it reads, in one statement, which of its jobs a user asked to cancel; every
``heartbeat`` seconds it stamps all of them, heartbeat and progress, in one statement too, and
learns from the same statement which were taken over (the sweep found them silent and gave them
to another worker). A job costs no statement of its own between its claim and its end.

**Places.** A lane runs at most its concurrency of jobs at once in a process, parts included:
each run holds a place of its lane (:class:`asyncio.Semaphore`); a job waiting for its parts
(:meth:`DeliveryRunner.join`) gives its place back while it waits, and each part it runs itself
takes one like any job. So a refresh of three accesses on a lane of 8 is three of the 8 while
its accesses run, none while it waits for accesses other workers run.

How a run ends depends on what stopped it:

* a user's abort (procrastinate cancels the task) or a cancel seen by the watch: the job ends
  ``cancelled`` (the dispatch ``aborted``);
* the worker's shutdown after its grace period: the row goes back to ``queued`` and
  :class:`~scrapeflow.jobs._dispatch.Released` sends the dispatch back to the queue;
* the watch finding the row taken over: nothing is written, the new owner has it;
* the watch unable to stamp it for nearly as long as the sweep waits before giving it to
  another worker (the database away): it is handed back, stored once the database answers.

A handler that fails because the database went away under it (:func:`database_lost`: a
PostgreSQL restart, a cut connection) has not failed as a job: its run is handed back like a
shutdown's, and runs again (its handler must be idempotent, as every handler is), up to
``max_attempts`` runs in all; the last one's error fails it. An end that cannot be stored
because the database is away is tried again every half second until it can (for
``_STORE_WAIT`` seconds): the job runs again as soon as the database is back, not once the
sweep finds it silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from procrastinate import JobContext as DispatchContext
from procrastinate.job_context import AbortReason

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.errors import UnknownJobKind
from scrapeflow.jobs._dispatch import (
    Released,
    claim_run,
    database_lost,
    earlier_run,
    run_owner,
    run_tag,
)
from scrapeflow.jobs._model import Job, JobState
from scrapeflow.jobs._partwatch import PartStates, next_tick
from scrapeflow.jobs._runner import Followers, JobContext, JobKinds
from scrapeflow.jobs._store import SqlJobStore

__all__: list[str] = []

_log = get_logger(__name__)
_MAX_ERROR = 1_000
_FINISH_TRIES = 3
"""Attempts to store how a run ended, on an error that is not the database going away."""
_STORE_WAIT = 60.0
"""Seconds an end is tried again while the database is away, before it is left to the sweep."""
_CANCEL_TICK = 1.0
"""Seconds between two looks at the cancel flags of the jobs a process runs (one statement)."""
_Outcome = tuple[JobState, dict[str, Any] | None, str | None]
_RUN_AGAIN = None
"""The outcome of a run the database went away under: hand the job back, to run again."""
T = TypeVar("T")


@dataclass(eq=False)
class _Run:
    """A job running in this process: its row's owner, its lane's place, what stopped it."""

    context: JobContext
    owner: str
    place: asyncio.Semaphore
    holds_place: bool = True
    task: asyncio.Task[_Outcome | None] | None = None
    stamped: float = field(default_factory=time.monotonic)
    """When its heartbeat was last stored (monotonic): the claim, then each beat."""
    stopped: str | None = None
    """Why the watch stopped it: ``cancel``, ``lost`` (taken over) or ``silent``."""
    told: asyncio.Future[None] | None = None
    """Its ``job.running`` being told: its end is told once that is done."""

    @property
    def job(self) -> Job:
        return self.context.job


class DeliveryRunner:
    """Runs the deliveries of jobs that procrastinate's worker hands to this process."""

    def __init__(
        self,
        store: SqlJobStore,
        kinds: JobKinds,
        *,
        name: str,
        heartbeat: float,
        stalled_after: float,
        max_attempts: int,
        poll: float,
        tell: Callable[[Job], Awaitable[None]],
        followers: Callable[[DispatchContext], Followers],
        place_of: Callable[[str], asyncio.Semaphore],
        queue_of: Callable[[str], str],
        redispatch: Callable[[Job], Awaitable[None]],
    ) -> None:
        self._store = store
        self._kinds = kinds
        self.name = name
        self.heartbeat = heartbeat
        self.stalled_after = stalled_after
        self.max_attempts = max_attempts
        self.poll = poll
        self._tell = tell
        self._followers = followers
        self._place_of = place_of
        """A lane's places in this process, by its procrastinate queue."""
        self._queue_of = queue_of
        """The procrastinate queue of a job's kind (its lane's)."""
        self._redispatch = redispatch
        self._runs: dict[str, _Run] = {}
        self.running: dict[str, JobContext] = {}
        """The jobs running here, with their live progress."""
        self.finished: dict[str, asyncio.Event] = {}
        """Set when a job running here ends (what the queue's ``wait`` listens to)."""
        self._part_states = PartStates(self._store.states)
        """The states of the parts the jobs here wait for: one read a ``poll`` for all."""

    # -- deliveries and parts --------------------------------------------------------------

    async def deliver(self, dispatch: DispatchContext, job_id: str) -> None:
        """procrastinate's ``scrapeflow.run`` task: run job ``job_id`` if it is still to run."""
        tag = run_tag(dispatch.job.id, dispatch.job.attempts)
        owner = run_owner(self.name, tag, secrets.token_hex(3))
        place = self._place_of(dispatch.job.queue)
        await place.acquire()
        try:
            job = await self._claim(dispatch, job_id, owner, inline=False)
        except BaseException:
            place.release()
            raise
        if job is None:
            place.release()
            return  # cancelled, ended, or running on a live worker: a duplicate delivery
        await self._run(dispatch, _Run(JobContext(job, self._followers(dispatch)), owner, place))

    async def _run_inline(
        self, dispatch: DispatchContext, job: Job, place: asyncio.Semaphore, seated: set[str]
    ) -> None:
        """Run follow-up ``job`` here, inside the delivery ``dispatch`` (a part its job waits
        for), once a place of its lane is free, if it is still to run then (its id joins
        ``seated`` once it has the place). Stopped with that delivery, it ends as the delivery
        does: a user's abort cancels it, a shutdown hands it back to the queue."""
        tag = run_tag(dispatch.job.id, dispatch.job.attempts)
        owner = run_owner(self.name, tag, secrets.token_hex(3), part=True)
        await place.acquire()
        seated.add(job.id)
        try:
            claimed = await self._claim(dispatch, job.id, owner, inline=True)
        except BaseException:
            place.release()
            raise
        if claimed is None:
            place.release()
            return
        run = _Run(JobContext(claimed, self._followers(dispatch)), owner, place)
        # Released: back in the queue, where a dispatch (or this job's next look) runs it.
        with contextlib.suppress(Released):
            await self._run(dispatch, run, part=True)

    async def _claim(
        self, dispatch: DispatchContext, job_id: str, owner: str, *, inline: bool
    ) -> Job | None:
        now = datetime.now(UTC)
        dead_before = now - timedelta(seconds=self.stalled_after)
        job = await claim_run(
            self._store.single,
            job_id,
            owner,
            now,
            dead_before=dead_before,
            missed_before=self._missed_before(now),
            max_attempts=self.max_attempts,
            dispatch_id=dispatch.job.id,
            attempt=dispatch.job.attempts,
            inline=inline,
        )
        if job is not None:
            return job
        # Not claimed: ended, running live, or run dead too often (then the sweep's rule fails
        # it, here at once).
        current = await self._store.get(job_id)
        if current is None or current.state is not JobState.RUNNING:
            return None
        dead = self._dead(current.owner, current.heartbeat_at, dispatch, now)
        spent = dead and current.attempts >= self.max_attempts
        if spent and await self._store.requeue_stalled(now, self.max_attempts, only=[job_id]):
            await self._tell_id(job_id)
        return None

    def _missed_before(self, now: datetime) -> datetime:
        """A run whose row was last stamped before this has missed two of its beats."""
        return now - timedelta(seconds=2 * self.heartbeat + _CANCEL_TICK)

    def _dead(
        self,
        owner: str | None,
        stamped: datetime | None,
        dispatch: DispatchContext,
        now: datetime,
    ) -> bool:
        """Whether the run ``owner`` of a running row stamped at ``stamped`` is known dead:
        silent for ``stalled_after``, or an earlier delivery of ``dispatch`` that missed two
        beats (what :func:`claim_run` takes over)."""
        if stamped is None:
            return True
        if stamped < now - timedelta(seconds=self.stalled_after):
            return True
        earlier = earlier_run(owner, dispatch.job.id, dispatch.job.attempts)
        return earlier and stamped < self._missed_before(now)

    async def _run(self, dispatch: DispatchContext, run: _Run, *, part: bool = False) -> None:
        job = run.job
        self._runs[job.id] = run
        self.running[job.id] = run.context
        try:
            await self._run_claimed(dispatch, run, part=part)
        finally:
            self._runs.pop(job.id, None)
            self.running.pop(job.id, None)
            if run.holds_place:
                run.holds_place = False
                run.place.release()
            event = self.finished.pop(job.id, None)
            if event is not None:
                event.set()

    async def _run_claimed(self, dispatch: DispatchContext, run: _Run, *, part: bool) -> None:
        job = run.job
        if job.cancel_requested:  # asked while its previous worker was dying
            await self._settle(run, (JobState.CANCELLED, None, "cancelled"), part=part)
            return
        # job.running is told beside the handler, not before it: the handler does not wait for
        # the event's write. Started first, the telling takes its place among the events
        # before anything the handler tells; the job's end is told once it is done.
        run.told = asyncio.ensure_future(self._tell(job))
        work = asyncio.create_task(self._handle(run.context), name=f"job-{job.id}")
        run.task = work
        try:
            outcome = await work
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():  # procrastinate aborted us
                if dispatch.abort_reason() is AbortReason.USER_REQUEST:
                    await self._settle(run, (JobState.CANCELLED, None, "cancelled"), part=part)
                    raise  # the dispatch ends `aborted`
                await self._settle(run, _RUN_AGAIN, part=part)
                raise Released from None  # RetryReleased puts the dispatch back in the queue
            if run.stopped == "lost":
                await asyncio.shield(self._told(run))  # before the new owner's events
                return  # another delivery holds the job now
            if run.stopped == "silent":
                outcome = _RUN_AGAIN
            else:
                outcome = (JobState.CANCELLED, None, "cancelled")
        await self._settle(run, outcome, part=part)
        if outcome is _RUN_AGAIN:
            raise Released  # RetryReleased puts the dispatch back in the queue

    async def _handle(self, context: JobContext) -> _Outcome | None:
        job = context.job
        try:
            handler = self._kinds.get(job.kind)
            if handler is None:
                raise UnknownJobKind(f"no job kind {job.kind!r} in this process")
            outcome = await handler(context)
        except Exception as exc:
            error = redact(f"{type(exc).__name__}: {exc}")[:_MAX_ERROR]
            if database_lost(exc) and job.attempts < self.max_attempts:
                _log.warning(
                    "the database went away under a job: it runs again",
                    job=job.id,
                    kind=job.kind,
                    error=error,
                )
                return _RUN_AGAIN
            _log.info("job failed", job=job.id, kind=job.kind, error=error)
            return JobState.FAILED, None, error
        return JobState.SUCCEEDED, dict(outcome) if outcome else None, None

    # -- a job waiting for its parts ---------------------------------------------------------

    async def join(self, dispatch: DispatchContext, parent: Job, jobs: Sequence[Job]) -> list[Job]:
        """:meth:`JobContext.join` in the delivery ``dispatch``: wait for ``jobs`` to end,
        running here those still queued (or left by an earlier delivery of the same dispatch,
        dead) as places of their lanes free, beside those other workers took. The parent gives
        its own place back while it waits. Every job of this process waiting for its parts
        shares one read a ``poll`` (:mod:`~scrapeflow.jobs._partwatch`)."""
        run = self._runs.get(parent.id)
        lent = run is not None and run.holds_place
        if run is not None and lent:
            run.holds_place = False
            run.place.release()
        by_id = {job.id: job for job in jobs}
        inline: dict[str, asyncio.Task[None]] = {}
        seated: set[str] = set()
        attempt = dispatch.job.attempts
        try:
            while True:
                try:
                    states = await self._part_states.read(list(by_id))
                except Exception as exc:
                    if not database_lost(exc):
                        raise
                    # The database away: the parts running here go on (each stores its end
                    # once it is back); look again at the next poll.
                    await asyncio.sleep(next_tick(self.poll))
                    continue
                waiting = [i for i in by_id if i in states and not states[i][0].final]
                if not waiting:
                    break
                now = datetime.now(UTC)
                for job_id in waiting:
                    state, owner, stamped = states[job_id]
                    takeable = state is JobState.QUEUED or (
                        earlier_run(owner, dispatch.job.id, attempt)
                        and self._dead(owner, stamped, dispatch, now)
                    )
                    here = inline.get(job_id)
                    if takeable and (here is None or here.done()):
                        seated.discard(job_id)
                        part = by_id[job_id]
                        inline[job_id] = asyncio.create_task(
                            self._run_inline(
                                dispatch,
                                part,
                                self._place_of(self._queue_of(part.kind)),
                                seated,
                            ),
                            name=f"part-{job_id}",
                        )
                running_here = {t for t in inline.values() if not t.done()}
                # a part not running here (nor seated to: another worker may take it first)
                elsewhere = any(
                    i not in inline or inline[i].done() or i not in seated for i in waiting
                )
                if not running_here:
                    await asyncio.sleep(next_tick(self.poll))
                # Read again at the next tick, or once no part runs here any more: a part that
                # ended here while others still run here needs no read of its own. Tasks still
                # waiting for a place do not count as running (their part may have ended
                # elsewhere), and while there are some, the tick comes too.
                while running_here:
                    unseated = any(i not in seated for i, t in inline.items() if t in running_here)
                    ended, running_here = await asyncio.wait(
                        running_here,
                        timeout=next_tick(self.poll) if elsewhere or unseated else None,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    seated_left = any(i in seated for i, t in inline.items() if t in running_here)
                    if not ended or not seated_left:
                        break
            # Every part has ended, and a task of ours may not have: one still waiting for a
            # place while another worker ran its part has nothing left to run; one that has its
            # place is on its way out (between storing its part's end and giving it back).
            for job_id, task in inline.items():
                if job_id not in seated:
                    task.cancel()
            if inline:
                await asyncio.wait(inline.values())
        except BaseException:
            for task in inline.values():
                task.cancel()
            await asyncio.gather(*inline.values(), return_exceptions=True)
            raise
        for job_id, task in inline.items():
            if not task.cancelled() and task.exception() is not None:
                # its row says how it ended, or the sweep will
                error = redact(repr(task.exception()))
                _log.error("a job's part failed to run", job=job_id, error=error)
        if run is not None and lent:
            await run.place.acquire()
            run.holds_place = True
        return await self._stored(lambda: self._store.many(list(by_id)))

    # -- the watch: one loop for every run of this process -----------------------------------

    async def watch(self) -> None:
        """Every second, which runs' cancels were asked (one read); every ``heartbeat``
        seconds, their heartbeats and progress stamped (one write, which also tells the runs
        taken over). A run the database could not stamp for ``stalled_after - heartbeat``
        seconds is handed back (the sweep may be about to give it to another worker)."""
        tick = min(_CANCEL_TICK, self.heartbeat)
        next_beat = time.monotonic() + self.heartbeat
        failing = False
        while True:
            await asyncio.sleep(tick)
            runs = [
                run
                for run in self._runs.values()
                if run.task is not None and not run.task.done() and run.stopped is None
            ]
            if not runs:
                continue
            now = time.monotonic()
            beat = failing or now >= next_beat
            try:
                async with asyncio.timeout(self.heartbeat):
                    if beat:
                        held = await self._store.beat(
                            {r.job.id: (r.owner, dict(r.context.counts)) for r in runs},
                            datetime.now(UTC),
                        )
                        next_beat = now + self.heartbeat
                        asked = {job_id for job_id, cancel in held.items() if cancel}
                    else:
                        held = {}
                        asked = await self._store.cancels_asked([r.job.id for r in runs])
            except Exception as exc:
                if not failing:
                    _log.warning("job heartbeat failed", jobs=len(runs), error=redact(repr(exc)))
                failing = True
                for run in runs:
                    if now - run.stamped >= self.stalled_after - self.heartbeat:
                        _log.warning(
                            "no heartbeat stored for too long: handing the job back",
                            job=run.job.id,
                        )
                        self._stop(run, "silent")
                continue
            if failing:
                _log.warning("job heartbeats stored again", jobs=len(runs))
            failing = False
            for run in runs:
                if run.task is None or run.task.done():
                    continue  # it ended while the beat was on its way: its end is stored
                if beat and run.job.id not in held:
                    _log.warning("a running job was taken over: stopping it here", job=run.job.id)
                    self._stop(run, "lost")
                elif run.job.id in asked:
                    self._stop(run, "cancel")
                elif beat:
                    run.stamped = now

    @staticmethod
    def _stop(run: _Run, why: str) -> None:
        if run.task is not None and not run.task.done() and run.stopped is None:
            run.stopped = why
            run.task.cancel()

    # -- storing a run's end ---------------------------------------------------------------

    async def _settle(self, run: _Run, outcome: _Outcome | None, *, part: bool) -> None:
        """Store how the run ended (None: handed back to the queue), shielded from the
        cancellation that may have ended it."""
        await asyncio.shield(self._store_end(run, outcome, part=part))

    async def _store_end(self, run: _Run, outcome: _Outcome | None, *, part: bool) -> None:
        job, owner = run.job, run.owner
        try:
            # job.running before anything after it: the next run's events, this one's end
            await self._told(run)
            if outcome is None:
                await self._stored(lambda: self._store.release(job.id, owner))
                if part:  # its dispatch was dropped when it ran here: queue one again
                    await self._stored(lambda: self._redispatch(job))
                return
            state, result, error = outcome
            ended = await self._stored(
                lambda: self._store.finish_run(
                    job.id,
                    owner,
                    state,
                    datetime.now(UTC),
                    result=result,
                    error=error,
                    progress=dict(run.context.counts),
                )
            )
            if ended is not None:
                await self._tell(ended)
        except Exception as exc:  # the sweep finds it silent and runs it again
            _log.error("could not store a job's end", job=job.id, error=redact(repr(exc)))

    @staticmethod
    async def _told(run: _Run) -> None:
        """Wait until the run's ``job.running`` is told (its telling catches its own errors)."""
        if run.told is not None:
            await run.told

    async def _stored(self, write: Callable[[], Awaitable[T]]) -> T:
        """``write()``, tried again while the database is away (every half second, for up to
        ``_STORE_WAIT`` seconds: it is stored as soon as the database is back), or a few
        times on another error (a hiccup must not make a done job run again)."""
        started, tries = time.monotonic(), 0
        while True:
            try:
                return await write()
            except Exception as exc:
                tries += 1
                lost = database_lost(exc) and time.monotonic() - started < _STORE_WAIT
                if not lost and tries >= _FINISH_TRIES:
                    raise
                await asyncio.sleep(0.5 if lost else 0.5 * tries)

    async def _tell_id(self, job_id: str) -> None:
        job = await self._store.get(job_id)
        if job is not None:
            await self._tell(job)
