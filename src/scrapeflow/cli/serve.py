"""``scrapeflow serve``: the web API (FastAPI on uvicorn); ``scrapeflow keys``: its API keys."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from scrapeflow.cli._common import HELP_OPTION, fail, input_errors, out, run_async, settings

__all__ = ["create", "keys", "serve"]

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
) -> None:
    """Serve the API until SIGTERM or Ctrl-C; print its URL once it listens.

    Running jobs get a grace period at shutdown, then go back to the queue and run again at
    the next start.
    """
    config = settings(
        ctx, api_host=host, api_port=port, flag_names={"api_host": "--host", "api_port": "--port"}
    )
    import socket

    import uvicorn

    from scrapeflow.server import create_app, tcp_listener
    from scrapeflow.server._connections import uvicorn_config

    with input_errors():
        app = create_app(config)
    try:
        listener = tcp_listener(config.api_host, config.api_port)
    except OSError as exc:
        fail(f"cannot listen on {config.api_host}:{config.api_port}: {exc.strerror or exc}")
    bound_host, bound_port = listener.getsockname()[:2]
    server = uvicorn.Server(
        uvicorn_config(
            app, config, log_level="warning", lifespan="on", timeout_graceful_shutdown=10
        )
    )

    async def run() -> None:
        startup = server.startup

        async def announce(sockets: list[socket.socket] | None = None) -> None:
            await startup(sockets=sockets)
            if server.started:
                print(f"serving on http://{bound_host}:{bound_port}", flush=True)

        server.startup = announce  # type: ignore[method-assign]
        await server.serve(sockets=[listener])

    # uvicorn handles SIGTERM and Ctrl-C itself: it stops taking requests, then the lifespan
    # stops the job queue (a grace period, then running jobs go back to the queue).
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    if not server.started:
        fail("the service did not start (see the log above)")


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
) -> None:
    """Create an API key. It is printed once, as the last word of the output; only its hash is
    kept."""
    config = settings(ctx)
    from scrapeflow.banking import migrate
    from scrapeflow.db import create_engine
    from scrapeflow.server import create_key

    async def make() -> str:
        await migrate(config.db_url)
        engine = create_engine(config.db_url)
        try:
            token, _ = await create_key(engine, scopes=scope, customers=customer or (), name=name)
            return token
        finally:
            await engine.dispose()

    with input_errors():
        token = run_async(make())
    restricted = f" for {', '.join(customer)}" if customer else ""
    out.print(
        f"API key with scopes {', '.join(sorted(set(scope)))}{restricted} "
        f"(shown once, keep it): {token}",
        highlight=False,
        soft_wrap=True,
    )
