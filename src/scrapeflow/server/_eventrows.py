"""The table of the event log and how a batch of events is stored in it, in turn with the
other processes' writers (see :mod:`scrapeflow.server._events`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    insert,
    text,
)
from sqlalchemy.sql.elements import BindParameter

from scrapeflow.db import UTCDateTime
from scrapeflow.server._notify import CHANNEL

__all__ = ["WRITERS_LOCK", "Guard", "events_table", "insert_events", "metadata"]

metadata = MetaData()
events_table = Table(
    "scrapeflow_events",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("customer", String(64)),
    Column("job_id", String(32)),
    Column("kind", String(40), nullable=False),
    Column("data", JSON, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Index("ix_scrapeflow_events_customer", "customer", "id"),
    Index("ix_scrapeflow_events_job", "job_id", "id"),
)


WRITERS_LOCK = 0x5CF1E7E4
"""The PostgreSQL advisory lock the event writers of every process take turns on."""


@dataclass(frozen=True, slots=True)
class Guard:
    """A condition a batch of events is stored under, checked in the statement that stores it
    (PostgreSQL): ``sql`` a boolean SQL expression whose bound parameters are ``params`` (their
    names start with ``guard_``). Fails, and nothing is stored."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


_CASTS = {
    "customer": "VARCHAR",
    "job_id": "VARCHAR",
    "kind": "VARCHAR",
    "data": "JSON",
    "at": "TIMESTAMPTZ",
}
"""What each value of a ``VALUES`` row is cast to (PostgreSQL infers no type there)."""


def _insert_in_turn(
    connection: Connection,
    rows: Sequence[Mapping[str, Any]],
    notice: str | None,
    guard: Guard | None,
) -> list[int]:
    """Store the batch on PostgreSQL in one statement that first takes the writers' turn (the
    advisory lock, held until commit) and queues the notice: the ids of the rows, in order.

    One statement, not three: the lock is held from the insert to the commit, a round trip or
    two, where a lock, an insert and a notice each waited for this process's event loop with
    every other process's writers waiting behind it. The rows come from a ``VALUES`` list in
    their order and draw their ids in that order under the lock: the ids, ascending, are the
    rows'. The lock's and the notice's one-row subqueries are joined to every row (PostgreSQL
    takes a lock it holds again at no cost, and sends identical notices of one transaction
    once). With a ``guard``, the rows are stored only where it holds: none, else."""
    values: list[str] = []
    params: dict[str, Any] = {"lock": WRITERS_LOCK}
    binds: list[BindParameter[Any]] = [bindparam("lock")]
    where = ""
    if guard is not None:
        params |= guard.params
        binds += [bindparam(name) for name in guard.params]
        where = f"WHERE {guard.sql} "
    notify = ""
    if notice is not None:
        params |= {"channel": CHANNEL, "notice": notice}
        binds += [bindparam("channel"), bindparam("notice")]
        notify = ", (SELECT pg_notify(:channel, :notice)) AS notice"
    for n, row in enumerate(rows):
        cells = []
        for name, sql_type in _CASTS.items():
            key = f"{name}_{n}"
            params[key] = row[name]
            binds.append(bindparam(key, type_=events_table.c[name].type))
            cells.append(f"CAST(:{key} AS {sql_type})")
        values.append(f"({', '.join(cells)}, {n})")
    # Names and placeholders of this function's own only: the values are bound.
    statement = text(
        "INSERT INTO scrapeflow_events (customer, job_id, kind, data, at) "  # noqa: S608
        "SELECT v.customer, v.job_id, v.kind, v.data, v.at "
        f"FROM (SELECT pg_advisory_xact_lock(:lock)) AS turn{notify}, "
        f"(VALUES {', '.join(values)}) AS v(customer, job_id, kind, data, at, n) "
        f"{where}ORDER BY v.n RETURNING id"
    ).bindparams(*binds)
    return sorted(int(i) for i in connection.execute(statement, params).scalars())


def insert_events(
    connection: Connection,
    rows: Sequence[Mapping[str, Any]],
    notice: str | None,
    guard: Guard | None = None,
) -> list[int]:
    """Store a batch of events (``rows``: customer, job_id, kind, data, at) in one statement,
    with the notice ``notice`` of :data:`~scrapeflow.server._notify.CHANNEL` where there is one
    (PostgreSQL): the ids of the rows, in order. With a ``guard`` (PostgreSQL only), nothing
    is stored where it fails: no ids."""
    if connection.dialect.name == "postgresql":
        return _insert_in_turn(connection, rows, notice, guard)
    if guard is not None:
        raise ValueError("a guarded insert of events is PostgreSQL's")
    # SQLite lets one writer in at a time by itself, and has no notices
    stored = connection.execute(
        insert(events_table).returning(events_table.c.id, sort_by_parameter_order=True), rows
    )
    return [int(i) for i in stored.scalars()]
