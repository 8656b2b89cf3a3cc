"""The headers of a ``run`` job's requests and results: what a client may send, and what of a
site's answer it may read back.

A client names a task's request headers (``params["headers"]``); the ones that steer the
connection rather than the request — ``Host`` (another site behind the same address), the
hop-by-hop headers, the proxy headers, the forwarding headers — are refused when the job is
submitted. A task's result keeps only the response headers of :data:`SHOWN_RESPONSE_HEADERS`:
``Set-Cookie``, and whatever ``X-*`` header an internal service adds, never reach a client.

>>> check_request_headers("tasks[0].params.headers", {"Accept": "text/html"})
>>> shown_response_headers({"Content-Type": "text/html", "Set-Cookie": "s=1", "X-Secret": "k"})
{'Content-Type': 'text/html'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapeflow.errors import InputError

__all__ = [
    "REFUSED_REQUEST_HEADERS",
    "SHOWN_RESPONSE_HEADERS",
    "check_request_headers",
    "shown_output",
    "shown_response_headers",
]

REFUSED_REQUEST_HEADERS = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "expect",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "forwarded",
        "via",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
    }
)
"""Request headers a client may not set (compared case-insensitively)."""
SHOWN_RESPONSE_HEADERS = frozenset(
    {
        "age",
        "cache-control",
        "content-disposition",
        "content-encoding",
        "content-language",
        "content-length",
        "content-type",
        "date",
        "etag",
        "expires",
        "last-modified",
        "link",
        "location",
        "retry-after",
        "vary",
    }
)
"""Response headers a run job's results show (compared case-insensitively); the others are
dropped from what the API returns."""
_MAX_HEADERS = 50
_MAX_HEADER_BYTES = 8_192


def check_request_headers(where: str, headers: object) -> None:
    """Refuse (:class:`InputError`) headers that are not a small object of strings, or that
    name a header of :data:`REFUSED_REQUEST_HEADERS`, or hold a line break."""
    if headers is None:
        return
    if not isinstance(headers, Mapping) or len(headers) > _MAX_HEADERS:
        raise InputError(f"{where}: headers must be an object of at most {_MAX_HEADERS} names")
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InputError(f"{where}: header names and values must be strings")
        if not name or not all(33 <= ord(c) <= 126 and c != ":" for c in name):
            raise InputError(f"{where}: {name[:40]!r} is not a header name")
        if any(c in value for c in "\r\n\0") or len(name) + len(value) > _MAX_HEADER_BYTES:
            raise InputError(f"{where}: the value of {name!r} holds a line break or is too long")
        if name.lower() in REFUSED_REQUEST_HEADERS or name.lower().startswith("proxy-"):
            raise InputError(
                f"{where}: {name!r} steers the connection, not the request: a client may not set it"
            )


def shown_response_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """The headers of ``headers`` a client may read back (:data:`SHOWN_RESPONSE_HEADERS`)."""
    return {k: v for k, v in headers.items() if k.lower() in SHOWN_RESPONSE_HEADERS}


def shown_output(output: Any) -> Any:
    """An executor's output as a client may read it: its ``response_headers`` filtered."""
    if isinstance(output, Mapping) and isinstance(output.get("response_headers"), Mapping):
        return {**output, "response_headers": shown_response_headers(output["response_headers"])}
    return output
