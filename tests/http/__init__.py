"""Tests of the HTTP layer (``scrapeflow.http``), against real servers on loopback.

The helpers here are shared by the test modules of this package:

* :class:`Recorder` wraps a small aiohttp app of a test's own and records, on the server side,
  every request it answered: when it arrived, from which peer address (a tinyproxy bound to
  127.0.0.N shows up as 127.0.0.N), with which headers, and how many were in flight at once;
* :func:`proxies` starts tinyproxy processes bound to given loopback addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import web

from tests._tinyproxy import run_tinyproxy

__all__ = ["Hit", "Recorder", "proxies", "until"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Hit:
    """One request as the server saw it."""

    method: str
    path: str
    peer: str | None
    arrived: float  # time.monotonic() in the server's process (tests run it in theirs)
    headers: dict[str, str]


@dataclass
class Recorder:
    """An aiohttp app that records every request before its handler runs.

    ``hits`` lists them in arrival order; ``in_flight`` and ``max_in_flight`` count requests
    per route name (the first path segment) being handled at once.
    """

    app: web.Application = field(default_factory=web.Application)
    hits: list[Hit] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    max_in_flight: Counter[str] = field(default_factory=Counter)
    answered: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self) -> None:
        self.app.middlewares.append(self._record)

    @web.middleware
    async def _record(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.path.strip("/").split("/")[0]
        self.hits.append(
            Hit(
                request.method,
                request.path,
                request.remote,
                time.monotonic(),
                dict(request.headers),
            )
        )
        self.in_flight[route] += 1
        self.max_in_flight[route] = max(self.max_in_flight[route], self.in_flight[route])
        try:
            return await handler(request)
        finally:
            self.in_flight[route] -= 1
            self.answered[route].append(time.monotonic())

    def route(self, path: str, handler: Handler, method: str = "*") -> None:
        self.app.router.add_route(method, path, handler)

    def at(self, path: str) -> list[Hit]:
        """The hits on ``path``, in arrival order."""
        return [hit for hit in self.hits if hit.path == path]


@contextlib.contextmanager
def proxies(*binds: str, basic_auth: tuple[str, str] | None = None) -> Iterator[list[str]]:
    """One tinyproxy per address in ``binds``; yields their URLs in the same order."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(run_tinyproxy(bind, basic_auth=basic_auth)) for bind in binds]


async def until(predicate: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Wait for ``predicate()`` to hold (polling), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.01)
