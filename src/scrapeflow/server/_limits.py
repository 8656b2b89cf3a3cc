"""A bound on request bodies: a declared ``Content-Length`` over the bound is refused before a
route runs, and a chunked body as soon as it passes the bound. Nothing past the bound is kept
(what is left is read and dropped, up to 64 MiB, so the client gets to read the 413), so a
client cannot make the service buffer more than ``max_body`` bytes.

A JSON body (``application/json``, ``+json``, or no content type) must be UTF-8 (RFC 8259):
it is checked as it comes, and one that is not is refused as ``malformed-body`` (Python's JSON
reader would otherwise guess UTF-16 or UTF-32 from its first bytes)."""

from __future__ import annotations

import codecs
import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scrapeflow.server._problems import NOT_UTF8, PROBLEM_JSON

__all__ = ["BodyLimit"]

_DISCARD_AT_MOST = 64 * 1024 * 1024


class BodyLimit:
    """ASGI middleware: 413 ``application/problem+json`` for a body over ``max_body`` bytes."""

    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await self._refuse(send, 400, "bad-request", "Content-Length is not a number")
                return
            if size > self.max_body:
                await self._discard(receive, more=True)
                await self._too_large(send)
                return
        seen = 0
        utf8 = codecs.getincrementaldecoder("utf-8")() if _json_body(scope) else None

        async def bounded_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                seen += len(chunk)
                more = message.get("more_body", False)
                if seen > self.max_body:  # a chunked body: the route's handler answers 413
                    await self._discard(receive, more=more)
                    raise HTTPException(413, self._detail())
                if utf8 is not None:
                    try:
                        utf8.decode(chunk, final=not more)
                    except UnicodeDecodeError:
                        await self._discard(receive, more=more)
                        raise HTTPException(422, NOT_UTF8) from None
            return message

        await self.app(scope, bounded_receive, send)

    async def _discard(self, receive: Receive, *, more: bool) -> None:
        """Read what is left of the body without keeping it, up to a bound, so the client can
        read the answer (closing on a client still sending makes it see a reset instead)."""
        left = _DISCARD_AT_MOST
        while more and left > 0:
            message = await receive()
            if message["type"] != "http.request":
                return
            left -= len(message.get("body", b""))
            more = message.get("more_body", False)

    def _detail(self) -> str:
        return f"the request body is over the service's limit of {self.max_body} bytes"

    async def _too_large(self, send: Send) -> None:
        await self._refuse(send, 413, "body-too-large", self._detail())

    @staticmethod
    async def _refuse(send: Send, status: int, type: str, detail: str) -> None:
        body = json.dumps(
            {"type": type, "title": type.replace("-", " "), "status": status, "detail": detail},
            separators=(",", ":"),  # as every other answer of the service
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _json_body(scope: Scope) -> bool:
    """Whether the request's body would be read as JSON (its content type, or none)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            kind: bytes = value.split(b";")[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return True
