"""``scrapeflow demo``: the product on the embedded default, with nothing to set up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scrapeflow.cli._common import err, out, settings

__all__ = ["demo"]


def demo(
    ctx: typer.Context,
    pages: Annotated[
        int, typer.Option(min=1, max=100_000, help="Pages of the sandbox site to scrape.")
    ] = 300,
    dir: Annotated[
        Path | None, typer.Option("--dir", help="Keep the status files here (default: temp).")
    ] = None,
) -> None:
    """Start the sandbox on loopback and scrape it, then refresh demo bank customers, with live
    progress and a summary; exits by itself."""
    from scrapeflow.cli._demo import run_demo

    settings(ctx)  # the log level
    code = run_demo(pages=pages, directory=dir, out=out, err=err)
    raise typer.Exit(code)
