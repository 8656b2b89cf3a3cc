"""The wire: one request sent on an aiohttp session and its whole answer read, capped.

What crossed the wire is an :class:`Exchange` (the request as sent, the redirects on the way,
the answer): what the client's observers see (``HttpClient.observers``: a recorder, a
request log). A client may be given another :data:`Wire` than :func:`exchange` (a recording
played back): the retries, slots and sessions around it stay the same.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

import aiohttp
import yarl

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.errors import FetchError
from scrapeflow.http._outcome import proxy_refused_login, without_credentials
from scrapeflow.http._proxypool import proxy_label
from scrapeflow.http._response import Response
from scrapeflow.http._stale import Sending

__all__ = ["Exchange", "Hop", "Observer", "Wire", "exchange", "request_body", "requested_url"]

_log = get_logger("scrapeflow.http._client")  # the client's log, as before the split
_debugging = logging.getLogger("scrapeflow.http._client").isEnabledFor
_READ_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class Hop:
    """A redirect answered on the way to a request's final answer."""

    status: int
    url: str
    """The URL that answered with the redirect."""
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request as it was sent and what came back: the redirects followed, the answer."""

    method: str
    url: str
    """The URL asked for, query parameters given apart (``params=``) included."""
    request_headers: tuple[tuple[str, str], ...]
    """The headers sent with the first request (cookies and identity included)."""
    request_body: bytes | None
    redirects: tuple[Hop, ...]
    response: Response
    started_at: float
    """When it was sent (``time.time()``)."""


Observer = Callable[[Exchange], None]
"""Told of every exchange of a client, as its answer is read (before it is judged)."""


class Wire(Protocol):
    """What sends a request and reads its answer: :func:`exchange` on the network, or another
    (a recording played back) given the same arguments."""

    def __call__(
        self,
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
    ) -> Awaitable[Exchange]: ...


def requested_url(url: yarl.URL, kwargs: Mapping[str, Any]) -> yarl.URL:
    """``url`` with the ``params=`` a request was given, as aiohttp sends it."""
    params = kwargs.get("params")
    if not params:
        return url
    return url.extend_query(params)


def request_body(kwargs: Mapping[str, Any]) -> bytes | None:
    """The body a request's ``data=`` or ``json=`` makes, as aiohttp encodes it (a form as
    ``application/x-www-form-urlencoded``, JSON by :func:`json.dumps`); None without one."""
    if kwargs.get("json") is not None:
        return json.dumps(kwargs["json"]).encode()
    data = kwargs.get("data")
    if data is None:
        return None
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, Mapping):
        return urlencode(list(data.items()), doseq=True).encode()
    if isinstance(data, list | tuple):
        return urlencode(list(data), doseq=True).encode()
    if isinstance(data, aiohttp.FormData) and not data.is_multipart:
        # A FormData encodes once (a second call raises): its fields are read instead, which
        # aiohttp keeps as (options with the name, headers, value).
        fields = [(str(options["name"]), value) for options, _, value in data._fields]
        return urlencode(fields).encode()
    return repr(data).encode()  # a stream or a multipart form: named, not replayable


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
) -> Exchange:
    """One request and its whole answer, read within ``max_body_bytes`` (a larger body is a
    :class:`FetchError` before it is all in memory); logged at DEBUG with secrets masked; a
    proxy's refusal of our login raised as the proxy's failure, not the site's answer."""
    sent_at = time.time()
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
        response = Response(
            method=method,
            url=str(r.url),
            status=r.status,
            headers=r.headers,
            body=body,
            elapsed=time.monotonic() - started,
            attempts=attempt,
            proxy=proxy_label(proxy),
        )
        first = r.history[0].request_info if r.history else r.request_info
        return Exchange(
            method=method,
            url=str(requested_url(url, kwargs)),
            request_headers=tuple(first.headers.items()),
            request_body=request_body(kwargs),
            redirects=tuple(
                Hop(status=h.status, url=str(h.url), headers=tuple(h.headers.items()))
                for h in r.history
            ),
            response=response,
            started_at=sent_at,
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
