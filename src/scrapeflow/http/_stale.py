"""Requests that went out on a pooled connection its peer had already closed.

A server or proxy may close a kept-alive connection at any moment; tinyproxy closes every one
after its answer without saying so (no ``Connection: close``). Under load, aiohttp hands such a
connection to the next request before it has seen the close, and the request fails unread:
its write fails ("Can not write request body"), or the connection ends with no byte of an
answer ("Server disconnected", a reset). Through tinyproxy that was a fifth of all requests.

aiohttp sends an idempotent request again once by itself, never a POST. The HTTP client sends
again, at once and charging nobody (not the proxy, not the session, not the host's pacing):

* a request whose write failed on a connection that was not new: the peer had closed it, so
  nobody read the request (on a new connection, the peer closing it is its failure);
* an idempotent (or ``safe``) request whose *reused* connection ended before any byte of an
  answer: most likely an idle close crossing the request. Not a POST: a peer may also read a
  request, act on it and die before answering, and a POST is sent twice only when it is known
  that nobody read it. Through a proxy a POST (not ``safe``) goes out on a new connection
  instead, which nobody closed before it was written: through tinyproxy, a POST on a reused
  connection was lost about once in a hundred.

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
        self.reused: bool | None = None
        """Sent on a connection from the pool (the last one aiohttp took for it); None: not
        known (a session without the trace hooks)."""
        self.answered = False
        """An answer's status line and headers arrived (a redirect's included): the peer read
        the request."""


def stale(error: BaseException, sending: Sending, *, idempotent: bool) -> bool:
    """Whether ``error`` says the request may be sent again as if never sent: its write failed,
    or (``idempotent``) the pooled connection it went out on ended before any answer."""
    if sending.answered or isinstance(error, aiohttp.ClientConnectorError):
        return False  # answered (perhaps a redirect's first leg), or no connection at all
    if isinstance(error, aiohttp.ClientOSError) and "Can not write request body" in str(error):
        return sending.reused is not False
    return (
        idempotent
        and sending.reused is True
        and isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)
    )


async def _reused(_: aiohttp.ClientSession, context: SimpleNamespace, __: Any) -> None:
    if isinstance(sending := context.trace_request_ctx, Sending):
        sending.reused = True


async def _creating(_: aiohttp.ClientSession, context: SimpleNamespace, __: Any) -> None:
    if isinstance(sending := context.trace_request_ctx, Sending):
        sending.reused = False  # aiohttp's own second try, or a redirect, on a new connection


async def _redirected(_: aiohttp.ClientSession, context: SimpleNamespace, __: Any) -> None:
    if isinstance(sending := context.trace_request_ctx, Sending):
        sending.answered = True


def trace_reuse() -> aiohttp.TraceConfig:
    """Trace hooks that fill the :class:`Sending` given as a request's ``trace_request_ctx``."""
    config = aiohttp.TraceConfig()
    config.on_connection_reuseconn.append(_reused)
    config.on_connection_create_start.append(_creating)
    config.on_request_redirect.append(_redirected)
    return config
