"""The webhook delivery loop: claims due deliveries of the outbox with a lease, POSTs each one
signed, records the answer (``delivered`` on 2xx, else a retry with backoff until the give-up
window closes, then ``failed``). The registry and the outbox are in ``_webhooks.py``."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson
import yarl
from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow._util.tasks import stop_task
from scrapeflow.config import Settings
from scrapeflow.db import connection_lost
from scrapeflow.errors import EgressBlocked, ScrapeflowError
from scrapeflow.http import EgressPolicy, failure_class, judge_target
from scrapeflow.server._events import EventLog, events_table
from scrapeflow.server._keys import keys_table
from scrapeflow.server._webhooks import (
    DeliveryState,
    backoff,
    deliveries_table,
    idempotency_id,
    sign,
    webhooks_table,
)

if TYPE_CHECKING:
    import aiohttp

    from scrapeflow.banking import CredentialVault

__all__ = ["USER_AGENT", "Courier"]

_log = get_logger(__name__)

_TIMEOUT = 10.0
"""Seconds a receiver has to answer one delivery."""
_CONNECT_TIMEOUT = 5.0
"""Seconds to connect to a receiver (within ``_TIMEOUT``)."""
USER_AGENT = "scrapeflow-webhooks/1"
_LEASE = timedelta(seconds=60)
"""How long a claimed delivery is this process's alone: well past one send's timeout."""


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
        self.egress = EgressPolicy.from_settings(settings)
        """Where deliveries may go: the receivers are clients' URLs."""
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
        await stop_task(self._task)
        # Sends cut short go back to the outbox at once, for the next process to pick up.
        async with self.engine.begin() as connection:
            await connection.execute(
                update(deliveries_table)
                .where(deliveries_table.c.lease_owner == self.owner)
                .values(lease_owner=None, lease_until=None)
            )

    async def _run(self) -> None:
        import aiohttp

        # Every receiver is a client's URL: connections go only where the egress policy
        # allows (checked as dialled), no cookie is kept or sent (a receiver's cookie would
        # travel to another client's receiver), and a receiver has bounded time to answer.
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=_TIMEOUT, connect=_CONNECT_TIMEOUT),
            connector=self.egress.connector(limit=self.concurrency),
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": USER_AGENT},
        ) as session:
            failing = 0  # rounds failed in a row: an outage is told once, with its cause
            try:
                while True:
                    changed = self.events.next_change
                    self._freed.clear()
                    try:
                        wait = await self._round(session)
                        if failing:
                            _log.warning("webhook outbox rounds work again", failed=failing)
                        failing = 0
                    except Exception as exc:  # the database hiccuped: log, wait, try again
                        if not failing:
                            _log.exception("webhook outbox round failed")
                        elif not connection_lost(exc):  # the same outage: said once
                            _log.warning("webhook outbox round failed", error=redact(repr(exc)))
                        failing += 1
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
                        k.expires_at,
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
            dead = set(won) - {
                r.id for r in rows if not r.revoked and (r.expires_at is None or r.expires_at > now)
            }
            if dead:  # the event, the webhook or its key is gone: nobody to send it to
                await connection.execute(
                    update(deliveries_table)
                    .where(d.id.in_(dead))
                    .values(
                        state=DeliveryState.FAILED.value,
                        next_attempt_at=None,
                        lease_owner=None,
                        lease_until=None,
                        last_error="the webhook's key was revoked or expired, or the event is gone",
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
            target = yarl.URL(due.url)
            proxy = self.egress.proxy_for(target)
            try:
                if proxy is not None:  # the proxy dials: the receiver is judged here first
                    await judge_target(self.egress, target)
                async with session.post(
                    target, data=due.body, headers=headers, allow_redirects=False, proxy=proxy
                ) as response:
                    status = response.status
            except (aiohttp.ClientError, OSError, ValueError, ScrapeflowError) as exc:
                # A fixed phrase: the log is the client's to read, and what the peer said
                # (a banner, a status line) must never come back through it.
                error = _failure(exc)
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


def _failure(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return f"timed out (no answer within {_TIMEOUT:g} s)"
    if isinstance(error, EgressBlocked):
        return str(error)
    if isinstance(error, ValueError):  # aiohttp refused the URL itself
        return "invalid URL"
    if isinstance(error, ScrapeflowError):  # a name the proxy would be asked for: unknown here
        return "name not resolved"
    return failure_class(error)


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
