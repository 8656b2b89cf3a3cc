"""Dependencies: the service's state, and the caller's key with its scopes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._state import ServiceState

__all__ = ["Caller", "State", "caller_with", "check_customer", "service"]


def service(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


State = Annotated[ServiceState, Depends(service)]


def caller_with(scope: Scope) -> Callable[[Request], Awaitable[ApiKey]]:
    """A dependency: the caller's key, which must allow ``scope`` (401 without a valid key,
    403 with a valid key that lacks the scope, 429 after repeated failures)."""

    async def caller(request: Request) -> ApiKey:
        state = service(request)
        address = request.client.host if request.client else "?"
        wait = state.failures.retry_after(address)
        if wait:
            raise Problem(
                429,
                "too-many-failed-attempts",
                "too many requests with a bad key from this address; wait and retry",
                headers={"Retry-After": str(int(wait) + 1)},
            )
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        key = None
        if scheme.lower() == "bearer" and token.strip():
            key = await state.keys.authenticate(token.strip())
        if key is not None:
            request.state.api_key_id = key.id  # for the access log: the id, never the token
        if key is None:
            state.failures.failed(address)
            raise Problem(
                401,
                "unauthenticated",
                "a valid API key is needed: Authorization: Bearer sf_…",
                headers={"WWW-Authenticate": 'Bearer realm="scrapeflow"'},
            )
        if not key.allows(scope):
            raise Problem(403, "forbidden", f"this key lacks the {scope.value!r} scope")
        return key

    return caller


Caller = ApiKey


def check_customer(key: ApiKey, customer: str) -> None:
    """403 when the key is restricted to other customers."""
    if not key.sees(customer):
        raise Problem(403, "forbidden", f"this key may not touch customer {customer!r}")
