"""Scrape state: every read and write of where a customer's and an access's scrape stands.

Customers and accesses each carry a ``scrape_state`` (:class:`ScrapeState`)::

    customer: idle, all_updated --claim_customer--> in_progress --finish_customer--> all_updated
                                                          |
                                                          '--reset_stuck--> idle

    access:   idle --claim_accesses, claim_access--> in_progress --finish_access--> idle + result
                                                   (heartbeats) |
                                                                '--reset_stuck--> idle + timeout

A claim is one conditional ``UPDATE … WHERE scrape_state <> 'in_progress'``: of two launches
racing for a row the database lets exactly one through, so a customer is never refreshed twice
at once and an access never scraped twice (a refresh skips an access being resumed with a
one-time code). Finishing an access stores its result code, detail, counts and its encrypted
session state (:func:`read_session_state`, :func:`seal_session_state`), and sets it back to
idle; finishing a customer marks it all updated.

While a launcher holds accesses — running, or queued behind the limits per bank and overall —
and the customers it refreshes, it stamps their ``heartbeat_at`` every ``LaunchLimits.heartbeat``
seconds; a claim stores that interval beside the stamp (``heartbeat_seconds``). A launch killed
mid-way (``kill -9``, a crashed machine) stops stamping and leaves its rows in progress, which
would refuse every later refresh. :func:`reset_stuck` (the watchdog, ``scrapeflow bank
watchdog``) ends every access in progress whose heartbeat is stale with the timeout code, then
sets back to idle every customer in progress whose heartbeat is stale and that has no access in
progress left.

*Stale* means older than ``limit`` **and** older than three of the row's own heartbeat intervals
(:data:`MISSED_BEATS`): the effective limit of a row is ``max(limit, 3 × its interval)``. A fresh
heartbeat is never reset, whatever the limit and however old the claim: it proves a live launcher
holds the row (a long queue is not a dead launch), and freeing it would let a second launch
scrape the access, or refresh the customer, at the same time and overwrite the first one's
results. The interval is the launcher's own, read from the row, so a watchdog run with other
settings (from cron, say) still knows it; rows claimed before intervals were stored get the
``heartbeat`` given to :func:`reset_stuck`. For the same reason a customer with an access still
in progress is left alone: its launcher is alive and will finish it.

Every function but :func:`reset_stuck` works inside the caller's transaction on an
``AsyncSession`` and never commits, so the launcher runs each through its write queue.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Final

from sqlalchemy import and_, false, func, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import InstrumentedAttribute

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.banking._models import Access, Customer, FinancialEntity
from scrapeflow.banking._results import ResultCode, ScrapeState
from scrapeflow.banking._vault import CredentialVault, VaultError
from scrapeflow.errors import ConfigError, InputError, RefreshInProgress

__all__ = [
    "MISSED_BEATS",
    "UNCHANGED",
    "AccessClaims",
    "ClaimedAccess",
    "StuckReset",
    "Unchanged",
    "claim_access",
    "claim_accesses",
    "claim_customer",
    "finish_access",
    "finish_customer",
    "holding_job",
    "read_session_state",
    "release_holds",
    "reset_stuck",
    "seal_session_state",
    "stamp_heartbeats",
    "take_over_customer",
]

_log = get_logger(__name__)

holding_job: ContextVar[str | None] = ContextVar("holding_job", default=None)
"""The id of the job whose run makes the claims in this context (None outside a job): stored
on what it claims, so that the job's next run — which the queue starts only once it found this
run dead — takes the hold over at once (:func:`release_holds`) instead of waiting for its
heartbeat to go stale."""


class Unchanged(Enum):
    """The type of :data:`UNCHANGED`: "leave the stored value as it is" (``None`` clears it)."""

    UNCHANGED = "unchanged"


UNCHANGED: Final = Unchanged.UNCHANGED

MISSED_BEATS: Final = 3
"""Heartbeats a row may miss before the watchdog may reset it: one late or failed beat (a busy
write queue, a passing database error) is not a dead launcher."""
DEFAULT_HEARTBEAT: Final = 30.0
"""Seconds assumed between the beats of a row claimed without its interval stored."""


@dataclass(frozen=True, slots=True)
class ClaimedAccess:
    """An access a launch now holds (in progress): what its scraper needs to start."""

    access_id: int
    bank: str
    """The bank's code (the scraper's registry name)."""
    login: str
    secret: bytes = field(repr=False)
    """The credential, a vault token."""
    session_state: bytes | None = field(repr=False)
    """What the scraper kept from its last run, a vault token (None: nothing)."""


@dataclass(frozen=True, slots=True)
class AccessClaims:
    """What claiming a customer's accesses got: those now held, and those already busy."""

    claimed: tuple[ClaimedAccess, ...] = ()
    busy: tuple[int, ...] = ()
    """Ids of accesses already in progress elsewhere (a one-time code being tried on them)."""


@dataclass(frozen=True, slots=True)
class StuckReset:
    """What one pass reset: access ids and customer ids."""

    accesses: tuple[int, ...] = ()
    customers: tuple[int, ...] = ()


async def claim_customer(
    session: AsyncSession,
    customer_id: int,
    *,
    heartbeat: float | None = None,
    now: datetime | None = None,
    holder: str | None = None,
) -> None:
    """Mark the customer in progress, or raise :class:`RefreshInProgress` if it already is.

    ``heartbeat`` is the claiming launcher's interval (seconds), stored for the watchdog.
    Raises :class:`InputError` when there is no such customer.
    """
    now = now or _now()
    result = await session.execute(
        update(Customer)
        .where(Customer.id == customer_id, Customer.scrape_state != ScrapeState.IN_PROGRESS)
        .values(
            scrape_state=ScrapeState.IN_PROGRESS,
            scrape_started_at=now,
            scrape_finished_at=None,
            heartbeat_at=now,
            heartbeat_seconds=heartbeat,
            held_by=holder,
        )
    )
    if _rowcount(result):
        return
    external_id = await session.scalar(
        select(Customer.external_id).where(Customer.id == customer_id)
    )
    if external_id is None:
        raise InputError(f"no customer with id {customer_id}")
    raise RefreshInProgress(
        f"customer {external_id!r} is already being refreshed "
        "(a stuck refresh is reset by the watchdog)"
    )


async def take_over_customer(
    session: AsyncSession,
    customer_id: int,
    *,
    heartbeat: float | None = None,
    now: datetime | None = None,
    holder: str | None = None,
) -> bool:
    """Hold a customer whose refresh died — in progress, its heartbeat older than
    :data:`MISSED_BEATS` of its interval, or held by ``holder`` (an earlier run of the same
    job, which the queue found dead) — as if claimed now (its accesses are left as they are:
    parts of that refresh may still be scraping them). False when it is not that."""
    now = now or _now()
    interval = await session.scalar(
        select(Customer.heartbeat_seconds).where(Customer.id == customer_id)
    )
    stale_before = now - timedelta(seconds=MISSED_BEATS * (interval or DEFAULT_HEARTBEAT))
    alive_at = func.coalesce(Customer.heartbeat_at, Customer.scrape_started_at)
    result = await session.execute(
        update(Customer)
        .where(
            Customer.id == customer_id,
            Customer.scrape_state == ScrapeState.IN_PROGRESS,
            or_(
                and_(
                    _same(Customer.heartbeat_seconds, interval),
                    or_(alive_at < stale_before, alive_at.is_(None)),
                ),
                false() if holder is None else Customer.held_by == holder,
            ),
        )
        .values(heartbeat_at=now, heartbeat_seconds=heartbeat, held_by=holder)
    )
    return bool(_rowcount(result))


async def claim_accesses(
    session: AsyncSession,
    customer_id: int,
    *,
    heartbeat: float | None = None,
    now: datetime | None = None,
    holder: str | None = None,
) -> AccessClaims:
    """Mark every enabled access of the customer in progress that is not already, in one
    statement (a disabled one is left alone).

    The claimed ones come back in id order with what their scrapers need; the others are busy.
    ``heartbeat`` is the claiming launcher's interval (seconds), stored for the watchdog.
    """
    now = now or _now()
    claimed = set(
        (
            await session.scalars(
                update(Access)
                .where(
                    Access.customer_id == customer_id,
                    Access.enabled.is_(True),
                    Access.scrape_state != ScrapeState.IN_PROGRESS,
                )
                .values(
                    scrape_state=ScrapeState.IN_PROGRESS,
                    scrape_started_at=now,
                    heartbeat_at=now,
                    heartbeat_seconds=heartbeat,
                    held_by=holder,
                )
                .returning(Access.id)
            )
        ).all()
    )
    rows = (
        await session.execute(
            select(Access, FinancialEntity.code)
            .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
            .where(Access.customer_id == customer_id, Access.enabled.is_(True))
            .order_by(Access.id)
            .execution_options(populate_existing=True)
        )
    ).all()
    return AccessClaims(
        claimed=tuple(_claimed(access, bank) for access, bank in rows if access.id in claimed),
        busy=tuple(access.id for access, _ in rows if access.id not in claimed),
    )


async def claim_access(
    session: AsyncSession,
    access_id: int,
    *,
    heartbeat: float | None = None,
    now: datetime | None = None,
    holder: str | None = None,
) -> ClaimedAccess | None:
    """Mark one access in progress; None when it already is (being scraped elsewhere).

    Raises :class:`InputError` when there is no such access.
    """
    now = now or _now()
    result = await session.execute(
        update(Access)
        .where(Access.id == access_id, Access.scrape_state != ScrapeState.IN_PROGRESS)
        .values(
            scrape_state=ScrapeState.IN_PROGRESS,
            scrape_started_at=now,
            heartbeat_at=now,
            heartbeat_seconds=heartbeat,
            held_by=holder,
        )
    )
    row = (
        await session.execute(
            select(Access, FinancialEntity.code)
            .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
            .where(Access.id == access_id)
            .execution_options(populate_existing=True)
        )
    ).first()
    if row is None:
        raise InputError(f"no access with id {access_id}")
    return _claimed(*row) if _rowcount(result) else None


async def stamp_heartbeats(
    session: AsyncSession,
    access_ids: Collection[int],
    *,
    customer_ids: Collection[int] = (),
    now: datetime | None = None,
) -> None:
    """Stamp the accesses and customers a launcher holds as alive now (see :func:`reset_stuck`)."""
    now = now or _now()
    if access_ids:
        await session.execute(
            update(Access).where(Access.id.in_(access_ids)).values(heartbeat_at=now)
        )
    if customer_ids:
        await session.execute(
            update(Customer).where(Customer.id.in_(customer_ids)).values(heartbeat_at=now)
        )


async def finish_access(
    session: AsyncSession,
    access_id: int,
    code: ResultCode,
    *,
    detail: str | None = None,
    accounts: int = 0,
    movements: int = 0,
    accounts_stored: int | None = None,
    movements_stored: int | None = None,
    session_state: bytes | Unchanged | None = UNCHANGED,
    now: datetime | None = None,
) -> None:
    """Store how the access's scrape ended and set it back to idle.

    ``detail`` is what the scraper saw; it is stored scrubbed of credentials and cut to the
    column's 500 characters. ``session_state`` is the scraper's state to keep, a vault token
    (:func:`seal_session_state`): None clears it, :data:`UNCHANGED` keeps what is stored (state
    that could not be read must not be overwritten). ``accounts`` and ``movements`` are what
    was read, the ``_stored`` counts what the database holds of it (default: all of it).
    """
    values: dict[str, Any] = {
        "scrape_state": ScrapeState.IDLE,
        "result_code": code,
        "result_detail": redact(detail or "")[:500] or None,
        "scrape_finished_at": now or _now(),
        "accounts_count": accounts,
        "movements_count": movements,
        "accounts_stored": accounts if accounts_stored is None else accounts_stored,
        "movements_stored": movements if movements_stored is None else movements_stored,
        "held_by": None,
    }
    if not isinstance(session_state, Unchanged):
        values["session_state"] = session_state
    await session.execute(update(Access).where(Access.id == access_id).values(**values))


def read_session_state(vault: CredentialVault, access: ClaimedAccess) -> dict[str, Any] | None:
    """What the scraper kept from the access's last run ({} when nothing); None when unreadable.

    Unreadable state must stay as stored (:data:`UNCHANGED`): another key of a rotation in
    progress may still open it.
    """
    if not access.session_state:
        return {}
    try:
        loaded = json.loads(vault.decrypt(access.session_state))
    except (VaultError, ValueError):
        loaded = None
    if isinstance(loaded, dict):
        return loaded
    _log.warning("access state unreadable; not using it", access_id=access.access_id)
    return None


def seal_session_state(vault: CredentialVault, state: dict[str, Any]) -> bytes | None:
    """The token :func:`finish_access` stores for ``state`` (None, clearing it, when empty)."""
    return vault.encrypt(json.dumps(state)) if state else None


async def finish_customer(
    session: AsyncSession, customer_id: int, *, now: datetime | None = None
) -> None:
    """Mark the customer's refresh done: all updated (each access keeps its own result)."""
    await session.execute(
        update(Customer)
        .where(Customer.id == customer_id)
        .values(
            scrape_state=ScrapeState.ALL_UPDATED, scrape_finished_at=now or _now(), held_by=None
        )
    )


async def release_holds(sessions: async_sessionmaker[AsyncSession], holder: str) -> StuckReset:
    """Reset what an earlier run of job ``holder`` left in progress: the queue runs a job
    again only once it found the last run dead (its heartbeats stopped), so its holds are
    taken over at once, not after three of the launcher's heartbeats. An access ends
    ``timeout``; a customer goes back to idle (the run that follows claims it again). One
    transaction; idempotent."""
    now = _now()
    async with sessions() as session, session.begin():
        held = await session.scalars(
            update(Access)
            .where(Access.held_by == holder, Access.scrape_state == ScrapeState.IN_PROGRESS)
            .values(
                scrape_state=ScrapeState.IDLE,
                result_code=ResultCode.TIMEOUT,
                result_detail="its job's run died: run again",
                scrape_finished_at=now,
                held_by=None,
            )
            .returning(Access.id)
        )
        accesses = tuple(held.all())
        held = await session.scalars(
            update(Customer)
            .where(Customer.held_by == holder, Customer.scrape_state == ScrapeState.IN_PROGRESS)
            .values(scrape_state=ScrapeState.IDLE, scrape_finished_at=now, held_by=None)
            .returning(Customer.id)
        )
        customers = tuple(held.all())
    if accesses or customers:
        _log.warning("took over a dead run's holds", job=holder, accesses=accesses)
    return StuckReset(accesses=accesses, customers=customers)


async def reset_stuck(
    sessions: async_sessionmaker[AsyncSession],
    *,
    limit: timedelta,
    heartbeat: float = DEFAULT_HEARTBEAT,
    now: datetime | None = None,
    customer: int | None = None,
) -> StuckReset:
    """Reset the accesses and customers in progress whose heartbeat is stale. Idempotent.

    ``customer`` (an id) limits the reset to that customer and its accesses: a re-run of a job
    whose process died frees what that process held, and nothing else.

    A row is stale when its last heartbeat (its claim when it has none) is older than ``limit``
    and than :data:`MISSED_BEATS` of its launcher's heartbeat intervals, read from the row;
    ``heartbeat`` (seconds) stands in for rows that have none stored. A customer is reset only
    once no access of it is in progress. One transaction.

    Raises :class:`~scrapeflow.errors.ConfigError` when ``limit`` or ``heartbeat`` is not
    positive.
    """
    if not limit > timedelta(0):
        raise ConfigError(f"the watchdog's limit must be positive, got {_human(limit)}")
    if not 0 < heartbeat < float("inf"):
        raise ConfigError(f"the heartbeat interval must be positive, got {heartbeat!r}")
    now = now or _now()

    def cutoff(interval: float | None) -> tuple[datetime, timedelta]:
        beats = timedelta(seconds=MISSED_BEATS * (interval or heartbeat))
        effective = max(limit, beats)
        return now - effective, effective

    accesses: list[int] = []
    customers: list[int] = []
    async with sessions() as session, session.begin():
        in_progress = Access.scrape_state == ScrapeState.IN_PROGRESS
        alive_at = func.coalesce(Access.heartbeat_at, Access.scrape_started_at)
        for interval in await _intervals(session, Access.heartbeat_seconds, in_progress):
            before, effective = cutoff(interval)
            reset = await session.scalars(
                update(Access)
                .where(
                    in_progress,
                    _same(Access.heartbeat_seconds, interval),
                    or_(alive_at < before, alive_at.is_(None)),
                    true() if customer is None else Access.customer_id == customer,
                )
                .values(
                    scrape_state=ScrapeState.IDLE,
                    result_code=ResultCode.TIMEOUT,
                    result_detail=f"reset by the watchdog: no heartbeat for {_human(effective)}",
                    scrape_finished_at=now,
                    held_by=None,
                )
                .returning(Access.id)
            )
            accesses += reset.all()
        busy = select(Access.id).where(Access.customer_id == Customer.id, in_progress).exists()
        refreshing = Customer.scrape_state == ScrapeState.IN_PROGRESS
        customer_alive_at = func.coalesce(Customer.heartbeat_at, Customer.scrape_started_at)
        for interval in await _intervals(session, Customer.heartbeat_seconds, refreshing):
            before, _ = cutoff(interval)
            reset = await session.scalars(
                update(Customer)
                .where(
                    refreshing,
                    _same(Customer.heartbeat_seconds, interval),
                    or_(customer_alive_at < before, customer_alive_at.is_(None)),
                    ~busy,
                    true() if customer is None else Customer.id == customer,
                )
                .values(scrape_state=ScrapeState.IDLE, scrape_finished_at=now, held_by=None)
                .returning(Customer.id)
            )
            customers += reset.all()
    if accesses or customers:
        _log.warning("reset stuck scrapes", accesses=accesses, customers=customers)
    return StuckReset(tuple(sorted(accesses)), tuple(sorted(customers)))


async def _intervals(
    session: AsyncSession, column: InstrumentedAttribute[float | None], where: Any
) -> list[float | None]:
    """The heartbeat intervals stored on the rows in progress (None: rows without one)."""
    return list((await session.scalars(select(column).where(where).distinct())).all())


def _same(column: InstrumentedAttribute[float | None], interval: float | None) -> Any:
    return column.is_(None) if interval is None else column == interval


def _claimed(access: Access, bank: str) -> ClaimedAccess:
    return ClaimedAccess(access.id, bank, access.login, access.secret, access.session_state)


def _human(limit: timedelta) -> str:
    exact = limit.total_seconds()
    seconds = int(exact)
    if seconds != exact or seconds <= 0:
        return f"{exact:g} s"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def _now() -> datetime:
    return datetime.now(UTC)


def _rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)
