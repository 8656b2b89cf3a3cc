"""Transport failures in a fixed vocabulary: what an error message may say of a peer.

aiohttp's own messages quote what the peer sent — a status line that is not HTTP, a banner
(``+INTERNAL-SERVICE v1 requirepass=…``), a reason phrase — and those messages reached fetch
records, run results and webhook delivery logs, where a client could read back what an
internal service said. Here every failure is told as one of a few fixed phrases; the peer's
bytes never pass.

>>> failure_class(TimeoutError())
'timed out'
>>> failure_class(ConnectionRefusedError(111, "Connection refused"))
'connection refused'
"""

from __future__ import annotations

import ssl

import aiohttp

from scrapeflow.errors import EgressBlocked
from scrapeflow.http._egress import egress_refusal

__all__ = ["FAILURE_CLASSES", "failure_class"]

FAILURE_CLASSES = (
    "timed out",
    "name not resolved",
    "connection refused",
    "connection reset",
    "connection failed",
    "connection closed without an answer",
    "not an HTTP answer",
    "answer cut short",
    "TLS handshake failed",
    "proxy connection failed",
    "proxy refused the login (HTTP <status>)",
    "proxy refused the request (HTTP <status>)",
    "too many redirects",
    "invalid URL",
    "blocked by egress policy",
)
"""Every phrase :func:`failure_class` gives (an egress refusal adds the address class)."""


def failure_class(error: BaseException) -> str:
    """One of :data:`FAILURE_CLASSES` for ``error`` (a refusal of the egress policy also names
    the address class: "blocked by egress policy: loopback address")."""
    refusal = egress_refusal(error)
    if refusal is not None:
        return str(refusal)
    if isinstance(error, TimeoutError):  # aiohttp's ServerTimeoutError is one too
        return "timed out"
    if isinstance(error, aiohttp.ClientHttpProxyError):  # a status, never the proxy's words
        refused = "the login" if error.status in (401, 407) else "the request"
        return f"proxy refused {refused} (HTTP {error.status})"
    if isinstance(error, aiohttp.ClientProxyConnectionError):
        return "proxy connection failed"
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        return "name not resolved"
    if isinstance(error, aiohttp.ClientSSLError | ssl.SSLError):
        return "TLS handshake failed"
    if isinstance(error, aiohttp.ClientConnectorError):
        return _os_failure(error.os_error)
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return "connection closed without an answer"
    if isinstance(error, aiohttp.TooManyRedirects):
        return "too many redirects"
    if isinstance(error, aiohttp.InvalidURL):
        return "invalid URL"
    if isinstance(error, aiohttp.ClientPayloadError):
        return "answer cut short"
    if isinstance(error, aiohttp.ClientResponseError):  # the parser refused what came back
        return "not an HTTP answer"
    if isinstance(error, aiohttp.ClientOSError):
        return _os_failure(error)
    if isinstance(error, OSError):
        return _os_failure(error)
    return "connection failed"


def _os_failure(error: OSError) -> str:
    if isinstance(error, EgressBlocked):
        return str(error)
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return "connection reset"
    if isinstance(error, TimeoutError):
        return "timed out"
    return "connection failed"
