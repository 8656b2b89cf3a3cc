"""``scrapeflow serve``: the web API (FastAPI on uvicorn); ``scrapeflow keys``: its API keys."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from scrapeflow.cli._common import HELP_OPTION, fail, input_errors, out, run_async, settings

if TYPE_CHECKING:
    import asyncio
    import socket

    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import AsyncEngine

    from scrapeflow.config import Settings

T = TypeVar("T")

__all__ = ["create", "keys", "list_", "revoke", "rotate", "serve"]

keys = typer.Typer(
    help="API keys of the service: created once, shown once, stored hashed.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings=HELP_OPTION,
)


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (SCRAPEFLOW_API_HOST).", show_default="127.0.0.1"),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(help="Port; 0 picks a free one (SCRAPEFLOW_API_PORT).", show_default="8000"),
    ] = None,
    processes: Annotated[
        int | None,
        typer.Option(
            help="Processes serving the API over the same database and job queue "
            "(SCRAPEFLOW_API_PROCESSES); 0: one per core.",
            show_default="0",
        ),
    ] = None,
) -> None:
    """Serve the API until SIGTERM or Ctrl-C; print its URL once it listens.

    Running jobs get a grace period at shutdown, then go back to the queue and run again at
    the next start.
    """
    config = settings(
        ctx,
        api_host=host,
        api_port=port,
        api_processes=processes,
        flag_names={"api_host": "--host", "api_port": "--port", "api_processes": "--processes"},
    )
    from scrapeflow.server import create_app, tcp_listener
    from scrapeflow.server._processes import supervise

    with input_errors():
        app = create_app(config)
    try:
        listener = tcp_listener(config.api_host, config.api_port)
    except OSError as exc:
        fail(f"cannot listen on {config.api_host}:{config.api_port}: {exc.strerror or exc}")
    bound_host, bound_port = listener.getsockname()[:2]

    def announce() -> None:
        print(f"serving on http://{bound_host}:{bound_port}", flush=True)

    count = config.api_processes or os.cpu_count() or 1
    if count == 1:
        if not _serve_one(app, config, listener, announce):
            fail("the service did not start (see the log above)")
        return
    # Forked before any event loop or thread exists: each process starts its own.
    if supervise(lambda serving: _serve_one(app, config, listener, serving), count, announce):
        fail("the service did not start (see the log above)")


_YOUNG_COLLECTION = 10_000
"""Objects allocated (less those freed) between two young garbage collections."""


def _serve_one(
    app: FastAPI, config: Settings, listener: socket.socket, serving: Callable[[], None]
) -> bool:
    """Serve ``app`` on ``listener`` in this process until SIGTERM or Ctrl-C; ``serving`` is
    called once it serves. Whether it served."""
    import asyncio
    import gc

    import uvicorn

    from scrapeflow.server._connections import uvicorn_config

    # Young collections 14 times rarer than Python's default (700 objects): a request makes a
    # few thousand short-lived objects, and each collection promotes what is in flight (held
    # answers, open connections) towards the full collections, which walk every live object
    # with the loop stopped. Set here, for the service's own process only: an app run inside
    # another program leaves that program's collector as it was.
    gc.set_threshold(_YOUNG_COLLECTION, *gc.get_threshold()[1:])

    server = uvicorn.Server(
        uvicorn_config(
            app, config, log_level="warning", lifespan="on", timeout_graceful_shutdown=10
        )
    )

    exit_as_uvicorn_does = server.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        # uvicorn only stops taking connections here, then waits (up to its 10 s) for open
        # ones, event streams included, before the lifespan stops the job queue: the queue
        # would start jobs meanwhile and grant its own 10 s after. At the signal, streams end
        # and the queue takes no new job; running jobs get their grace from now.
        service = getattr(app.state, "service", None)
        if service is not None and running:
            running[0].call_soon_threadsafe(service.begin_shutdown)
        exit_as_uvicorn_does(sig, frame)

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    running: list[asyncio.AbstractEventLoop] = []

    async def run() -> None:
        running.append(asyncio.get_running_loop())
        startup = server.startup

        async def announce(sockets: list[socket.socket] | None = None) -> None:
            await startup(sockets=sockets)
            if server.started:
                serving()

        server.startup = announce  # type: ignore[method-assign]
        await server.serve(sockets=[listener])

    # uvicorn handles SIGTERM and Ctrl-C itself: it stops taking requests, then the lifespan
    # stops the job queue (a grace period, then running jobs go back to the queue).
    with contextlib.suppress(KeyboardInterrupt), _loop_runner() as runner:
        runner.run(run())
    return bool(server.started)


def _loop_runner() -> asyncio.Runner:
    """The service's event loop: uvloop's where it is installed (a dependency on Linux and
    macOS: about a fifth less CPU a request than asyncio's own loop), else asyncio's."""
    import asyncio

    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows, or an install without it
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def _on_database(config: Settings, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """Run ``work`` on the service's database, its keys table made when missing (keys live in a
    table of their own: no migration of the bank schema is needed, nor made)."""
    from scrapeflow.db import create_engine
    from scrapeflow.server._keys import open_keys

    async def run() -> T:
        engine = create_engine(config.db_url)
        try:
            await open_keys(engine)
            return await work(engine)
        finally:
            await engine.dispose()

    with input_errors():
        return run_async(run())


@keys.command("create")
def create(
    ctx: typer.Context,
    scope: Annotated[
        list[str], typer.Option(help="read, refresh, jobs, metrics or admin (repeat for several).")
    ],
    customer: Annotated[
        list[str] | None, typer.Option(help="Only this customer (repeat); default: all.")
    ] = None,
    name: Annotated[str, typer.Option(help="What the key is for.")] = "",
    expires: Annotated[
        str | None,
        typer.Option(help="When it stops working: a duration (30d, 12h) or an ISO time."),
    ] = None,
) -> None:
    """Create an API key. It is printed once, as the last word of the output; only its hash is
    kept."""
    config = settings(ctx)
    from scrapeflow.server import create_key
    from scrapeflow.server._keys import parse_expiry

    with input_errors():
        expires_at = parse_expiry(expires) if expires is not None else None

    async def make(engine: AsyncEngine) -> str:
        token, _ = await create_key(
            engine, scopes=scope, customers=customer or (), name=name, expires_at=expires_at
        )
        return token

    token = _on_database(config, make)
    restricted = f" for {', '.join(customer)}" if customer else ""
    until = f", expiring {expires_at:%Y-%m-%d %H:%M:%S}Z" if expires_at else ""
    out.print(
        f"API key with scopes {', '.join(sorted(set(scope)))}{restricted}{until} "
        f"(shown once, keep it): {token}",
        highlight=False,
        soft_wrap=True,
    )


@keys.command("list")
def list_(ctx: typer.Context) -> None:
    """List the keys: id, name, scopes, customers, created, last used, expiry, state (never a
    secret)."""
    config = settings(ctx)
    from rich.markup import escape
    from rich.table import Table

    from scrapeflow.server._keys import list_keys

    found = _on_database(config, list_keys)
    from rich.table import Column

    # The id is what the other commands take: never cut; the rest folds in a narrow terminal.
    table = Table(
        Column("id", no_wrap=True, min_width=12),
        *(
            Column(title, overflow="fold")
            for title in ("name", "scopes", "customers", "created", "last used", "expires", "state")
        ),
    )
    now = datetime.now(UTC)
    for info in found:
        if info.revoked:
            state = "revoked"
        elif info.expires_at is not None and info.expires_at <= now:
            state = "expired"
        elif info.previous_valid_until is not None:
            state = f"rotated (old secret until {_when(info.previous_valid_until)})"
        else:
            state = "active"
        table.add_row(
            info.id,
            escape(info.name),
            ", ".join(info.scopes),
            escape(", ".join(info.customers)) or "all",
            _when(info.created_at),
            _when(info.last_used_at) or "never",
            _when(info.expires_at) or "never",
            state,
        )
    out.print(table)


@keys.command("revoke")
def revoke(
    ctx: typer.Context, key_id: Annotated[str, typer.Argument(help="The key's id.")]
) -> None:
    """Revoke a key: within a second the service refuses it, closes its event streams and stops
    its webhooks."""
    config = settings(ctx)
    from scrapeflow.server._keys import revoke_key

    async def work(engine: AsyncEngine) -> bool:
        return await revoke_key(engine, key_id)

    if not _on_database(config, work):
        fail(f"no key {key_id!r}")
    out.print(f"key {key_id} revoked", highlight=False)


@keys.command("rotate")
def rotate(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id.")],
    overlap: Annotated[
        str, typer.Option(help="How long the old secret keeps working (1h, 30m; at most 30d).")
    ] = "0",
) -> None:
    """Give a key a new secret, printed once as the last word of the output; the old one keeps
    working for the overlap, then not."""
    config = settings(ctx)
    from scrapeflow.server._keys import parse_overlap, rotate_key

    with input_errors():
        lasting = parse_overlap(overlap)

    async def work(engine: AsyncEngine) -> str | None:
        return await rotate_key(engine, key_id, overlap=lasting)

    token = _on_database(config, work)
    if token is None:
        fail(f"no active key {key_id!r} (unknown, revoked or expired)")
    kept = f"; the old secret works until {_when(datetime.now(UTC) + lasting)}" if lasting else ""
    out.print(
        f"key {key_id} rotated{kept} (new key shown once, keep it): {token}",
        highlight=False,
        soft_wrap=True,
    )


def _when(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%dT%H:%MZ}" if moment is not None else ""
