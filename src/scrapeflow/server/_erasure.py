"""Erasing a customer, or one of its accesses, with everything read through it.

One transaction takes the customer's row first (the write lock on SQLite, the row's lock on
PostgreSQL: a refresh cannot claim it meanwhile), refuses while a refresh or a one-time code is
queued or running for it (:class:`~scrapeflow.errors.RefreshInProgress`), then deletes: the
accesses with their sealed credentials and session state, contracts, accounts, movements and
removals (the bank tables' cascades), the service's events of the customer and the webhook
deliveries waiting to carry them, and its ended jobs. A record of the erasure stays in
``scrapeflow_erasures``: when, what kind, who (an API key's id, or ``cli``) and how many rows of
each kind, never an id, a name or a login. The launch logs of an erased customer
(``{log_dir}/…_customer-{id}_….log``) are deleted once the transaction committed.

An access is erased the same way, with the customer's events that name it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from scrapeflow.banking import (
    BANK_OTP,
    BANK_REFRESH,
    Access,
    Account,
    Customer,
    Movement,
    ScrapeState,
    validate_customer_id,
)
from scrapeflow.db import UTCDateTime, create_tables
from scrapeflow.errors import InputError, RefreshInProgress
from scrapeflow.jobs import JobState
from scrapeflow.jobs._jobtable import jobs_table
from scrapeflow.server._events import events_table
from scrapeflow.server._webhooks import deliveries_table

__all__ = ["Erasure", "erase_access", "erase_customer", "erasures_table"]

metadata = MetaData()
erasures_table = Table(
    "scrapeflow_erasures",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("at", UTCDateTime, nullable=False),
    Column("what", String(16), nullable=False),
    Column("by", String(64), nullable=False),
    Column("counts", JSON, nullable=False),
)

_ACTIVE = (JobState.QUEUED.value, JobState.RUNNING.value)


@dataclass(frozen=True, slots=True)
class Erasure:
    """What an erasure removed: rows of each kind (and launch log files)."""

    what: str
    at: datetime
    counts: dict[str, int]


async def erase_customer(
    engine: AsyncEngine, customer: str, *, by: str, log_dir: Path | None = None
) -> Erasure:
    """Erase ``customer`` and everything of it (see the module). :class:`InputError` when there
    is no such customer; :class:`RefreshInProgress` while it is being refreshed."""
    customer = validate_customer_id(customer)
    await create_tables(engine, metadata)
    async with engine.begin() as connection:
        tables = await _tables(connection)
        owner = await _take(connection, customer, tables)
        counts = {
            "accesses": await _count(connection, Access.customer_id == owner),
            "accounts": await _count(connection, Access.customer_id == owner, Account),
            "movements": await _count(connection, Access.customer_id == owner, Movement),
        }
        if jobs_table.name in tables:
            counts["jobs"] = await _erase_jobs(connection, customer)
        if events_table.name in tables:
            ids = select(events_table.c.id).where(events_table.c.customer == customer)
            counts["events"] = await _erase_events(connection, ids, tables)
        await connection.execute(delete(Customer).where(Customer.id == owner))
        erasure = await _record(connection, "customer", by, counts)
    if log_dir is not None:
        erasure.counts["launch_logs"] = _erase_logs(log_dir, customer)
    return erasure


async def erase_access(engine: AsyncEngine, customer: str, access_id: int, *, by: str) -> Erasure:
    """Erase one access of ``customer`` and what was read through it, the customer's events
    that name it too. :class:`InputError` when the customer has no such access;
    :class:`RefreshInProgress` while the customer is being refreshed."""
    customer = validate_customer_id(customer)
    await create_tables(engine, metadata)
    async with engine.begin() as connection:
        tables = await _tables(connection)
        owner = await _take(connection, customer, tables)
        mine = (Access.customer_id == owner) & (Access.id == access_id)
        if not await _count(connection, mine):
            raise InputError(f"customer {customer!r} has no access {access_id}")
        counts = {
            "accesses": 1,
            "accounts": await _count(connection, mine, Account),
            "movements": await _count(connection, mine, Movement),
        }
        if events_table.name in tables:
            rows = await connection.execute(
                select(events_table.c.id, events_table.c.data).where(
                    events_table.c.customer == customer
                )
            )
            ids = [row.id for row in rows if _names_access(row.data, access_id)]
            counts["events"] = await _erase_events(connection, ids, tables)
        await connection.execute(delete(Access).where(Access.id == access_id))
        return await _record(connection, "access", by, counts)


async def _tables(connection: AsyncConnection) -> set[str]:
    """The database's tables: the service's (events, jobs) exist only where it has run."""
    return set(await connection.run_sync(lambda sync: inspect(sync).get_table_names()))


async def _take(connection: AsyncConnection, customer: str, tables: set[str]) -> int:
    """Lock the customer's row (a write first: SQLite's write lock, PostgreSQL's row lock),
    then check that nothing refreshes it; its id."""
    mine = Customer.external_id == customer
    await connection.execute(update(Customer).where(mine).values(name=Customer.name))
    row = (await connection.execute(select(Customer.id, Customer.scrape_state).where(mine))).first()
    if row is None:
        raise InputError(f"no customer {customer!r}")
    busy = row.scrape_state == ScrapeState.IN_PROGRESS
    if not busy and jobs_table.name in tables:
        j = jobs_table.c
        active = select(func.count()).where(
            j.customer == customer, j.kind.in_([BANK_REFRESH, BANK_OTP]), j.state.in_(_ACTIVE)
        )
        busy = bool(await connection.scalar(active))
    if busy:
        raise RefreshInProgress(f"customer {customer!r} is being refreshed: erase it once done")
    return int(row.id)


async def _count(connection: AsyncConnection, where: Any, of: type | None = None) -> int:
    query = select(func.count()).select_from(Access)
    if of is Account or of is Movement:
        query = query.join(Account, Account.access_id == Access.id)
    if of is Movement:
        query = query.join(Movement, Movement.account_id == Account.id)
    return int(await connection.scalar(query.where(where)) or 0)


async def _erase_jobs(connection: AsyncConnection, customer: str) -> int:
    j = jobs_table.c
    done = await connection.execute(
        delete(jobs_table).where(j.customer == customer, j.state.not_in(_ACTIVE))
    )
    return int(done.rowcount or 0)


async def _erase_events(connection: AsyncConnection, ids: Any, tables: set[str]) -> int:
    """Delete events ``ids`` (a list or a subquery) and the deliveries waiting to carry them."""
    if isinstance(ids, list) and not ids:
        return 0
    if deliveries_table.name in tables:
        await connection.execute(
            delete(deliveries_table).where(deliveries_table.c.event_id.in_(ids))
        )
    done = await connection.execute(delete(events_table).where(events_table.c.id.in_(ids)))
    return int(done.rowcount or 0)


def _names_access(data: Any, access_id: int) -> bool:
    return isinstance(data, dict) and data.get("access_id") == access_id


async def _record(
    connection: AsyncConnection, what: str, by: str, counts: dict[str, int]
) -> Erasure:
    at = datetime.now(UTC)
    await connection.execute(
        insert(erasures_table).values(at=at, what=what, by=by[:64], counts=counts)
    )
    return Erasure(what, at, dict(counts))


def _erase_logs(log_dir: Path, customer: str) -> int:
    """The customer's launch logs, deleted; how many there were."""
    erased = 0
    with contextlib.suppress(OSError):
        for path in log_dir.glob(f"*_customer-{_glob_safe(customer)}_*.log"):
            with contextlib.suppress(OSError):
                path.unlink()
                erased += 1
    return erased


def _glob_safe(text: str) -> str:
    """``text`` with glob's special characters matched literally."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)
