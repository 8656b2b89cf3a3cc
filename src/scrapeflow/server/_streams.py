"""A client leaving an event stream is not a server error.

When a client disconnects from a server-sent-events route, FastAPI closes the stream's
receiving end before it cancels the task that inserts keep-alive comments; if that task is
handing over an event at that moment, anyio raises ``BrokenResourceError`` inside FastAPI's task
group, and uvicorn logs the ``ExceptionGroup`` as "Exception in ASGI application", with its
traceback, for a normal disconnect (a known FastAPI issue, discussion 15725). This middleware,
innermost, drops exactly that: an exception group made only of anyio's "the other end is
closed" errors, raised after the answer started. Anything else goes on as it was.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["StreamDisconnects"]

_PEER_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError)


class StreamDisconnects:
    """ASGI middleware: a client that left a stream ends the request quietly (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except BaseExceptionGroup as group:
            _, rest = group.split(_PEER_GONE)
            if not started or rest is not None:
                raise
