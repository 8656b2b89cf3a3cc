"""Running procrastinate's deliveries of jobs: claim the row, heartbeat it, store its end.

A delivery of ``scrapeflow.run`` claims the job's row in ``scrapeflow_jobs`` (queued → running,
owner = this delivery; a running row whose heartbeat stopped is taken over), runs the handler
of its kind while stamping the row's heartbeat and progress, and ends the row ``succeeded``,
``failed`` or ``cancelled``. Every write is conditional on the owner, so a duplicate or a
zombie delivery never ends a job twice. How a cancelled delivery ends depends on who cancelled:

* a user's abort (procrastinate cancels the task): the job ends ``cancelled``, the dispatch
  ``aborted``;
* the worker's shutdown after its grace period: the row goes back to ``queued`` and
  :class:`~scrapeflow.jobs._dispatch.Released` sends the dispatch back to the queue;
* the heartbeat finding ``cancel_requested`` (the fallback when a NOTIFY was lost): ``cancelled``;
* the heartbeat finding the row taken over: nothing is written, the new owner has it.

A handler that fails because the database went away under it (:func:`database_lost`: a
PostgreSQL restart, a cut connection) has not failed as a job: its run is handed back like a
shutdown's, and runs again (its handler must be idempotent, as every handler is), up to
``max_attempts`` runs in all; the last one's error fails it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from procrastinate import JobContext as DispatchContext
from procrastinate.job_context import AbortReason

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow._util.tasks import stop_task
from scrapeflow.errors import UnknownJobKind
from scrapeflow.jobs._dispatch import Released, database_lost
from scrapeflow.jobs._model import Job, JobState
from scrapeflow.jobs._runner import Followers, JobContext, JobKinds
from scrapeflow.jobs._store import SqlJobStore

__all__: list[str] = []

_log = get_logger(__name__)
_MAX_ERROR = 1_000
_FINISH_TRIES = 3
"""Attempts to store how a run ended before leaving it to the sweep (which would run it again)."""
_Outcome = tuple[JobState, dict[str, Any] | None, str | None]
_RUN_AGAIN = None
"""The outcome of a run the database went away under: hand the job back, to run again."""


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
        tell: Callable[[str], Awaitable[None]],
        followers: Callable[[DispatchContext], Followers],
    ) -> None:
        self._store = store
        self._kinds = kinds
        self.name = name
        self.heartbeat = heartbeat
        self.stalled_after = stalled_after
        self.max_attempts = max_attempts
        self._tell = tell
        self._followers = followers
        self.running: dict[str, JobContext] = {}
        """The jobs running here, with their live progress."""
        self.finished: dict[str, asyncio.Event] = {}
        """Set when a job running here ends (what the queue's ``wait`` listens to)."""

    async def deliver(self, dispatch: DispatchContext, job_id: str) -> None:
        """procrastinate's ``scrapeflow.run`` task: run job ``job_id`` if it is still to run."""
        await self._deliver(dispatch, job_id, str(dispatch.job.attempts))

    async def run_inline(self, dispatch: DispatchContext, job_id: str) -> None:
        """Run job ``job_id`` here, inside the delivery ``dispatch`` (a part its job waits for),
        if it is still to run. Stopped with that delivery, it ends as the delivery does: a
        user's abort cancels it, a shutdown hands it back to the queue."""
        # Released: back in the queue, where its own dispatch (or the sweep's) runs it.
        with contextlib.suppress(Released):
            await self._deliver(dispatch, job_id, "part")

    async def _deliver(self, dispatch: DispatchContext, job_id: str, attempt: str) -> None:
        parts = (self.name, str(dispatch.job.id), attempt, secrets.token_hex(3))
        owner = ":".join(parts)[-64:]
        job = await self._claim(job_id, owner)
        if job is None:
            return  # cancelled, ended, or running on a live worker: a duplicate delivery
        context = JobContext(job, self._followers(dispatch))
        self.running[job.id] = context
        try:
            await self._run_claimed(dispatch, context, owner)
        finally:
            self.running.pop(job.id, None)
            event = self.finished.pop(job.id, None)
            if event is not None:
                event.set()

    async def _claim(self, job_id: str, owner: str) -> Job | None:
        now = datetime.now(UTC)
        cutoff = now - timedelta(seconds=self.stalled_after)
        current = await self._store.get(job_id)
        if current is None or current.state.final:
            return None
        if current.state is JobState.RUNNING:
            if current.heartbeat_at is not None and current.heartbeat_at >= cutoff:
                return None
            # a re-delivery after its worker died: take the job over (or give up on it)
            if await self._store.requeue_stalled(cutoff, self.max_attempts, only=[job_id]):
                await self._tell(job_id)
        claimed = await self._store.claim(owner, now, 1, only=[job_id])
        return claimed[0] if claimed else None

    async def _run_claimed(
        self, dispatch: DispatchContext, context: JobContext, owner: str
    ) -> None:
        job = context.job
        if job.cancel_requested:  # asked while its previous worker was dying
            await self._settle(context, owner, (JobState.CANCELLED, None, "cancelled"))
            return
        interrupted: set[str] = set()
        work = asyncio.create_task(self._handle(context), name=f"job-{job.id}")
        watch = asyncio.create_task(self._watch(context, owner, work, interrupted))
        try:
            outcome = await work
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():  # procrastinate aborted us
                if dispatch.abort_reason() is AbortReason.USER_REQUEST:
                    await self._settle(context, owner, (JobState.CANCELLED, None, "cancelled"))
                    raise  # the dispatch ends `aborted`
                await self._settle(context, owner, None)
                raise Released from None  # RetryReleased puts the dispatch back in the queue
            if "lost" in interrupted:
                return  # another delivery holds the job now
            outcome = (JobState.CANCELLED, None, "cancelled")
        finally:
            await stop_task(watch)
        await self._settle(context, owner, outcome)
        if outcome is _RUN_AGAIN:
            raise Released  # RetryReleased puts the dispatch back in the queue

    async def _handle(self, context: JobContext) -> _Outcome | None:
        job = context.job
        await self._tell(job.id)
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

    async def _watch(
        self,
        context: JobContext,
        owner: str,
        work: asyncio.Task[_Outcome | None],
        interrupted: set[str],
    ) -> None:
        """Stamp the job's heartbeat and progress; stop it when it was cancelled or taken over
        (the sweep found it silent and gave it to another worker), or when the database has
        not taken a beat for nearly as long as the sweep waits before giving the job to
        another worker: two workers never run one job for long, even cut off from each other."""
        job_id = context.job.id
        last_beat = time.monotonic()
        while not work.done():
            await asyncio.sleep(self.heartbeat)
            try:
                async with asyncio.timeout(self.heartbeat):
                    row = await self._store.get(job_id)
                    if row is None or row.owner != owner or row.state is not JobState.RUNNING:
                        _log.warning("a running job was taken over: stopping it here", job=job_id)
                        interrupted.add("lost")
                        work.cancel()
                        return
                    asked = await self._store.heartbeat(
                        owner, {job_id: dict(context.counts)}, datetime.now(UTC)
                    )
                last_beat = time.monotonic()
                if job_id in asked:
                    interrupted.add("cancel")
                    work.cancel()
                    return
            except Exception as exc:  # a database hiccup: the next beat tries again…
                _log.warning("job heartbeat failed", job=job_id, error=redact(repr(exc)))
                if time.monotonic() - last_beat >= self.stalled_after - self.heartbeat:
                    # …until the sweep may already be handing the job to another worker
                    _log.warning(
                        "no heartbeat stored for too long: stopping the job here", job=job_id
                    )
                    interrupted.add("lost")
                    work.cancel()
                    return

    async def _settle(self, context: JobContext, owner: str, outcome: _Outcome | None) -> None:
        """Store how the run ended (None: handed back to the queue), shielded from the
        cancellation that may have ended it."""
        await asyncio.shield(self._store_end(context, owner, outcome))

    async def _store_end(self, context: JobContext, owner: str, outcome: _Outcome | None) -> None:
        job = context.job
        try:
            if outcome is None:
                await self._store.release(job.id, owner)
                return
            state, result, error = outcome
            for attempt in range(_FINISH_TRIES):  # a hiccup must not make a done job run again
                try:
                    ended = await self._store.finish(
                        job.id,
                        owner,
                        state,
                        datetime.now(UTC),
                        result=result,
                        error=error,
                        progress=dict(context.counts),
                    )
                    break
                except Exception:
                    if attempt == _FINISH_TRIES - 1:
                        raise
                    await asyncio.sleep(0.5 * (attempt + 1))
            if ended:
                await self._tell(job.id)
        except Exception as exc:  # its heartbeat stops: the sweep runs it again
            _log.error("could not store a job's end", job=job.id, error=redact(repr(exc)))
