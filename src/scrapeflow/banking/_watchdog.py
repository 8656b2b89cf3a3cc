"""The watchdog, for bank jobs: the job queue's stalled-job sweep, then the reset of bank rows
left in progress by launches that died (:func:`run_watchdog`, ``scrapeflow bank watchdog``, and
the service's own watchdog)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking._jobs import BANK_ACCESS, BANK_OTP, BANK_REFRESH, customers_in
from scrapeflow.banking._models import Access, Customer
from scrapeflow.banking._results import ScrapeState
from scrapeflow.banking._state import DEFAULT_HEARTBEAT, reset_stuck
from scrapeflow.errors import ConfigError, InputError
from scrapeflow.jobs import EmbeddedJobQueue, JobQueue, JobState

__all__ = ["WatchdogReport", "run_watchdog"]


@dataclass(frozen=True, slots=True)
class WatchdogReport:
    """What one watchdog pass did: jobs put back in the queue or failed, rows reset."""

    requeued: tuple[str, ...] = ()
    """Ids of running jobs whose heartbeat had stopped, queued again."""
    failed: tuple[str, ...] = ()
    """Ids of such jobs that had had their attempts, failed."""
    accesses: tuple[int, ...] = ()
    """Ids of accesses reset (ended ``timeout``)."""
    customers: tuple[int, ...] = ()
    """Ids of customers set back to idle."""


async def run_watchdog(
    queue: JobQueue,
    sessions: async_sessionmaker[AsyncSession],
    *,
    limit: timedelta,
    heartbeat: float = DEFAULT_HEARTBEAT,
) -> WatchdogReport:
    """One pass of the watchdog: the job queue's stalled-job sweep, then the bank rows.

    1. Running jobs silent for longer than ``limit`` — and than the queue's ``stalled_after``
       (three of its heartbeats) — go back to the queue, or fail past ``max_attempts``
       (:meth:`EmbeddedJobQueue.requeue_stalled`); a queue process, or the next command that
       asks for the same work, runs them again.
    2. Accesses and customers stuck in progress are reset as :func:`reset_stuck` does (stale:
       older than ``limit`` and three of their launcher's heartbeat intervals; ``heartbeat``
       stands in for rows that stored none), except those of a customer a live bank job still
       holds.

    Raises :class:`~scrapeflow.errors.ConfigError`, before anything changes, when ``limit`` or
    ``heartbeat`` is not positive.
    """
    if not limit > timedelta(0):
        raise ConfigError(f"the watchdog's limit must be positive, got {limit.total_seconds():g} s")
    if not 0 < heartbeat < float("inf"):
        raise ConfigError(f"the heartbeat interval must be positive, got {heartbeat!r}")
    # A distributed queue sweeps its stalled jobs itself, on its workers' own schedule.
    stalled = (
        await queue.requeue_stalled(silent_for=limit.total_seconds())
        if isinstance(queue, EmbeddedJobQueue)
        else []
    )
    held = await _held_customers(queue, sessions)
    if not held:
        rows = await reset_stuck(sessions, limit=limit, heartbeat=heartbeat)
        accesses, customers = list(rows.accesses), list(rows.customers)
    else:
        accesses, customers = [], []
        for customer_id in sorted(await _customers_in_progress(sessions) - held):
            rows = await reset_stuck(
                sessions, limit=limit, heartbeat=heartbeat, customer=customer_id
            )
            accesses += rows.accesses
            customers += rows.customers
    return WatchdogReport(
        requeued=tuple(j.id for j in stalled if j.state is JobState.QUEUED),
        failed=tuple(j.id for j in stalled if j.state is JobState.FAILED),
        accesses=tuple(sorted(accesses)),
        customers=tuple(sorted(customers)),
    )


async def _held_customers(queue: JobQueue, sessions: async_sessionmaker[AsyncSession]) -> set[int]:
    """Ids of the customers that running bank jobs hold (their heartbeat is fresh: the sweep
    has just put back every silent one)."""
    external: set[str] = set()
    for kind in (BANK_REFRESH, BANK_ACCESS, BANK_OTP):
        before: str | None = None
        while True:
            page = await queue.find(kind=kind, states=(JobState.RUNNING,), limit=500, before=before)
            for job in page:
                external.update(_named_customers(job.params))
            if len(page) < 500:
                break
            before = page[-1].id
    if not external:
        return set()
    async with sessions() as session:
        found = await session.scalars(
            select(Customer.id).where(Customer.external_id.in_(sorted(external)))
        )
        return set(found.all())


def _named_customers(params: Mapping[str, Any]) -> Collection[str]:
    try:
        return customers_in(params)[0]
    except InputError:
        return ()


async def _customers_in_progress(sessions: async_sessionmaker[AsyncSession]) -> set[int]:
    """Ids of the customers in progress, or with an access in progress."""
    async with sessions() as session:
        refreshing = await session.scalars(
            select(Customer.id).where(Customer.scrape_state == ScrapeState.IN_PROGRESS)
        )
        scraping = await session.scalars(
            select(Access.customer_id)
            .where(Access.scrape_state == ScrapeState.IN_PROGRESS)
            .distinct()
        )
        return set(refreshing.all()) | set(scraping.all())
