"""``/v1/keys``: API keys, for an ``admin`` key over every customer only (a restricted admin key
is confined to its customers, and keys reach across them).

A key's secret is shown once, when it is made or rotated; a listing never shows it, nor its
hash. A revocation reaches every process of the service within a second: new requests get 401,
the key's open event streams close, its webhooks get nothing more.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, Field

from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._keys import (
    ApiKey,
    KeyInfo,
    Scope,
    create_key,
    list_keys,
    parse_expiry,
    parse_overlap,
    revoke_key,
    rotate_key,
)
from scrapeflow.server._problems import Problem

__all__ = [
    "KeyCreated",
    "KeyIn",
    "KeyList",
    "KeyOut",
    "RotateIn",
    "key",
    "keys",
    "new_key",
    "revoke",
    "rotate",
    "router",
]

router = APIRouter(prefix="/v1/keys", tags=["keys"])

KeyId = Annotated[str, Path(pattern=r"^[0-9a-f]{12}$", description="The key's id (12 hex digits).")]


async def _key_manager(key: Annotated[ApiKey, Depends(caller_with(Scope.ADMIN))]) -> ApiKey:
    if key.restricted:
        raise Problem(
            403, "forbidden", "managing keys needs an admin key that is not restricted to customers"
        )
    return key


Manager = Annotated[ApiKey, Depends(_key_manager)]


class KeyOut(BaseModel):
    """A key as listed: never its secret, nor the secret's hash."""

    id: str
    name: str
    scopes: list[str]
    customers: list[str]
    """The customers it is restricted to; empty: all."""
    created_at: datetime
    last_used_at: datetime | None
    """Its last use, to within a minute (null: never used)."""
    expires_at: datetime | None
    revoked: bool
    revoked_at: datetime | None
    previous_valid_until: datetime | None
    """While a rotation's overlap lasts: when the old secret stops working."""


class KeyList(BaseModel):
    keys: list[KeyOut]
    """Every key, newest first."""


class KeyIn(BaseModel):
    scopes: Annotated[list[str], Field(min_length=1, max_length=5)]
    """read, refresh, jobs, metrics, admin."""
    customers: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=1000)] = []
    """Only these customers; empty: all."""
    name: Annotated[str, Field(max_length=200)] = ""
    expires: Annotated[str | None, Field(max_length=40)] = None
    """A duration from now (``30d``, ``12h``, ``90m``) or an ISO 8601 time with its offset;
    null: never."""


class KeyCreated(BaseModel):
    key: KeyOut
    token: str
    """The key to give the client (``Authorization: Bearer …``): shown this once, never again."""


class RotateIn(BaseModel):
    overlap: Annotated[str, Field(max_length=20)] = "0"
    """How long the old secret keeps working (``1h``, ``30m``, ``0``; at most 30 days)."""


def _out(info: KeyInfo) -> KeyOut:
    return KeyOut(
        id=info.id,
        name=info.name,
        scopes=info.scopes,
        customers=info.customers,
        created_at=info.created_at,
        last_used_at=info.last_used_at,
        expires_at=info.expires_at,
        revoked=info.revoked,
        revoked_at=info.revoked_at,
        previous_valid_until=info.previous_valid_until,
    )


async def _one(state: State, key_id: str) -> KeyInfo:
    found = await list_keys(state.engine, key_id=key_id)
    if not found:
        raise Problem(404, "key-not-found", f"no key {key_id!r}")
    return found[0]


@router.get("", response_model=KeyList)
async def keys(state: State, _: Manager) -> KeyList:
    """Every key: id, name, scopes, customers, created, last used, expiry, revocation."""
    return KeyList(keys=[_out(info) for info in await list_keys(state.engine)])


@router.post("", status_code=201, response_model=KeyCreated)
async def new_key(body: KeyIn, state: State, _: Manager) -> KeyCreated:
    """Make a key; its token is in this answer only."""
    expires_at = parse_expiry(body.expires) if body.expires is not None else None
    token, made = await create_key(
        state.engine,
        scopes=body.scopes,
        customers=body.customers,
        name=body.name,
        expires_at=expires_at,
    )
    return KeyCreated(key=_out(await _one(state, made.id)), token=token)


@router.get("/{key_id}", response_model=KeyOut)
async def key(key_id: KeyId, state: State, _: Manager) -> KeyOut:
    """One key, as listed."""
    return _out(await _one(state, key_id))


@router.delete("/{key_id}", status_code=204)
async def revoke(key_id: KeyId, state: State, _: Manager) -> Response:
    """Revoke the key: within a second, on every process, its requests get 401, its event
    streams close and its webhooks stop. Idempotent."""
    if not await revoke_key(state.engine, key_id):
        raise Problem(404, "key-not-found", f"no key {key_id!r}")
    state.keys.forget(key_id, revoked=True)
    return Response(status_code=204)


@router.post("/{key_id}/rotate", response_model=KeyCreated)
async def rotate(
    key_id: KeyId, state: State, _: Manager, body: RotateIn | None = None
) -> KeyCreated:
    """A new secret for the key (same id, scopes and customers), shown in this answer only; the
    old secret keeps working for ``overlap``, then not. 409 for a revoked or expired key."""
    overlap = parse_overlap((body or RotateIn()).overlap)
    await _one(state, key_id)  # 404 first
    token = await rotate_key(state.engine, key_id, overlap=overlap)
    if token is None:
        raise Problem(409, "key-not-active", f"key {key_id!r} is revoked or expired")
    state.keys.forget(key_id)
    return KeyCreated(key=_out(await _one(state, key_id)), token=token)
