"""Webhooks: each API client (key) registers URLs that get its events, signed, from a stored
outbox. See ``docs/webhooks.md``.

* :class:`Webhooks` keeps the registry (``scrapeflow_webhooks``) and the outbox, which is also
  the delivery log (``scrapeflow_webhook_deliveries``). Its :meth:`Webhooks.enqueue` is the
  event log's outbox hook: one pending delivery per webhook that wants the event, written in
  the transaction that stores the event, so a process dying right after loses nothing.
* :class:`Courier` is the delivery loop the app's lifespan runs: it claims due deliveries with
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

import asyncio
import contextlib
import enum
import hashlib
import hmac
import os
import random
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
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
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.config import Settings
from scrapeflow.db import UTCDateTime
from scrapeflow.errors import ScrapeflowError
from scrapeflow.server._events import EVENT_KINDS, Event, EventLog, events_table
from scrapeflow.server._keys import ApiKey, keys_table

if TYPE_CHECKING:
    import aiohttp

    from scrapeflow.banking import CredentialVault

__all__ = [
    "MAX_URL",
    "Courier",
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

_log = get_logger(__name__)

MAX_URL = 2048
_TIMEOUT = 10.0
"""Seconds a receiver has to answer one delivery."""
_LEASE = timedelta(seconds=60)
"""How long a claimed delivery is this process's alone: well past one send's timeout."""
_MAX_DELAY = 3600.0
"""The longest wait between two attempts, however many failed."""
_MAX_ERROR = 300

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
    Column("last_error", String(_MAX_ERROR)),
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

    async def open(self) -> None:
        """Create the tables when they are missing; idempotent."""
        async with self.engine.begin() as connection:
            await connection.run_sync(metadata.create_all, checkfirst=True)

    async def create(
        self, key: ApiKey, url: str, events: Sequence[str], vault: CredentialVault
    ) -> tuple[Webhook, str]:
        """A new webhook of ``key``, and its signing secret (returned once, stored sealed)."""
        secret = "whsec_" + secrets.token_urlsafe(32)
        hook = Webhook("wh_" + secrets.token_hex(8), key.id, url, tuple(events), _now())
        async with self.engine.begin() as connection:
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

    async def enqueue(self, connection: AsyncConnection, event: Event) -> None:
        """The event log's outbox hook: a pending delivery of ``event`` for each webhook that
        wants it, on the event's own connection and transaction. A key restricted to customers
        gets only their events; a revoked key's webhooks get nothing."""
        rows = (
            await connection.execute(
                select(webhooks_table.c.id, webhooks_table.c.events, keys_table.c.customers)
                .join(keys_table, keys_table.c.id == webhooks_table.c.key_id)
                .where(keys_table.c.revoked.is_(False))
            )
        ).all()
        wanted = [
            row.id
            for row in rows
            if _wants(row.events or (), event.kind)
            and (not row.customers or event.customer in row.customers)
        ]
        if not wanted:
            return
        await connection.execute(
            insert(deliveries_table),
            [
                {
                    "webhook_id": webhook_id,
                    "event_id": event.id,
                    "kind": event.kind,
                    "state": DeliveryState.PENDING.value,
                    "attempts": 0,
                    "next_attempt_at": event.at,
                    "event_at": event.at,
                }
                for webhook_id in wanted
            ],
        )


@dataclass(frozen=True, slots=True)
class _Due:
    """A claimed delivery, with what it takes to send it."""

    row: int
    webhook_id: str
    event_id: int
    attempts: int
    event_at: datetime
    url: str
    secret_sealed: str
    body: bytes


class Courier:
    """Sends the outbox: claims due deliveries (a lease each), POSTs them signed, records the
    answer. Use as an async context manager; leaving it stops sending and frees the leases it
    holds, so another process (or the next start) sends them.

    >>> async with Courier(engine, settings, events):  # doctest: +SKIP
    ...     ...  # deliveries go out while the service runs
    """

    def __init__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        events: EventLog,
        *,
        concurrency: int = 8,
        poll: float = 1.0,
    ) -> None:
        if concurrency < 1 or poll <= 0:
            raise ValueError("concurrency and poll must be positive")
        self.engine = engine
        self.settings = settings
        self.events = events
        self.concurrency = concurrency
        self.poll = poll
        """How often to look for deliveries another process queued or let go."""
        self.owner = f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._vault: CredentialVault | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._freed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Courier:
        self._task = asyncio.create_task(self._run(), name="webhook-courier")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # Sends cut short go back to the outbox at once, for the next process to pick up.
        async with self.engine.begin() as connection:
            await connection.execute(
                update(deliveries_table)
                .where(deliveries_table.c.lease_owner == self.owner)
                .values(lease_owner=None, lease_until=None)
            )

    async def _run(self) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=_TIMEOUT)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        async with aiohttp.ClientSession(
            timeout=timeout, connector=connector, headers={"User-Agent": "scrapeflow-webhooks/1"}
        ) as session:
            try:
                while True:
                    changed = self.events.next_change
                    self._freed.clear()
                    try:
                        wait = await self._round(session)
                    except Exception:  # the database hiccuped: log, wait, try again
                        _log.exception("webhook outbox round failed")
                        wait = self.poll
                    if wait > 0:
                        await _first(wait, changed, self._freed)
            finally:
                for task in self._sending:
                    task.cancel()
                await asyncio.gather(*self._sending, return_exceptions=True)

    async def _round(self, session: aiohttp.ClientSession) -> float:
        """Start sending what is due, as far as free slots go; the seconds until the next
        delivery falls due (at most ``poll``)."""
        free = self.concurrency - len(self._sending)
        if free <= 0:
            return self.poll  # woken when a send ends
        for due in await self._claim(_now(), free):
            task = asyncio.create_task(self._deliver(session, due))
            self._sending.add(task)
            task.add_done_callback(self._sent)
        if len(self._sending) >= self.concurrency:
            return self.poll
        d = deliveries_table.c
        now = _now()
        async with self.engine.connect() as connection:
            soonest: datetime | None = (
                await connection.execute(
                    select(func.min(d.next_attempt_at)).where(
                        d.state == DeliveryState.PENDING.value,
                        or_(d.lease_until.is_(None), d.lease_until < now),
                    )
                )
            ).scalar()
        if soonest is None:
            return self.poll
        return min(self.poll, max((soonest - now).total_seconds(), 0.0))

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self._freed.set()
        if not task.cancelled() and task.exception() is not None:
            _log.error("webhook delivery crashed", error=repr(task.exception()))

    async def _claim(self, now: datetime, limit: int) -> list[_Due]:
        """Lease up to ``limit`` due deliveries: each is ours if the conditional update says
        so (another process may win the same row)."""
        d = deliveries_table.c
        free = or_(d.lease_until.is_(None), d.lease_until < now)
        won: list[int] = []
        async with self.engine.begin() as connection:
            candidates = (
                await connection.execute(
                    select(d.id)
                    .where(d.state == DeliveryState.PENDING.value, d.next_attempt_at <= now, free)
                    .order_by(d.next_attempt_at, d.id)
                    .limit(limit)
                )
            ).scalars()
            for row in list(candidates):
                done = await connection.execute(
                    update(deliveries_table)
                    .where(d.id == row, d.state == DeliveryState.PENDING.value, free)
                    .values(lease_owner=self.owner, lease_until=now + _LEASE)
                )
                if done.rowcount == 1:
                    won.append(row)
            if not won:
                return []
            w, e, k = webhooks_table.c, events_table.c, keys_table.c
            rows = (
                await connection.execute(
                    select(
                        d.id,
                        d.webhook_id,
                        d.event_id,
                        d.attempts,
                        d.event_at,
                        w.url,
                        w.secret_sealed,
                        k.revoked,
                        e.kind,
                        e.customer,
                        e.job_id,
                        e.data,
                        e.at,
                    )
                    .join(webhooks_table, w.id == d.webhook_id)
                    .join(events_table, e.id == d.event_id)
                    .join(keys_table, k.id == w.key_id)
                    .where(d.id.in_(won))
                )
            ).all()
            dead = set(won) - {r.id for r in rows if not r.revoked}
            if dead:  # the event, the webhook or its key is gone: nobody to send it to
                await connection.execute(
                    update(deliveries_table)
                    .where(d.id.in_(dead))
                    .values(
                        state=DeliveryState.FAILED.value,
                        next_attempt_at=None,
                        lease_owner=None,
                        lease_until=None,
                        last_error="the webhook's API key was revoked, or the event is gone",
                    )
                )
        return [
            _Due(
                row=r.id,
                webhook_id=r.webhook_id,
                event_id=r.event_id,
                attempts=r.attempts,
                event_at=r.event_at,
                url=r.url,
                secret_sealed=r.secret_sealed,
                body=orjson.dumps(
                    {
                        "id": idempotency_id(r.webhook_id, r.event_id),
                        "kind": r.kind,
                        "created": r.at.isoformat(),
                        "customer": r.customer,
                        "job_id": r.job_id,
                        "data": r.data or {},
                    }
                ),
            )
            for r in rows
            if r.id not in dead
        ]

    def _secret(self, due: _Due) -> str:
        from scrapeflow.banking import CredentialVault

        if self._vault is None:
            self._vault = CredentialVault.from_settings(self.settings)
        return self._vault.decrypt(due.secret_sealed.encode())

    async def _deliver(self, session: aiohttp.ClientSession, due: _Due) -> None:
        """One attempt: POST, then record what came of it."""
        import aiohttp

        status: int | None = None
        error: str | None = None
        try:
            secret = self._secret(due)
        except ScrapeflowError:  # no vault key, or not the one that sealed it
            error = "cannot open the signing secret: the service's vault keys changed"
        else:
            stamp = int(time.time())
            headers = {
                "Content-Type": "application/json",
                "Scrapeflow-Signature": sign(secret, stamp, due.body),
                "Scrapeflow-Event-Id": idempotency_id(due.webhook_id, due.event_id),
                "Idempotency-Key": idempotency_id(due.webhook_id, due.event_id),
            }
            try:
                async with session.post(
                    due.url, data=due.body, headers=headers, allow_redirects=False
                ) as response:
                    status = response.status
            except TimeoutError:
                error = f"no answer within {_TIMEOUT:g} s"
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                error = redact(f"{type(exc).__name__}: {exc}")[:_MAX_ERROR]
        await self._record(due, status=status, error=error)

    async def _record(self, due: _Due, *, status: int | None, error: str | None) -> None:
        now = _now()
        attempts = due.attempts + 1
        delivered = status is not None and 200 <= status < 300
        values: dict[str, Any] = {
            "attempts": attempts,
            "last_status": status,
            "last_error": None if delivered else error or f"HTTP {status}",
            "lease_owner": None,
            "lease_until": None,
        }
        later = now + timedelta(seconds=backoff(attempts, self.settings.webhook_retry_base))
        if delivered:
            values |= {"state": DeliveryState.DELIVERED.value, "delivered_at": now}
            values["next_attempt_at"] = None
        elif later > due.event_at + timedelta(hours=self.settings.webhook_give_up):
            values |= {"state": DeliveryState.FAILED.value, "next_attempt_at": None}
        else:
            values["next_attempt_at"] = later
        d = deliveries_table.c
        async with self.engine.begin() as connection:
            await connection.execute(
                update(deliveries_table)
                .where(d.id == due.row, d.lease_owner == self.owner)
                .values(**values)
            )
        _log.info(
            "webhook delivery",
            webhook=due.webhook_id,
            event_id=due.event_id,
            attempt=attempts,
            status=status,
            error=values["last_error"],
            state=values.get("state", DeliveryState.PENDING.value),
        )


async def _first(seconds: float, *signals: asyncio.Event) -> None:
    """Wait until one of ``signals`` is set, or ``seconds`` pass."""
    waiters = [asyncio.ensure_future(signal.wait()) for signal in signals]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _now() -> datetime:
    return datetime.now(UTC)
