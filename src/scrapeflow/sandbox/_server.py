"""Serve sandbox apps on loopback: in this event loop, or in a thread of their own.

Loopback only unless asked: the sandbox's admin API hands out every customer's bank password,
and an empty host (or ``0.0.0.0``, ``::``) would bind every interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from aiohttp import web

__all__ = ["check_host", "run_in_thread", "serve", "serve_in_thread"]

T = TypeVar("T")


def check_host(host: str, *, allow_remote: bool = False) -> None:
    """Raise ``ValueError`` unless ``host`` is a loopback address (``127.0.0.0/8``, ``::1``,
    ``localhost``) or ``allow_remote`` is true."""
    if allow_remote or _is_loopback(host):
        return
    shown = "''" if not host else repr(host)
    raise ValueError(
        f"host {shown} is not a loopback address (127.0.0.0/8, ::1 or localhost): the sandbox "
        "would serve its admin API and its customers' bank passwords beyond this machine; "
        "give --allow-remote (allow_remote=True) to do that on purpose"
    )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:  # "" (every interface) or a name: it may resolve anywhere
        return False


@contextlib.asynccontextmanager
async def serve(
    app: web.Application, host: str = "127.0.0.1", port: int = 0, *, allow_remote: bool = False
) -> AsyncIterator[str]:
    """Serve ``app`` in the running event loop; yields its base URL (``http://host:port``).

    ``host`` must be a loopback address unless ``allow_remote`` (``ValueError`` otherwise).
    """
    check_host(host, allow_remote=allow_remote)
    # Half a second for requests in flight at the stop, not aiohttp's 60: a client that left a slow
    # request behind held a stopping sandbox for that request's whole length.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
        await site.start()
        # The bound socket is the only way to learn which port 0 chose.
        server = site._server
        sockets = getattr(server, "sockets", None)
        if not sockets:  # pragma: no cover - start() binds or raises
            raise RuntimeError("the sandbox server did not bind")
        bound_host, bound_port = sockets[0].getsockname()[:2]
        yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def run_in_thread(make: Callable[[], AbstractAsyncContextManager[T]]) -> Iterator[T]:
    """Enter the async context manager made by ``make`` in a daemon thread with its own loop.

    For synchronous callers and tests whose event loops come and go: the servers outlive them.
    Yields what the context manager yields; exits it when the ``with`` block ends.
    """
    ready = threading.Event()
    value: list[T] = []
    failure: list[BaseException] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        try:
            async with make() as entered:
                value.append(entered)
                ready.set()
                await stop.wait()
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    async def finish() -> None:
        # As asyncio.run ends: a request handler that aiohttp's stop cancelled is still pending
        # here; left so, it was destroyed pending later, with its socket open.
        pending = asyncio.all_tasks() - {asyncio.current_task()}
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await loop.shutdown_asyncgens()

    def run() -> None:
        loop.run_until_complete(main())
        loop.run_until_complete(finish())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not ready.wait(timeout=60):
        raise RuntimeError("the sandbox servers did not start within 60 s")
    try:
        if failure:
            raise failure[0]
        yield value[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        if not thread.is_alive():  # a loop still running cannot be closed; leave it to exit
            loop.close()


@contextlib.contextmanager
def serve_in_thread(
    make_app: Callable[[], web.Application],
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    allow_remote: bool = False,
) -> Iterator[str]:
    """Serve the app made by ``make_app`` from a daemon thread; yields its base URL."""
    check_host(host, allow_remote=allow_remote)
    with run_in_thread(lambda: serve(make_app(), host, port, allow_remote=allow_remote)) as url:
        yield url
