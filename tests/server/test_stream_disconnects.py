"""A client leaving an event stream mid-way ends the request quietly: no "Exception in ASGI
application" for a normal disconnect, while real errors still propagate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from fastapi.sse import EventSourceResponse, ServerSentEvent

from scrapeflow.server._streams import StreamDisconnects


def _stream_app(*, fail: bool = False) -> FastAPI:
    app = FastAPI()

    @app.get("/events", response_class=EventSourceResponse)
    async def events() -> AsyncIterator[ServerSentEvent]:
        for n in range(10_000):
            if fail and n == 3:
                raise ValueError("a bug in the stream")
            yield ServerSentEvent(data={"n": n})

    return app


async def _drive(app: object, *, leave_after: int) -> int:
    """Call ``app`` as a server would for GET /events, with a client that reads slowly and
    leaves after ``leave_after`` body messages. Returns the body messages sent."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/events",
        "raw_path": b"/events",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    gone = asyncio.Event()
    sent = 0

    async def receive() -> dict[str, object]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        nonlocal sent
        if message["type"] != "http.response.body" or gone.is_set():
            return  # uvicorn drops what is sent to a client that left
        sent += 1
        if sent >= leave_after:
            gone.set()  # the client leaves: receive() now says so
        await asyncio.sleep(0.001)  # a slow reader: the producer runs ahead

    await app(scope, receive, send)  # type: ignore[operator]
    return sent


async def test_a_client_leaving_a_stream_is_no_error() -> None:
    # Without the middleware, each of these raises ExceptionGroup[BrokenResourceError] (20 of 20
    # when measured): FastAPI closes the stream's reader before it stops its keep-alive task.
    for _ in range(20):
        assert await _drive(StreamDisconnects(_stream_app()), leave_after=5) >= 5


async def test_an_error_in_a_stream_still_propagates() -> None:
    with pytest.raises(ExceptionGroup) as raised:  # FastAPI's task group carries it
        await _drive(StreamDisconnects(_stream_app(fail=True)), leave_after=10_000)
    assert raised.group_contains(ValueError, match="a bug in the stream")
