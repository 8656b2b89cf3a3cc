"""The rows a launcher holds: its claims on customers and accesses, their heartbeat, and how it
lets go of them — finished, or given back when a stop lands while a claim is being written.

Every one of these writes goes through the launch's write queue, in a transaction the queue may
share with other batches (the functions of :mod:`scrapeflow.banking._state` never commit). They
are kept apart from :class:`~scrapeflow.banking.Launcher` because the rules of holding — claim in
one transaction, stamp what is held every ``heartbeat`` seconds, leave nothing claimed after a
stop wherever it lands — read as one piece, whatever the launch does with what it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from scrapeflow._util.logs import get_logger
from scrapeflow._util.tasks import stop_task
from scrapeflow.banking._reports import LaunchLimits
from scrapeflow.banking._results import ResultCode
from scrapeflow.banking._state import (
    AccessClaims,
    ClaimedAccess,
    claim_access,
    claim_accesses,
    claim_customer,
    finish_access,
    finish_customer,
    stamp_heartbeats,
    take_over_customer,
)
from scrapeflow.banking._writequeue import GroupedWrite, WriteQueue
from scrapeflow.errors import RefreshInProgress

__all__ = ["STOPPED", "LaunchClaims"]

_log = get_logger("scrapeflow.banking._launcher")  # the launcher's log, as before the split
T = TypeVar("T")
STOPPED = "the launch was stopped"
"""The detail of an access ended by a stop (with the timeout code)."""
_TAKE_OVER_BEATS = 5  # a dead holder's heartbeat is stale after 3 (MISSED_BEATS)


class LaunchClaims:
    """What one launcher holds, and every write of its own: the claims, the heartbeat of what
    it holds (queued or running), the customers' ends, the give-backs of stopped claims.

    :meth:`open` on the launcher's write queue starts the heartbeat; :meth:`close` (before the
    queue closes) waits for the give-backs and stops it.
    """

    def __init__(self, limits: LaunchLimits) -> None:
        self.limits = limits
        self.accesses: set[int] = set()
        """Accesses held, queued or running: their heartbeat is stamped."""
        self.customers: set[int] = set()
        """Customers being refreshed: their heartbeat is stamped."""
        self._queue: WriteQueue | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._giving_back: set[asyncio.Task[None]] = set()  # claims of stopped launches

    def open(self, queue: WriteQueue) -> None:
        self._queue = queue
        self._heartbeat = asyncio.create_task(self._beat(), name="launcher-heartbeat")

    async def close(self) -> None:
        if self._giving_back:  # they write through the queue: before it closes
            await asyncio.gather(*self._giving_back, return_exceptions=True)
        await stop_task(self._heartbeat)

    async def write(self, write: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """A state change of the launcher's own, through the write queue: in a transaction the
        queue may share with other batches (group commit), all of it or nothing."""
        assert self._queue is not None

        async def run(connection: AsyncConnection) -> T:
            # A session on the queue's connection joins its transaction; the queue commits.
            session = AsyncSession(bind=connection, expire_on_commit=False)
            try:
                return await write(session)
            finally:
                await session.close()

        return await self._queue.submit(GroupedWrite(run))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.limits.heartbeat)
            held, customers = list(self.accesses), list(self.customers)
            if not held and not customers:
                continue
            try:
                await self.write(partial(stamp_heartbeats, access_ids=held, customer_ids=customers))
            except Exception as exc:  # the next beat tries again; the watchdog allows several
                _log.warning("heartbeat failed", error=repr(exc))

    # -- claims -----------------------------------------------------------------------------

    async def claim_launch(self, customer_id: int, holder: str | None) -> AccessClaims:
        """The customer and every access of it not already in progress (a stop while this is
        written gives them back). ``holder``: the job whose run claims them, read in the
        caller's context (not the write queue's)."""
        return await self._claim_or_give_back(
            partial(self._claim, customer_id, holder),
            partial(self._give_back, customer_id),
        )

    async def _claim(
        self, customer_id: int, holder: str | None, session: AsyncSession
    ) -> AccessClaims:
        """The customer and every access of it not already in progress, in one transaction: a
        watchdog never sees the customer claimed and its accesses not yet."""
        heartbeat = self.limits.heartbeat
        await claim_customer(session, customer_id, heartbeat=heartbeat, holder=holder)
        return await claim_accesses(session, customer_id, heartbeat=heartbeat, holder=holder)

    async def _give_back(
        self, customer_id: int, session: AsyncSession, claims: AccessClaims
    ) -> None:
        """Undo the claim of a launch stopped before it could use it."""
        for job in claims.claimed:
            await finish_access(session, job.access_id, ResultCode.TIMEOUT, detail=STOPPED)
        await finish_customer(session, customer_id)

    async def claim_one(self, access_id: int, holder: str | None) -> ClaimedAccess | None:
        """One access alone (None: it is already being scraped); its customer is left alone."""
        heartbeat = self.limits.heartbeat

        async def give_back(session: AsyncSession, taken: ClaimedAccess | None) -> None:
            if taken is not None:
                await finish_access(session, access_id, ResultCode.TIMEOUT, detail=STOPPED)

        return await self._claim_or_give_back(
            lambda session: claim_access(session, access_id, heartbeat=heartbeat, holder=holder),
            give_back,
        )

    async def hold_customer(self, customer_id: int, holder: str | None, *, take_over: bool) -> None:
        """Claim the customer alone (:class:`RefreshInProgress` when it is being refreshed).
        ``take_over``: a customer in progress whose heartbeat goes stale within a few beats is
        taken over."""
        heartbeat = self.limits.heartbeat
        for beat in range(_TAKE_OVER_BEATS if take_over else 1):
            try:
                await self._claim_or_give_back(
                    lambda session: claim_customer(
                        session, customer_id, heartbeat=heartbeat, holder=holder
                    ),
                    lambda session, _: finish_customer(session, customer_id),
                )
                return
            except RefreshInProgress:
                if not take_over:
                    raise
                taken = await self.write(
                    partial(
                        take_over_customer,
                        customer_id=customer_id,
                        heartbeat=heartbeat,
                        holder=holder,
                    )
                )
                if taken:
                    return
                if beat == _TAKE_OVER_BEATS - 1:
                    raise
                await asyncio.sleep(heartbeat)

    async def _claim_or_give_back(
        self,
        claim: Callable[[AsyncSession], Awaitable[T]],
        give_back: Callable[[AsyncSession, T], Awaitable[None]],
    ) -> T:
        """Write ``claim`` through the write queue; what it took, or its refusal.

        A stop (a cancelled job) that lands while the claim is queued or being written does not
        wait for it. The claim may still land — the writer may be committing it, and nothing
        tells which — so it is left to run, and what it took is given back once it has: a
        stopped launch leaves nothing claimed.
        """
        claiming = asyncio.ensure_future(self.write(claim))
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            task = asyncio.create_task(
                self._give_back_when_landed(claiming, give_back), name="launcher-give-back"
            )
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)
            raise

    async def _give_back_when_landed(
        self,
        claiming: asyncio.Future[T],
        give_back: Callable[[AsyncSession, T], Awaitable[None]],
    ) -> None:
        try:
            taken = await claiming
        except Exception:  # refused or failed: it took nothing
            return
        try:
            await self.write(lambda session: give_back(session, taken))
        except Exception as exc:  # the watchdog will free it
            _log.error("could not give back a stopped launch's claim", error=repr(exc))

    # -- ends -------------------------------------------------------------------------------

    async def finish_customer(self, customer_id: int) -> BaseException | None:
        """Mark the customer all updated; the error when that could not be stored."""
        try:
            await self.write(lambda session: finish_customer(session, customer_id))
            return None
        except Exception as exc:  # the launch runs again (or the watchdog frees it)
            _log.error(
                "could not mark a customer updated", customer_id=customer_id, error=repr(exc)
            )
            return exc
