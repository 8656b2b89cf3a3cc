"""API keys: made once, shown once, stored hashed; scopes, an optional list of customers, an
optional expiry; listed, rotated and revoked by an unrestricted admin.

A key reads ``sf_<id>_<secret>``: the id finds the stored row, the secret is checked against
its SHA-256 with a constant-time comparison. Only the hash is kept, so a leaked database gives
no usable key. Scopes: ``read`` (customers, accounts, movements, jobs), ``refresh`` (start a
refresh, give a one-time code), ``jobs`` (create and cancel fetch and run jobs), ``metrics``
(``/metrics`` and ``/v1/stats``: counts, no customer data), ``admin`` (everything, and keys).

**Tenant isolation: full confinement.** A key restricted to customers reaches only those,
whatever its scopes, ``admin`` included: it sees, creates and refreshes those customers only,
sees and deletes its own webhooks only (and their logs), gets 403 for any other customer id
before anything is looked up (so it cannot learn which ids exist), and may read nothing that
counts over every customer (metrics, the schedule, other keys). Such a key cannot have the
``metrics`` scope; a restricted ``admin`` is refused the metrics, the schedule and key
management, which need an unrestricted ``admin`` key.

**Lifecycle.** ``rotate`` gives the key a new secret (same id, scopes and customers); the old
secret keeps working for an overlap (default none, at most 30 days), then not. ``revoke`` ends
the key at once; an expiry ends it at a time chosen at creation. Either reaches every process
within a second (:class:`scrapeflow.server._keyring.KeyRing`). The last use is stored at most
once a minute per key per process.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
from collections import namedtuple
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    MetaData,
    String,
    Table,
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import QuickQuery, QuickReads, UTCDateTime, create_tables
from scrapeflow.errors import InputError

__all__ = [
    "MAX_OVERLAP",
    "ApiKey",
    "KeyInfo",
    "Scope",
    "create_key",
    "find_key",
    "keys_table",
    "list_keys",
    "open_keys",
    "parse_duration",
    "parse_expiry",
    "parse_overlap",
    "revoke_key",
    "rotate_key",
    "split_token",
]

MAX_OVERLAP = timedelta(days=30)
"""The longest an old secret may keep working after a rotation."""
_MAX_LIFETIME = timedelta(days=3650)

metadata = MetaData()
keys_table = Table(
    "scrapeflow_api_keys",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("secret_sha256", String(64), nullable=False),
    Column("name", String(200), nullable=False),
    Column("scopes", JSON, nullable=False),
    Column("customers", JSON, nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
    Column("created_at", UTCDateTime, nullable=False),
    # Added after the first release: nullable, so create_tables adds them to an old table.
    Column("expires_at", UTCDateTime, nullable=True),
    Column("last_used_at", UTCDateTime, nullable=True),
    Column("revoked_at", UTCDateTime, nullable=True),
    # The secret before the last rotation, valid until previous_until.
    Column("previous_sha256", String(64), nullable=True),
    Column("previous_until", UTCDateTime, nullable=True),
)


class Scope(enum.StrEnum):
    READ = "read"
    REFRESH = "refresh"
    JOBS = "jobs"
    METRICS = "metrics"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """Who is calling: the key's id and name, what it may do, and which customers."""

    id: str
    name: str
    scopes: frozenset[Scope]
    customers: frozenset[str]
    """External ids of the customers it may touch; empty: all."""
    valid_until: datetime | None = None
    """When the secret it was shown with stops working (expiry, or a rotation's overlap)."""
    secret_sha256: str = field(default="", repr=False, compare=False)
    """The stored hash of the secret it was shown with: a rotation that drops that secret
    ends what it opened (its event streams)."""

    def allows(self, scope: Scope) -> bool:
        """Whether the key has ``scope`` (``admin`` has every scope)."""
        return Scope.ADMIN in self.scopes or scope in self.scopes

    def sees(self, customer: str) -> bool:
        """Whether the key may touch ``customer``."""
        return not self.customers or customer in self.customers

    @property
    def restricted(self) -> bool:
        """Whether the key is confined to some customers."""
        return bool(self.customers)

    @property
    def unrestricted_admin(self) -> bool:
        """An ``admin`` key over every customer: the one that manages keys."""
        return Scope.ADMIN in self.scopes and not self.customers


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What a key listing shows: never the secret nor its hash."""

    id: str
    name: str
    scopes: list[str]
    customers: list[str]
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked: bool
    revoked_at: datetime | None
    previous_valid_until: datetime | None
    """While a rotation's overlap lasts: when the old secret stops working."""


async def open_keys(engine: AsyncEngine) -> None:
    """Create the keys table (or add the columns an older release lacked); idempotent."""
    await create_tables(engine, metadata)


_DURATION = re.compile(r"(\d{1,7})\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``30d``, ``2w`` (or a number of seconds) as a timedelta."""
    spoken = text.strip().lower()
    if spoken.isdigit() and len(spoken) <= 9:
        return timedelta(seconds=int(spoken))
    found = _DURATION.fullmatch(spoken)
    if found is None:
        raise InputError(f"{text!r} is not a duration (like 90s, 15m, 1h, 30d or 2w)")
    return timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])


def parse_expiry(text: str, *, now: datetime | None = None) -> datetime:
    """When a key made now with ``--expires text`` ends: a duration from now (``30d``, ``12h``)
    or an ISO 8601 time with its offset (``2027-01-31T00:00:00Z``); in the future, within ten
    years."""
    now = now or datetime.now(UTC)
    spoken = text.strip()
    if not spoken:
        raise InputError("an expiry is a duration (30d, 12h) or an ISO time with its offset")
    if spoken[0].isdigit() and "-" in spoken:
        try:
            when = datetime.fromisoformat(spoken)
        except ValueError:
            raise InputError(f"{text!r} is not an ISO 8601 time") from None
        if when.tzinfo is None:
            raise InputError(f"{text!r}: give the time's offset (Z or +01:00)")
        try:
            when = when.astimezone(UTC)
        except OverflowError:  # year 1 or 9999 moved past the calendar's end by its offset
            raise InputError("a key expires within ten years") from None
    else:
        lifetime = parse_duration(spoken)
        if lifetime > _MAX_LIFETIME:  # checked before the sum, which may overflow
            raise InputError("a key expires within ten years")
        when = now + lifetime
    if when <= now:
        raise InputError(f"expiry {text!r} is not in the future")
    if when - now > _MAX_LIFETIME:
        raise InputError("a key expires within ten years")
    return when


def parse_overlap(text: str) -> timedelta:
    """A rotation's overlap (``1h``, ``0``): at most :data:`MAX_OVERLAP`."""
    overlap = parse_duration(text)
    if overlap > MAX_OVERLAP:
        raise InputError("a rotation's overlap is at most 30 days")
    return overlap


async def create_key(
    engine: AsyncEngine,
    *,
    scopes: Iterable[str],
    customers: Iterable[str] = (),
    name: str = "",
    expires_at: datetime | None = None,
) -> tuple[str, ApiKey]:
    """A new key: the token (shown once, never stored) and what it allows."""
    from scrapeflow.banking import validate_customer_id

    chosen: set[Scope] = set()
    for scope in scopes:
        try:
            chosen.add(Scope(scope))
        except ValueError:
            known = ", ".join(s.value for s in Scope)
            raise InputError(f"unknown scope {scope!r} (scopes: {known})") from None
    if not chosen:
        raise InputError(
            "a key needs at least one scope (--scope read, refresh, jobs, metrics or admin)"
        )
    wanted = sorted({validate_customer_id(c) for c in customers if c.strip()})
    if len(wanted) > 1000:
        raise InputError("a key names at most 1,000 customers")
    if Scope.METRICS in chosen and wanted:
        raise InputError(
            "the metrics scope covers every customer: a key restricted to customers cannot have it"
        )
    if len(name) > 200 or not name.isprintable():
        raise InputError("a key's name is at most 200 printable characters")
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise InputError("a key's expiry must be in the future")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    await open_keys(engine)
    async with engine.begin() as connection:
        await connection.execute(
            insert(keys_table).values(
                id=key_id,
                secret_sha256=_digest(secret),
                name=name,
                scopes=sorted(s.value for s in chosen),
                customers=wanted,
                revoked=False,
                created_at=datetime.now(UTC),
                expires_at=expires_at,
            )
        )
    key = ApiKey(key_id, name, frozenset(chosen), frozenset(wanted), expires_at)
    return f"sf_{key_id}_{secret}", key


def split_token(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed token, else None."""
    prefix, _, rest = token.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != "sf" or not key_id or not secret or len(token) > 200:
        return None
    return key_id, secret


_KeyRow = namedtuple("_KeyRow", [column.name for column in keys_table.c])  # type: ignore[misc]
"""A row of the keys table, read quickly, as the engine's rows are read: by column name."""
_KEY_BY_ID = QuickQuery(select(keys_table).where(keys_table.c.id == bindparam("key_id")))


async def find_key(
    engine: AsyncEngine, token: str, *, reads: QuickReads | None = None
) -> ApiKey | None:
    """The key ``token`` is, or None (unknown id, wrong secret, revoked, expired, an old secret
    past its overlap, malformed). One query (a quick one through ``reads`` when given)."""
    parts = split_token(token)
    if parts is None:
        return None
    key_id, secret = parts
    row: Any
    if reads is not None:
        found = await reads.rows(_KEY_BY_ID, {"key_id": key_id})
        row = _KeyRow(*found[0]) if found else None
    else:
        async with engine.connect() as connection:
            row = (await connection.execute(_KEY_BY_ID.statement, {"key_id": key_id})).first()
    if row is None or row.revoked:
        return None
    now = datetime.now(UTC)
    if row.expires_at is not None and row.expires_at <= now:
        return None
    digest = _digest(secret)
    until = row.expires_at
    if not hmac.compare_digest(digest, row.secret_sha256):
        old = row.previous_sha256 or ""
        if not old or row.previous_until is None or row.previous_until <= now:
            return None
        if not hmac.compare_digest(digest, old):
            return None
        until = row.previous_until if until is None else min(until, row.previous_until)
    return ApiKey(
        row.id,
        row.name,
        frozenset(Scope(s) for s in row.scopes),
        frozenset(row.customers),
        until,
        digest,
    )


async def list_keys(engine: AsyncEngine, *, key_id: str | None = None) -> list[KeyInfo]:
    """Every key (or the one ``key_id``), newest first, without secrets."""
    k = keys_table.c
    query = select(
        k.id,
        k.name,
        k.scopes,
        k.customers,
        k.created_at,
        k.last_used_at,
        k.expires_at,
        k.revoked,
        k.revoked_at,
        k.previous_until,
    ).order_by(k.created_at.desc(), k.id)
    if key_id is not None:
        query = query.where(k.id == key_id)
    async with engine.connect() as connection:
        rows = (await connection.execute(query)).all()
    now = datetime.now(UTC)
    return [
        KeyInfo(
            id=r.id,
            name=r.name,
            scopes=list(r.scopes),
            customers=list(r.customers),
            created_at=r.created_at,
            last_used_at=r.last_used_at,
            expires_at=r.expires_at,
            revoked=bool(r.revoked),
            revoked_at=r.revoked_at,
            previous_valid_until=(
                r.previous_until
                if r.previous_until is not None and r.previous_until > now
                else None
            ),
        )
        for r in rows
    ]


async def revoke_key(engine: AsyncEngine, key_id: str) -> bool:
    """End the key now (every process within a second); False when no such key. Idempotent."""
    k = keys_table.c
    async with engine.begin() as connection:
        found = (await connection.execute(select(k.revoked).where(k.id == key_id))).first()
        if found is None:
            return False
        if not found.revoked:
            await connection.execute(
                update(keys_table)
                .where(k.id == key_id)
                .values(revoked=True, revoked_at=datetime.now(UTC))
            )
    return True


async def rotate_key(
    engine: AsyncEngine, key_id: str, *, overlap: timedelta = timedelta(0)
) -> str | None:
    """A new secret for the key (the token, shown once); the old secret keeps working for
    ``overlap``. A secret older than the old one stops at once. None when there is no such key,
    or it is revoked or expired."""
    if overlap < timedelta(0) or overlap > MAX_OVERLAP:
        raise InputError("a rotation's overlap is between 0 and 30 days")
    k = keys_table.c
    secret = secrets.token_urlsafe(32)
    now = datetime.now(UTC)
    async with engine.begin() as connection:
        row = (
            await connection.execute(
                select(k.secret_sha256, k.revoked, k.expires_at).where(k.id == key_id)
            )
        ).first()
        if row is None or row.revoked or (row.expires_at is not None and row.expires_at <= now):
            return None
        await connection.execute(
            update(keys_table)
            .where(k.id == key_id)
            .values(
                secret_sha256=_digest(secret),
                previous_sha256=row.secret_sha256 if overlap else None,
                previous_until=now + overlap if overlap else None,
            )
        )
    return f"sf_{key_id}_{secret}"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
