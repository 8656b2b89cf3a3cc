"""The service's connections on uvicorn: who the client is, and how long a connection may be
held without a request.

* **Client addresses.** ``X-Forwarded-For`` is believed only from the peers in the
  ``forwarded_allow_ips`` setting (uvicorn's own default trusts 127.0.0.1, so a local attacker
  could choose its address). With the setting empty, uvicorn's proxy-header step is off and the
  peer's address is the client's, for the access log and the failed-key limiter alike. The
  ``Forwarded`` header (RFC 7239) is not read at all.
* **Idle keep-alive** (``api_keep_alive``): uvicorn closes a connection idle that long after an
  answer.
* **Header timeout** (``api_header_timeout``): uvicorn has none. A connection is given that
  long, from its opening or from its last answer, to send a whole request head; one still
  without it is closed, so a client sending headers a byte at a time (slow-loris), or opening
  connections and sending nothing, cannot hold sockets (uvicorn's keep-alive timer is armed only
  after an answer, and any byte disarms it). The body is the route's affair, bounded by
  ``api_max_body``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from scrapeflow.config import Settings

try:  # uvicorn's C parser (llhttp): about a third less CPU a request than h11's pure Python
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Protocol
except ImportError:  # pragma: no cover - httptools is a dependency; h11 where it cannot build
    _Protocol = H11Protocol  # type: ignore[assignment,misc]

__all__ = ["HeaderTimeoutProtocol", "uvicorn_config"]


class HeaderTimeoutProtocol(_Protocol):
    """uvicorn's HTTP protocol (httptools', h11's without it), closing a connection whose
    request head is not complete within ``header_timeout`` seconds of the connection's opening
    or of its last answer, and closing an idle keep-alive connection after ``keep_alive``
    seconds (a float, where uvicorn's setting is an int). Made for a service by
    :func:`protocol_for`."""

    header_timeout: float = 10.0
    keep_alive: float = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.keep_alive  # type: ignore[assignment]
        self._header_timer: asyncio.TimerHandle | None = None
        self._waiting_after: Any = None  # the request cycle answered last

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        # Armed first: the answer may unblock a pipelined request at once (a new cycle), which
        # the timer then leaves alone.
        if not self.transport.is_closing():
            self._arm_header_timer()
        super().on_response_complete()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._waiting_after = self.cycle
        self._header_timer = self.loop.call_later(self.header_timeout, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self.cycle is not self._waiting_after:
            return  # a request head came in time (the cycle is the request's)
        if self.cycle is not None and not self.cycle.response_complete:
            return  # pragma: no cover - an answer under way arms the timer again at its end
        if not self.transport.is_closing():
            self.transport.close()


def protocol_for(settings: Settings) -> type[HeaderTimeoutProtocol]:
    """The protocol class with the service's header and keep-alive timeouts."""
    return type(
        "ServiceHttpProtocol",
        (HeaderTimeoutProtocol,),
        {"header_timeout": settings.api_header_timeout, "keep_alive": settings.api_keep_alive},
    )


def uvicorn_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for the service: its protocol (header and keep-alive timeouts)
    and proxy headers from ``forwarded_allow_ips`` only; ``options`` as uvicorn takes them."""
    trusted = list(settings.forwarded_allow_ips)
    return uvicorn.Config(
        app,
        http=protocol_for(settings),
        proxy_headers=bool(trusted),
        # An empty list, never None: None makes uvicorn read FORWARDED_ALLOW_IPS or trust
        # 127.0.0.1.
        forwarded_allow_ips=trusted,
        # uvicorn's own logging setup would print its records as plain text past ours:
        # without it they reach the root logger, in the format the command chose (JSON…).
        **({"log_config": None} | options),
    )
