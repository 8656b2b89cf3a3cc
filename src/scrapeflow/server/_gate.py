"""The service's front door: what is decided about a request before the framework sees it.

* **Event streams** a key may not open are refused here, in front of FastAPI and every
  middleware. A flood of streams by one key is answered by the process honest clients share.
  Each request of it would otherwise go through FastAPI, Starlette's error middleware, the
  access log and the authentication layer, every layer a coroutine and a wrapped ``send``, to
  be refused at the end; here a refusal is the key's verification (a SHA-256 and a dict
  lookup), the cap's check, the hold of a key that keeps asking
  (:meth:`~scrapeflow.server._fairuse.StreamSlots.refused`), and the answer, logged and counted
  as the access log does. A stream that may open is let through with its key remembered (the
  routes' dependency takes it instead of looking again).
* **Every other ``/v1`` request with a valid key** takes its turn in its key's share of the
  process's time (:class:`~scrapeflow.server._timeshare.TimeShare`): a key whose clients ask
  without pause waits while other keys' requests are served, instead of taking the process
  from them. Its key is remembered too. A request without a valid key goes on untouched: the
  app answers it (401, 404, 422 in the order the docs show) and counts the failed attempt.

Anything unusual (a failure of the key's look-up other than the database being away) goes on
to the app, whose own layers answer it as they answer any request.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from scrapeflow.db import connection_lost
from scrapeflow.server._accesslog import log_request
from scrapeflow.server._auth import (
    answer_problem,
    authenticate_scope,
    bearer_token,
    has_route,
    remember,
    remember_unknown,
)
from scrapeflow.server._metrics import UNMATCHED
from scrapeflow.server._problems import Problem, database_away

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from scrapeflow.server._state import ServiceState

__all__ = ["FrontGate"]

_STREAMS = (
    (re.compile(r"/v1/customers/[^/]+/events"), "/v1/customers/{customer}/events"),
    (re.compile(r"/v1/jobs/[^/]+/events"), "/v1/jobs/{job_id}/events"),
)
"""The event streams' paths, and their route templates (as the access log names them)."""


class FrontGate:
    """ASGI middleware, outermost: event streams refused before the app when their key holds
    its cap (or the service its own), or has no valid key; other ``/v1`` requests of a valid
    key let in at their key's turn."""

    def __init__(self, app: ASGIApp, *, owner: Starlette) -> None:
        self.app = app
        self.owner = owner
        """The application: its state holds the service (set once its lifespan started)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        route = _stream_route(scope)
        if route is None:
            await self._take_turn(scope, receive, send)
            return
        started = time.perf_counter()
        service = self.owner.state.service
        try:
            key = await authenticate_scope(service, scope)
        except Problem as problem:
            await self._refuse(scope, send, problem, route, started)
            return
        except Exception as exc:
            if not connection_lost(exc):
                await self.app(scope, receive, send)  # answered by the app's own layers
                return
            await self._refuse(scope, send, database_away(), route, started)
            return
        remember(scope, key)
        refusal = service.streams.refusal(key.id)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        await service.streams.refused(key.id)  # held when the key keeps asking
        await self._refuse(scope, send, refusal, route, started)

    async def _take_turn(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request other than a stream: in at its key's turn, if it has a valid key."""
        started = time.perf_counter()
        service: ServiceState = self.owner.state.service
        token = bearer_token(scope)
        if not token or not has_route(scope):
            # No key, or no route to serve it (404, 405): the app answers as it answers any
            # client. A token is looked up only for a request a route would serve, where a
            # bad one is counted as a failed attempt.
            await self.app(scope, receive, send)
            return
        try:
            key = await service.keys.authenticate(token)
        except Exception:  # the app looks again, and answers as it answers any failure
            await self.app(scope, receive, send)
            return
        if key is None:
            remember_unknown(scope)  # the app's layers answer it without looking again
            await self.app(scope, receive, send)
            return
        remember(scope, key)
        try:
            permit = await service.time_share.admit(key.id)
        except Problem as problem:
            await self._refuse(scope, send, problem, _route_of(scope), started)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            service.time_share.done(permit)

    async def _refuse(
        self, scope: Scope, send: Send, problem: Problem, route: str, started: float
    ) -> None:
        status = problem.status
        try:
            await answer_problem(send, problem)
        finally:
            log_request(
                self.owner.state.metrics, scope, route, status, time.perf_counter() - started
            )


def _stream_route(scope: Scope) -> str | None:
    """The template of the event stream ``scope`` asks for, or None for any other request."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return None
    path: str = scope["path"]
    if not path.endswith("/events"):
        return None
    for pattern, template in _STREAMS:
        if pattern.fullmatch(path):
            return template
    return None


def _route_of(scope: Scope) -> str:
    """The template of the route that takes ``scope`` (for the access log), else
    :data:`UNMATCHED` as the access log names it."""
    for route in scope["app"].router.routes:
        if route.matches(scope)[0] is Match.FULL:
            return str(getattr(route, "path", UNMATCHED))
    return UNMATCHED
