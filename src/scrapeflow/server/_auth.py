"""Who is calling: the API key of a request, found before anything else of it is read.

FastAPI reads and parses a request's body before it runs a route's dependencies, so a client
without a key would learn, from a 422, how its body was judged, and make the service parse it.
:class:`Authenticate` therefore checks the key of every ``/v1`` request that may carry a body
(POST, PUT, PATCH, DELETE) before the route is reached, answers 401 or 429 at once,
and leaves the key in the request's state, where the routes' dependency
(:func:`scrapeflow.server._deps.caller_with`) takes it instead of looking again. In front of
the whole app (:mod:`scrapeflow.server._gate`), event streams are authenticated and refused
past their key's cap, and every other ``/v1`` request's key is looked up for its turn in its
key's share of time: a valid key is remembered there; a request without one goes on to this
layer and the routes' dependency, which answer it and count the failure.

Failed attempts are counted per client address (:class:`scrapeflow.server._state.AuthFailures`);
past the bound, further *failed* attempts get 429, while a valid key from the same address is
always let through. While failures come fast from everywhere (more than
:data:`~scrapeflow.server._state.BUSY_FAILURES` in the last second: guessing from many
addresses), each failed attempt's answer is held one to two :data:`FAILED_HOLD` seconds: a guesser's
connections wait, a valid key never does.
"""

from __future__ import annotations

import json
import random

from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from scrapeflow.db import connection_lost
from scrapeflow.server._keys import ApiKey
from scrapeflow.server._problems import PROBLEM_JSON, Problem, database_away
from scrapeflow.server._state import ServiceState

__all__ = [
    "FAILED_HOLD",
    "Authenticate",
    "answer_problem",
    "authenticate",
    "authenticate_scope",
    "bearer_token",
    "has_route",
    "looked_up_unknown",
    "remember_unknown",
]

FAILED_HOLD = 1.0
"""Seconds a failed attempt's answer is held while failures come fast from everywhere."""

_STATE_KEY = "api_key"
_UNKNOWN_KEY = "api_key_unknown"
_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods whose requests may carry a body a route reads (any other method is answered by
the routes' dependency, or 405 by the router)."""


async def authenticate(
    state: ServiceState, authorization: str, address: str, *, unknown: bool = False
) -> ApiKey:
    """The caller's key; :class:`Problem` 401 without a valid one, 429 when the address has
    failed too often (only ever for a request whose key fails). ``unknown``: the token was
    looked up for this request already, and is no key's."""
    scheme, _, token = authorization.partition(" ")
    key = None
    if not unknown and scheme.lower() == "bearer" and token.strip():
        key = await state.keys.authenticate(token.strip())
    if key is not None:
        return key
    wait = state.failures.retry_after(address)
    state.failures.failed(address)
    if state.failures.busy():  # spread: held answers given at once come back at once
        await state.streams.tarpit.hold(FAILED_HOLD * (1 + random.random()))
    if wait:
        raise Problem(
            429,
            "too-many-failed-attempts",
            "too many requests with a bad key from this address; wait and retry",
            headers={"Retry-After": str(int(wait) + 1)},
        )
    raise Problem(
        401,
        "unauthenticated",
        "a valid API key is needed: Authorization: Bearer sf_…",
        headers={"WWW-Authenticate": 'Bearer realm="scrapeflow"'},
    )


async def authenticate_scope(state: ServiceState, scope: Scope) -> ApiKey:
    """:func:`authenticate` the ``Authorization`` header of an ASGI request."""
    return await authenticate(
        state, _authorization(scope), client_address(scope), unknown=looked_up_unknown(scope)
    )


def bearer_token(scope: Scope) -> str:
    """The token of an ASGI request's ``Authorization: Bearer`` header, or ``""``."""
    scheme, _, token = _authorization(scope).partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _authorization(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return str(value.decode("latin-1"))
    return ""


def client_address(scope: Scope) -> str:
    """The client's address as uvicorn gives it (a proxy's header only when trusted)."""
    client = scope.get("client")
    return str(client[0]) if client else "?"


def known_key(scope: Scope) -> ApiKey | None:
    """The key :class:`Authenticate` found for this request, if it looked."""
    key = scope.get("state", {}).get(_STATE_KEY)
    return key if isinstance(key, ApiKey) else None


def remember_unknown(scope: Scope) -> None:
    """Note that the request's token was looked up and is no key's (not to look again)."""
    scope.setdefault("state", {})[_UNKNOWN_KEY] = True


def looked_up_unknown(scope: Scope) -> bool:
    """Whether :func:`remember_unknown` noted the request's token."""
    return bool(scope.get("state", {}).get(_UNKNOWN_KEY))


def remember(scope: Scope, key: ApiKey) -> None:
    """Keep the request's key: for the dependency, and its id for the access log."""
    state = scope.setdefault("state", {})
    state[_STATE_KEY] = key
    state["api_key_id"] = key.id  # the id, never the token


class Authenticate:
    """ASGI middleware: authenticate ``/v1`` requests that may carry a body before reading it
    (event streams are authenticated in front of the app, by
    :class:`scrapeflow.server._gate.FrontGate`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in _WITH_BODY
            or not scope["path"].startswith("/v1/")
            or known_key(scope) is not None  # found by the front gate (its route matched)
            or not has_route(scope)
        ):
            await self.app(scope, receive, send)
            return
        try:
            key = await authenticate_scope(scope["app"].state.service, scope)
        except Problem as problem:
            await answer_problem(send, problem)
            return
        except Exception as exc:
            # Outside the app's error handlers: the database away is told as they tell it.
            if not connection_lost(exc):
                raise
            await answer_problem(send, database_away())
            return
        remember(scope, key)
        await self.app(scope, receive, send)


def has_route(scope: Scope) -> bool:
    """Whether a route takes this method at this path: if none does, the router answers (404,
    405) as for any client, and nothing is read."""
    return any(route.matches(scope)[0] is Match.FULL for route in scope["app"].router.routes)


async def answer_problem(send: Send, problem: Problem) -> None:
    """Send ``problem`` as problem+json, straight to the ASGI server."""
    body = json.dumps(
        {
            "type": problem.type,
            "title": problem.type.replace("-", " "),
            "status": problem.status,
            "detail": problem.detail,
        },
        separators=(",", ":"),
    ).encode()
    headers = [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in problem.headers.items()]
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
