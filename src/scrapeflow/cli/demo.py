"""``scrapeflow demo``: the product on the embedded default, with nothing to set up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scrapeflow.cli._common import err, fail, out, settings

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
    if dir is not None:
        _check_directory(dir)
    code = run_demo(pages=pages, directory=dir, out=out, err=err)
    raise typer.Exit(code)


def _check_directory(directory: Path) -> None:
    """Refuse, before the sandbox starts, a --dir that cannot hold the status files."""
    import os

    if directory.exists() and not directory.is_dir():
        fail(f"--dir {directory}: not a directory")
    parent = next((p for p in (directory, *directory.parents) if p.exists()), Path("."))
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"--dir {directory}: {parent} is not a writable directory")
