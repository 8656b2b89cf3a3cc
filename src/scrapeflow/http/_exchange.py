"""The wire: one request sent on an aiohttp session and its whole answer read, capped."""

from __future__ import annotations

import logging
import time
from typing import Any

import aiohttp
import yarl

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.errors import FetchError
from scrapeflow.http._outcome import proxy_refused_login, without_credentials
from scrapeflow.http._proxypool import proxy_label
from scrapeflow.http._response import Response
from scrapeflow.http._stale import Sending

__all__ = ["exchange"]

_log = get_logger("scrapeflow.http._client")  # the client's log, as before the split
_debugging = logging.getLogger("scrapeflow.http._client").isEnabledFor
_READ_CHUNK = 256 * 1024


async def exchange(
    http: aiohttp.ClientSession,
    method: str,
    url: yarl.URL,
    proxy: str | None,
    attempt: int,
    started: float,
    sending: Sending,
    kwargs: dict[str, Any],
    *,
    max_body_bytes: int,
) -> Response:
    """One request and its whole answer, read within ``max_body_bytes`` (a larger body is a
    :class:`FetchError` before it is all in memory); logged at DEBUG with secrets masked; a
    proxy's refusal of our login raised as the proxy's failure, not the site's answer."""
    async with http.request(method, url, proxy=proxy, trace_request_ctx=sending, **kwargs) as r:
        sending.answered = True
        limit = max_body_bytes
        if r.content_length is not None and r.content_length > limit:
            raise FetchError(
                f"body of {r.content_length} bytes is over the {limit}-byte limit",
                url=redact(str(url)),
                attempts=attempt,
            )
        if r.content_length is not None and "Content-Encoding" not in r.headers:
            # The length is declared and within the limit, and the parser reads no byte past
            # it: one read of the whole body, not a loop over chunks.
            body = await r.read()
        else:
            body = await _read_capped(r, url, attempt, limit)
        if _debugging(logging.DEBUG):  # what was sent and what came back, secrets masked
            _log.debug(
                "http.response",
                method=method,
                url=redact(str(url)),
                status=r.status,
                ms=round((time.monotonic() - started) * 1000),
                redirects=[f"{h.status} {redact(str(h.url))}" for h in r.history] or None,
                final_url=redact(str(r.url)) if r.history else None,
                bytes=len(body),
                proxy=proxy_label(proxy),
            )
        if proxy is not None and proxy_refused_login(r.status, r.headers):
            raise aiohttp.ClientHttpProxyError(
                without_credentials(r.request_info),
                (),
                status=r.status,
                message="proxy refused the login",
            )
        return Response(
            method=method,
            url=str(r.url),
            status=r.status,
            headers=r.headers,
            body=body,
            elapsed=time.monotonic() - started,
            attempts=attempt,
            proxy=proxy_label(proxy),
        )


async def _read_capped(r: aiohttp.ClientResponse, url: yarl.URL, attempt: int, limit: int) -> bytes:
    """The body of an answer of unknown (chunked) or encoded length, read chunk by chunk
    so that one over ``limit`` bytes is refused before it is all in memory."""
    chunks = []
    size = 0
    async for chunk in r.content.iter_chunked(_READ_CHUNK):
        size += len(chunk)
        if size > limit:
            raise FetchError(
                f"body over the {limit}-byte limit", url=redact(str(url)), attempts=attempt
            )
        chunks.append(chunk)
    return b"".join(chunks)
