"""The access log: one line per request, at INFO, on the logger ``scrapeflow.server.access``.

A line holds the method (``other`` for one the API does not know), the route template
(``/v1/customers/{customer}``, never the path as sent, never its query), the status, the
duration in milliseconds, the client's address and the id of the API key that authenticated
(never the token or any header). An event stream's line comes when the stream ends. The same
answer is counted in the app's metrics.

A pure ASGI middleware: it watches the ``http.response.start`` message go by and changes nothing,
so streamed answers stream as before.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scrapeflow._util.logs import get_logger
from scrapeflow.server._metrics import UNMATCHED, ServiceMetrics, method_label

__all__ = ["AccessLog", "log_request"]

_log = get_logger("scrapeflow.server.access")
_level = logging.getLogger("scrapeflow.server.access")
"""The same logger's level, asked first (stdlib caches the answer)."""


class AccessLog:
    """ASGI middleware: log each HTTP request once it is answered, and count it in ``metrics``."""

    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless an answer starts: an error the server middleware turns into a 500
        streamed = False

        async def watched_send(message: Message) -> None:
            nonlocal status, streamed
            if message["type"] == "http.response.start":
                status = message["status"]
                streamed = any(
                    name == b"content-type" and value.startswith(b"text/event-stream")
                    for name, value in message.get("headers", ())
                )
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        finally:
            seconds = time.perf_counter() - started
            log_request(self.metrics, scope, _template(scope), status, seconds, streamed=streamed)


def log_request(
    metrics: ServiceMetrics,
    scope: Scope,
    route: str,
    status: int,
    seconds: float,
    *,
    streamed: bool = False,
) -> None:
    """Count one answered request in ``metrics`` and write its access-log line."""
    metrics.observe(scope["method"], route, status, seconds, streamed=streamed)
    if not _level.isEnabledFor(logging.INFO):
        return  # the line would be dropped: not even built
    client = scope.get("client")
    _log.info(
        "request",
        method=method_label(scope["method"]),
        route=route,
        status=status,
        duration_ms=round(seconds * 1000, 1),
        client=client[0] if client else None,
        key_id=scope.get("state", {}).get("api_key_id"),
    )


def _template(scope: Scope) -> str:
    """The path template of the route the request reached."""
    route = scope.get("route")
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    return template if isinstance(template, str) else UNMATCHED
