"""API keys: made once, shown once, stored hashed; scopes and an optional list of customers.

A key reads ``sf_<id>_<secret>``: the id finds the stored row, the secret is checked against
its SHA-256 with a constant-time comparison. Only the hash is kept, so a leaked database gives
no usable key. Scopes: ``read`` (customers, accounts, movements, jobs), ``refresh`` (start a
refresh, give a one-time code), ``jobs`` (create and cancel fetch and run jobs), ``metrics``
(``/metrics`` and ``/v1/stats``: counts, no customer data), ``admin`` (everything, and keys).
A key restricted to customers sees and refreshes only those, and may read nothing that counts
over every customer (the metrics, the schedule): such a key cannot have the ``metrics`` scope,
and a restricted ``admin`` key is refused those endpoints.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import JSON, Boolean, Column, MetaData, String, Table, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from scrapeflow.db import UTCDateTime, create_tables
from scrapeflow.errors import InputError

__all__ = ["ApiKey", "Scope", "create_key", "find_key", "keys_table", "open_keys"]

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

    def allows(self, scope: Scope) -> bool:
        return Scope.ADMIN in self.scopes or scope in self.scopes

    def sees(self, customer: str) -> bool:
        return not self.customers or customer in self.customers


async def open_keys(engine: AsyncEngine) -> None:
    """Create the keys table when it is missing; idempotent."""
    await create_tables(engine, metadata)


async def create_key(
    engine: AsyncEngine,
    *,
    scopes: Iterable[str],
    customers: Iterable[str] = (),
    name: str = "",
) -> tuple[str, ApiKey]:
    """A new key: the token (shown once, never stored) and what it allows."""
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
    wanted = sorted({c.strip() for c in customers if c.strip()})
    if any(len(c) > 64 or not c.isprintable() for c in wanted):
        raise InputError("a customer id is 1-64 printable characters")
    if Scope.METRICS in chosen and wanted:
        raise InputError(
            "the metrics scope covers every customer: a key restricted to customers cannot have it"
        )
    if len(name) > 200 or not name.isprintable():
        raise InputError("a key's name is at most 200 printable characters")
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
            )
        )
    return f"sf_{key_id}_{secret}", ApiKey(key_id, name, frozenset(chosen), frozenset(wanted))


async def find_key(engine: AsyncEngine, token: str) -> ApiKey | None:
    """The key ``token`` is, or None (unknown id, wrong secret, revoked, malformed)."""
    prefix, _, rest = token.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != "sf" or not key_id or not secret or len(token) > 200:
        return None
    async with engine.connect() as connection:
        row = (
            await connection.execute(select(keys_table).where(keys_table.c.id == key_id))
        ).first()
    if row is None or row.revoked:
        return None
    if not hmac.compare_digest(_digest(secret), row.secret_sha256):
        return None
    return ApiKey(
        row.id,
        row.name,
        frozenset(Scope(s) for s in row.scopes),
        frozenset(row.customers),
    )


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
