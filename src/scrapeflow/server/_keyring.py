"""The key ring: per-process knowledge of API keys, so that authentication costs no query on
most requests and a revocation reaches every process within a second.

* ``authenticate(token)``: the key, from a cache of at most :data:`CACHE_SECONDS` (then one
  query); a revocation or rotation made by this process drops its entries at once, one made by
  another process is seen when the entry is looked up again.
* ``revoked_signal(key_id, secret_sha256)``: an :class:`asyncio.Event` set when the key is
  revoked or expires, or a rotation drops that secret,
  whichever process revoked it. While some signal of a key is held (an open event stream holds
  one), a watcher asks the database about those keys every :data:`POLL_SECONDS` (one query for
  all of them; none when no signal is held). Signals are held weakly: one nobody holds is
  forgotten, and its key no longer asked about.
* The last use of each key is written at most once a minute per key and process, by the
  watcher, never on a request's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import weakref
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow._util.logs import get_logger
from scrapeflow._util.tasks import stop_task
from scrapeflow.db import QuickReads
from scrapeflow.server._keys import ApiKey, find_key, keys_table, split_token

__all__ = ["CACHE_SECONDS", "POLL_SECONDS", "KeyRing"]

_log = get_logger(__name__)

CACHE_SECONDS = 0.5
"""How long an authenticated key is believed without asking the database again: with the
watcher's poll, a revocation by another process is refused within a second."""
POLL_SECONDS = 0.5
"""How often the watcher asks about the keys whose signals are held."""
_LAST_USED_EVERY = 60.0
_MAX_CACHED = 10_000


class KeyRing:
    """Keys as this process knows them; an async context manager (its watcher runs inside)."""

    def __init__(self, engine: AsyncEngine, *, reads: QuickReads | None = None) -> None:
        self.engine = engine
        self.reads = reads
        # The look-ups under way, by digest: requests with a key whose entry just expired
        # share one query, not one each.
        self._lookups: dict[str, asyncio.Future[ApiKey | None]] = {}
        # sha256 of the whole token -> (key, monotonic time it was read): no token kept.
        self._cache: dict[str, tuple[ApiKey, float]] = {}
        # (key id, the stored hash of the secret a stream was opened with) -> its signal.
        self._signals: weakref.WeakValueDictionary[tuple[str, str], asyncio.Event] = (
            weakref.WeakValueDictionary()
        )
        self._used_written: dict[str, float] = {}
        self._used_pending: dict[str, datetime] = {}
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._watcher = asyncio.create_task(self._watch(), name="key-ring watcher")
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        watcher, self._watcher = self._watcher, None
        await stop_task(watcher)
        with contextlib.suppress(Exception):  # the database may be gone at shutdown
            await self._write_last_used()

    async def authenticate(self, token: str) -> ApiKey | None:
        """The key ``token`` is, or None (unknown, wrong secret, revoked, expired…)."""
        if split_token(token) is None:
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[1] < CACHE_SECONDS:
            known = cached[0]
            if known.valid_until is None or known.valid_until > datetime.now(UTC):
                self._used(known.id, now)
                return known
        self._cache.pop(digest, None)
        lookup = self._lookups.get(digest)
        if lookup is None:
            lookup = asyncio.ensure_future(find_key(self.engine, token, reads=self.reads))
            self._lookups[digest] = lookup
            lookup.add_done_callback(lambda _: self._lookups.pop(digest, None))
        # Shielded: one waiter leaving (its client gone) does not cancel the others' look-up.
        key = await asyncio.shield(lookup)
        if key is None:
            return None
        if len(self._cache) >= _MAX_CACHED:  # the oldest entry goes (dicts keep their order)
            self._cache.pop(next(iter(self._cache)))
        self._cache[digest] = (key, now)
        self._used(key.id, now)
        return key

    def revoked_signal(self, key_id: str, secret_sha256: str = "") -> asyncio.Event:
        """An event set once ``key_id`` is revoked or expired, or once a rotation's overlap has
        ended (at once without one) for the secret ``secret_sha256`` (the stored hash of the
        secret the holder was let in with, :attr:`ApiKey.secret_sha256`) — within a second,
        whichever process did it. Hold it as long as it matters: signals nobody holds are
        dropped."""
        signal = self._signals.get((key_id, secret_sha256))
        if signal is None:
            signal = asyncio.Event()
            self._signals[key_id, secret_sha256] = signal
        return signal

    def forget(self, key_id: str, *, revoked: bool = False) -> None:
        """This process changed the key (rotated, revoked): drop what it believed of it, and
        when ``revoked``, set its signal now."""
        for digest in [d for d, (key, _) in self._cache.items() if key.id == key_id]:
            del self._cache[digest]
        if revoked:
            for (watched, _), signal in list(self._signals.items()):
                if watched == key_id:
                    signal.set()

    def _used(self, key_id: str, now: float) -> None:
        written = self._used_written.get(key_id)
        if written is None or now - written >= _LAST_USED_EVERY:
            self._used_written[key_id] = now
            self._used_pending[key_id] = datetime.now(UTC)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self._check_signals()
                if self._used_pending:
                    await self._write_last_used()
            except Exception as exc:  # the database away for a moment: look again next time
                _log.warning("key ring could not read the keys", error=type(exc).__name__)

    async def _check_signals(self) -> None:
        held = [place for place, signal in self._signals.items() if not signal.is_set()]
        watched = sorted({key_id for key_id, _ in held})
        if not watched:
            return
        k = keys_table.c
        found: dict[str, Any] = {}
        async with self.engine.connect() as connection:
            for start in range(0, len(watched), 500):
                rows = await connection.execute(
                    select(
                        k.id,
                        k.revoked,
                        k.expires_at,
                        k.secret_sha256,
                        k.previous_sha256,
                        k.previous_until,
                    ).where(k.id.in_(watched[start : start + 500]))
                )
                found.update({r.id: r for r in rows})
        now = datetime.now(UTC)
        for key_id in watched:
            row = found.get(key_id)
            if row is None or row.revoked or (row.expires_at and row.expires_at <= now):
                self.forget(key_id, revoked=True)  # revoked, expired or deleted: gone
        for key_id, secret in held:
            row = found.get(key_id)
            if row is None or not secret:
                continue
            overlapping = row.previous_until is not None and row.previous_until > now
            valid = {row.secret_sha256} | ({row.previous_sha256} if overlapping else set())
            if secret not in valid:  # rotated away, its overlap over
                signal = self._signals.get((key_id, secret))
                if signal is not None:
                    signal.set()

    async def _write_last_used(self) -> None:
        pending, self._used_pending = self._used_pending, {}
        if not pending:
            return
        k = keys_table.c
        async with self.engine.begin() as connection:
            for key_id, when in pending.items():
                await connection.execute(
                    update(keys_table).where(k.id == key_id).values(last_used_at=when)
                )
        if len(self._used_written) > _MAX_CACHED:
            cutoff = time.monotonic() - _LAST_USED_EVERY
            self._used_written = {i: t for i, t in self._used_written.items() if t >= cutoff}
