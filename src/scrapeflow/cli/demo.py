"""``scrapeflow demo``: the product on the embedded default, with nothing to set up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scrapeflow.cli._common import err, fail, input_errors, out, settings

__all__ = ["demo"]


def demo(
    ctx: typer.Context,
    pages: Annotated[
        int, typer.Option(min=1, max=100_000, help="Pages of the sandbox site to scrape.")
    ] = 300,
    dir: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Keep the status files, the bank database and the launch logs here "
            "(default: temp).",
        ),
    ] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve", help="After the run, keep the sandbox and the service up until Ctrl-C."
        ),
    ] = False,
    port: Annotated[
        int,
        typer.Option(
            min=0, max=65_535, help="The service's port on 127.0.0.1; 0 picks a free one."
        ),
    ] = 0,
) -> None:
    """Start the sandbox on loopback and scrape it, then start the service and refresh demo bank
    customers through its API, with live progress and a summary; exits by itself (with
    --serve: after Ctrl-C or SIGTERM, printing the dashboard's URL and an admin key first)."""
    from scrapeflow.cli._demo import run_demo
    from scrapeflow.cli._demoservice import listen

    settings(ctx)  # the log level
    if dir is not None:
        _check_directory(dir)
    with input_errors():
        listener = listen(port)  # before the sandbox starts: a taken port is refused at once
    code = run_demo(pages=pages, directory=dir, listener=listener, serve=serve, out=out, err=err)
    raise typer.Exit(code)


def _check_directory(directory: Path) -> None:
    """Refuse, before the sandbox starts, a --dir that cannot hold the status files."""
    import os

    if directory.exists() and not directory.is_dir():
        fail(f"--dir {directory}: not a directory")
    parent = next((p for p in (directory, *directory.parents) if p.exists()), Path("."))
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"--dir {directory}: {parent} is not a writable directory")
