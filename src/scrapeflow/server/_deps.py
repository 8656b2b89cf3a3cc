"""Dependencies: the service's state, and the caller's key with its scopes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from scrapeflow.server._auth import (
    authenticate,
    client_address,
    known_key,
    looked_up_unknown,
    remember,
)
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._state import ServiceState

__all__ = ["Caller", "State", "caller_with", "check_customer", "service"]


async def service(request: Request) -> ServiceState:
    """A dependency: the service's state (async: FastAPI runs a plain function of a
    dependency in its thread pool, a hand-off to a thread and back on every request)."""
    return _state_of(request)


def _state_of(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


State = Annotated[ServiceState, Depends(service)]


def caller_with(scope: Scope) -> Callable[[Request], Awaitable[ApiKey]]:
    """A dependency: the caller's key, which must allow ``scope`` (401 without a valid key,
    403 with a valid key that lacks the scope, 429 after repeated failures)."""

    async def caller(request: Request) -> ApiKey:
        key = known_key(request.scope)  # authenticated before its body was read
        if key is None:
            key = await authenticate(
                _state_of(request),
                request.headers.get("authorization", ""),
                client_address(request.scope),
                unknown=looked_up_unknown(request.scope),
            )
            remember(request.scope, key)
        if not key.allows(scope):
            raise Problem(403, "forbidden", f"this key lacks the {scope.value!r} scope")
        return key

    return caller


Caller = ApiKey


def check_customer(key: ApiKey, customer: str) -> None:
    """403 when the key is restricted to other customers."""
    if not key.sees(customer):
        raise Problem(403, "forbidden", f"this key may not touch customer {customer!r}")
