"""Requests that went out on a pooled connection its peer had already closed.

A server or proxy may close a kept-alive connection at any moment; tinyproxy closes every one
after its answer without saying so (no ``Connection: close``). Under load, aiohttp hands such a
connection to the next request before it has seen the close, and the request fails unread:
its write fails ("Can not write request body"), or the connection ends with no byte of an
answer ("Server disconnected", a reset). Through tinyproxy that was a fifth of all requests.

aiohttp sends an idempotent request again once by itself, never a POST. Browsers send any
request again, once, when a *reused* connection ended before any byte of its answer: the peer
closed it before reading (an idle close crossing the request), since a peer that read the request
answers it. The HTTP client does the same, charging nobody: not the proxy, not the session, not
the host's pacing.

:class:`Sending` records, per attempt, whether its connection came from the pool (aiohttp tells
its trace hooks) and whether an answer began; :func:`stale` judges an error with it. Only
sessions through a proxy carry the hooks (a few microseconds a request); without them a request
is judged by a failed write alone.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp

__all__ = ["Sending", "stale", "trace_reuse"]


class Sending:
    """One attempt's connection, as aiohttp's trace hooks and the client saw it."""

    __slots__ = ("answered", "reused")

    def __init__(self) -> None:
        self.reused = False
        """Sent on a connection from the pool (the last one aiohttp took for it)."""
        self.answered = False
        """An answer's status line and headers arrived: the peer read the request."""


def stale(error: BaseException, sending: Sending) -> bool:
    """Whether ``error`` means the request was read by nobody: its write failed, or the pooled
    connection it went out on ended before any answer."""
    if isinstance(error, aiohttp.ClientOSError) and "Can not write request body" in str(error):
        return True
    if sending.answered or not sending.reused:
        return False
    return isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)


async def _reused(_: aiohttp.ClientSession, context: SimpleNamespace, __: Any) -> None:
    if isinstance(sending := context.trace_request_ctx, Sending):
        sending.reused = True


async def _created(_: aiohttp.ClientSession, context: SimpleNamespace, __: Any) -> None:
    if isinstance(sending := context.trace_request_ctx, Sending):
        sending.reused = False  # aiohttp's own second try, on a new connection


def trace_reuse() -> aiohttp.TraceConfig:
    """Trace hooks that fill the :class:`Sending` given as a request's ``trace_request_ctx``."""
    config = aiohttp.TraceConfig()
    config.on_connection_reuseconn.append(_reused)
    config.on_connection_create_end.append(_created)
    return config
