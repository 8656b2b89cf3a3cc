"""Serve sandbox apps on loopback: in this event loop, or in a thread of their own."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator

from aiohttp import web

__all__ = ["serve", "serve_in_thread"]


@contextlib.asynccontextmanager
async def serve(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``app`` in the running event loop; yields its base URL (``http://host:port``)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
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
def serve_in_thread(
    make_app: Callable[[], web.Application], host: str = "127.0.0.1", port: int = 0
) -> Iterator[str]:
    """Serve the app made by ``make_app`` from a daemon thread with its own loop.

    For synchronous callers and tests whose event loops come and go: the server outlives them.
    """
    ready = threading.Event()
    url: list[str] = []
    failure: list[BaseException] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        try:
            async with serve(make_app(), host, port) as base_url:
                url.append(base_url)
                ready.set()
                await stop.wait()
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            raise

    thread = threading.Thread(
        target=lambda: loop.run_until_complete(main()), name="sandbox-server", daemon=True
    )
    thread.start()
    ready.wait()
    if failure:
        thread.join()
        loop.close()
        raise failure[0]
    try:
        yield url[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()
