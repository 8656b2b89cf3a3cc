"""Webhooks: each API client (key) registers URLs that get its events, signed, from a stored
outbox. See ``docs/webhooks.md``.

* :class:`Webhooks` keeps the registry (``scrapeflow_webhooks``) and the outbox, which is also
  the delivery log (``scrapeflow_webhook_deliveries``). Its :meth:`Webhooks.enqueue` is the
  event log's outbox hook: one pending delivery per webhook that wants the event, written in
  the transaction that stores the event, so a process dying right after loses nothing. On
  PostgreSQL it remembers the registry it read last, with the registry's version (a row that
  every webhook made or removed moves on, ``scrapeflow_webhook_registry``): a batch of events
  none of whose webhooks wants is stored in one statement under "the version is still this
  one" (:meth:`Webhooks.quiet`), without a transaction. That statement holds the version's row
  (``FOR SHARE``) until it commits, and a webhook's creation updates it: a webhook made before
  the batch commits fails its guard (the batch is then stored the usual way, and gets its
  delivery), and one made meanwhile waits for the batch to commit.
* :class:`~scrapeflow.server._courier.Courier` is the delivery loop the app's lifespan runs
  (in ``_courier.py``): it claims due deliveries with
  a lease, POSTs each signed (``Scrapeflow-Signature: t=<unix>,v1=<HMAC-SHA256 of "t.body">``),
  and records the answer: ``delivered`` on 2xx; else retried with exponential backoff and
  jitter until ``webhook_give_up`` hours after the event, then ``failed``.

Delivery is at least once. The lease keeps two processes on one database from sending the
same delivery while it holds; a process killed between a send and its record sends again once
the lease expires, with the same idempotency id (stable per event and webhook), so a receiver
drops the repeat. Signing secrets are sealed with the credential vault: the server must read
them back to sign, and a copy of the database alone does not give them away.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
import random
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

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
    Text,
    UniqueConstraint,
    delete,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import UTCDateTime, create_tables
from scrapeflow.server._eventrows import Guard
from scrapeflow.server._events import EVENT_KINDS, Event, Told
from scrapeflow.server._keys import ApiKey, Scope

if TYPE_CHECKING:
    from scrapeflow.banking import CredentialVault

__all__ = [
    "MAX_ERROR",
    "MAX_URL",
    "Delivery",
    "DeliveryState",
    "Webhook",
    "Webhooks",
    "backoff",
    "describe_kinds",
    "idempotency_id",
    "sign",
    "unknown_filters",
]

MAX_URL = 2048
_MAX_DELAY = 3600.0
"""The longest wait between two attempts, however many failed."""
MAX_ERROR = 300

metadata = MetaData()
webhooks_table = Table(
    "scrapeflow_webhooks",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("key_id", String(16), nullable=False),
    Column("url", String(MAX_URL), nullable=False),
    Column("events", JSON, nullable=False),
    Column("secret_sealed", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_scrapeflow_webhooks_key", "key_id"),
)
registry_table = Table(
    "scrapeflow_webhook_registry",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("version", BigInteger, nullable=False),
)
"""One row (id 1): the registry's version, moved on by every webhook made or removed."""
deliveries_table = Table(
    "scrapeflow_webhook_deliveries",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("webhook_id", String(32), nullable=False),
    Column("event_id", BigInteger, nullable=False),
    Column("kind", String(40), nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime),
    Column("lease_owner", String(64)),
    Column("lease_until", UTCDateTime),
    Column("last_status", Integer),
    Column("last_error", String(MAX_ERROR)),
    Column("event_at", UTCDateTime, nullable=False),
    Column("delivered_at", UTCDateTime),
    UniqueConstraint("webhook_id", "event_id", name="uq_scrapeflow_webhook_deliveries_event"),
    Index("ix_scrapeflow_webhook_deliveries_due", "state", "next_attempt_at"),
    Index("ix_scrapeflow_webhook_deliveries_webhook", "webhook_id", "id"),
)


class DeliveryState(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Webhook:
    """A URL that gets the events of the key that registered it."""

    id: str
    key_id: str
    url: str
    events: tuple[str, ...]
    """Event kinds (``job.succeeded``) or prefixes ending in a dot (``bank.``); empty: all."""
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event for one webhook: a line of the delivery log."""

    row: int
    """Its place in the log (newest has the highest)."""
    webhook_id: str
    event_id: int
    kind: str
    state: DeliveryState
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    event_at: datetime

    @property
    def id(self) -> str:
        return idempotency_id(self.webhook_id, self.event_id)


def idempotency_id(webhook_id: str, event_id: int) -> str:
    """The id a receiver sees for an event, the same on every attempt: ``wh_…-<event id>``."""
    return f"{webhook_id}-{event_id}"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Scrapeflow-Signature`` header: ``t=<timestamp>,v1=<hex HMAC-SHA256>`` of
    ``"<timestamp>.<body>"`` under the secret (its UTF-8 bytes).

    >>> sign("whsec_x", 1700000000, b"{}")[:16]
    't=1700000000,v1='
    """
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def backoff(attempts: int, base: float) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: ``base`` doubled each
    time, at most an hour, with jitter (between half and all of it, so receivers that failed
    together do not all come back together)."""
    delay = min(_MAX_DELAY, base * 2.0 ** min(max(attempts - 1, 0), 40))
    return delay / 2 + random.uniform(0, delay / 2)


def _families() -> set[str]:
    return {kind.split(".", 1)[0] + "." for kind in EVENT_KINDS}


def unknown_filters(filters: Iterable[str]) -> list[str]:
    """The filters that name no event kind and no family of kinds (``bank.``, ``job.``)."""
    families = _families()
    return [f for f in filters if f not in EVENT_KINDS and f not in families]


def describe_kinds() -> str:
    """The kinds and prefixes a filter may name, for an error message."""
    return ", ".join(sorted(EVENT_KINDS)) + "; or a prefix: " + ", ".join(sorted(_families()))


def _wants(filters: Sequence[str], kind: str) -> bool:
    return not filters or any(
        kind == f or (f.endswith(".") and kind.startswith(f)) for f in filters
    )


_MOVE_ON = (
    update(registry_table)
    .where(registry_table.c.id == 1)
    .values(version=registry_table.c.version + 1)
)
"""The registry's version moved on, first in a webhook's creation or removal: a batch of
events stored under the version read before waits for it, or sees it."""
_REGISTRY_READ = text(
    "SELECT r.version, w.id, w.events, w.key_id, k.customers, k.scopes, k.expires_at "
    "FROM (SELECT 1) AS one "
    "LEFT JOIN scrapeflow_webhook_registry AS r ON r.id = 1 "
    "LEFT JOIN (scrapeflow_webhooks AS w JOIN scrapeflow_api_keys AS k ON k.id = w.key_id "
    "AND NOT k.revoked) ON true"
).columns(events=JSON, customers=JSON, scopes=JSON, expires_at=UTCDateTime)
"""The registry's version, and every webhook of a key not revoked with its key's customers,
scopes and expiry, in one statement (one snapshot)."""
_STILL = "(SELECT version FROM scrapeflow_webhook_registry WHERE id = 1 FOR SHARE) = :guard_version"
"""The guard of a batch stored without reading the registry: its version is still the one
read. ``FOR SHARE`` reads the row's newest committed version (a webhook's creation that
committed after the statement began is seen), and holds it until the batch commits (a
creation that comes later waits)."""


@dataclass(frozen=True, slots=True)
class _Registry:
    """The webhooks (with their keys' customers, scopes and expiry) as read at ``version``."""

    version: int
    rows: tuple[Any, ...]


def _webhook(row: Any) -> Webhook:
    return Webhook(row.id, row.key_id, row.url, tuple(row.events or ()), row.created_at)


def _delivery(row: Any) -> Delivery:
    return Delivery(
        row=row.id,
        webhook_id=row.webhook_id,
        event_id=row.event_id,
        kind=row.kind,
        state=DeliveryState(row.state),
        attempts=row.attempts,
        last_status=row.last_status,
        last_error=row.last_error,
        next_attempt_at=row.next_attempt_at,
        delivered_at=row.delivered_at,
        event_at=row.event_at,
    )


class Webhooks:
    """The registered webhooks and their outbox (the delivery log)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._known: _Registry | None = None
        """PostgreSQL: the registry as the last batch of events read it."""

    async def open(self) -> None:
        """Create the tables when they are missing, and the registry's version; idempotent."""
        await create_tables(self.engine, metadata)
        r = registry_table.c
        async with self.engine.connect() as connection:
            found = await connection.scalar(select(r.version).where(r.id == 1))
        if found is None:
            with contextlib.suppress(IntegrityError):  # another process made it meanwhile
                async with self.engine.begin() as connection:
                    await connection.execute(insert(registry_table).values(id=1, version=0))

    async def create(
        self, key: ApiKey, url: str, events: Sequence[str], vault: CredentialVault
    ) -> tuple[Webhook, str]:
        """A new webhook of ``key``, and its signing secret (returned once, stored sealed)."""
        secret = "whsec_" + secrets.token_urlsafe(32)
        hook = Webhook("wh_" + secrets.token_hex(8), key.id, url, tuple(events), _now())
        async with self.engine.begin() as connection:
            await connection.execute(_MOVE_ON)
            await connection.execute(
                insert(webhooks_table).values(
                    id=hook.id,
                    key_id=hook.key_id,
                    url=hook.url,
                    events=list(hook.events),
                    secret_sealed=vault.encrypt(secret).decode(),
                    created_at=hook.created_at,
                )
            )
        return hook, secret

    async def get(self, webhook_id: str) -> Webhook | None:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(
                    select(webhooks_table).where(webhooks_table.c.id == webhook_id)
                )
            ).first()
        return None if row is None else _webhook(row)

    async def of(self, key_id: str | None) -> list[Webhook]:
        """The webhooks of one key, oldest first; every key's when ``key_id`` is None."""
        query = select(webhooks_table).order_by(webhooks_table.c.created_at, webhooks_table.c.id)
        if key_id is not None:
            query = query.where(webhooks_table.c.key_id == key_id)
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        return [_webhook(r) for r in rows]

    async def delete(self, webhook_id: str) -> None:
        """Remove the webhook and its deliveries: nothing more is sent to it."""
        async with self.engine.begin() as connection:
            await connection.execute(_MOVE_ON)
            await connection.execute(
                delete(deliveries_table).where(deliveries_table.c.webhook_id == webhook_id)
            )
            await connection.execute(
                delete(webhooks_table).where(webhooks_table.c.id == webhook_id)
            )

    async def deliveries(
        self,
        webhook_id: str,
        *,
        limit: int = 50,
        before: int | None = None,
        state: DeliveryState | None = None,
    ) -> list[Delivery]:
        """The webhook's delivery log, newest first; ``before`` a row, for the next page."""
        d = deliveries_table.c
        query = select(deliveries_table).where(d.webhook_id == webhook_id)
        if before is not None:
            query = query.where(d.id < before)
        if state is not None:
            query = query.where(d.state == state.value)
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query.order_by(d.id.desc()).limit(limit))).all()
        return [_delivery(r) for r in rows]

    async def backlog(self) -> int:
        """Deliveries pending in the outbox (due now or waiting for a retry)."""
        d = deliveries_table.c
        async with self.engine.connect() as connection:
            pending = await connection.execute(
                select(func.count()).where(d.state == DeliveryState.PENDING.value)
            )
            return int(pending.scalar_one())

    def enqueue(self, connection: Connection, events: Sequence[Event]) -> bool:
        """The event log's outbox: a pending delivery of each event for each webhook that
        wants it, on the events' own connection and transaction (the webhooks read once for
        the events stored together). A key restricted to customers gets only their events;
        the events of a job of no customer (a fetch or run job) go to the webhooks of the key
        that made it and of unrestricted admin keys only; a revoked or expired key's webhooks
        get nothing."""
        rows = self._registry(connection)
        if not rows:
            return False
        deliveries = [
            {
                "webhook_id": webhook_id,
                "event_id": event.id,
                "kind": event.kind,
                "state": DeliveryState.PENDING.value,
                "attempts": 0,
                "next_attempt_at": event.at,
                "event_at": event.at,
            }
            for event in events
            for webhook_id in _wanting(rows, event)
        ]
        if deliveries:
            connection.execute(insert(deliveries_table), deliveries)
        return bool(deliveries)

    def quiet(self, events: Sequence[Told]) -> Guard | None:
        """The event log's outbox: on PostgreSQL, when the registry last read wants none of
        ``events``, the condition that it is still the same (its version); else None."""
        known = self._known
        if known is None:
            return None
        rows = _live(known.rows)
        if any(_wanting(rows, event) for event in events):
            return None
        return Guard(_STILL, {"guard_version": known.version})

    def _registry(self, connection: Connection) -> list[Any]:
        """The webhooks of keys neither revoked nor expired, with their keys' customers and
        scopes, remembered with the registry's version (:meth:`quiet`, PostgreSQL's)."""
        found = connection.execute(_REGISTRY_READ).all()
        rows = tuple(row for row in found if row.id is not None)
        version = found[0].version  # None without its row: no batch goes unread then
        self._known = None if version is None else _Registry(int(version), rows)
        return _live(rows)


def _live(rows: Sequence[Any]) -> list[Any]:
    """The rows whose key has not expired by now."""
    now = datetime.now(UTC)
    return [row for row in rows if row.expires_at is None or row.expires_at > now]


def _wanting(rows: Sequence[Any], event: Told) -> list[int]:
    """The webhooks (of ``rows``: id, events, key id, the key's customers and scopes) that get
    ``event``."""
    owner = event.data.get("submitted_by") if event.customer is None else None
    return [
        row.id
        for row in rows
        if _wants(row.events or (), event.kind)
        and (not row.customers or event.customer in row.customers)
        and (
            event.customer is not None
            or not event.kind.startswith("job.")
            or row.key_id == owner
            or Scope.ADMIN.value in (row.scopes or ())
        )
    ]


def _now() -> datetime:
    return datetime.now(UTC)
