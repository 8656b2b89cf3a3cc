"""``scrapeflow status``: per executor, how many tasks have each status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from scrapeflow.cli._common import err, fail, input_errors, out, settings

__all__ = ["status"]


def status(
    ctx: typer.Context,
    dir: Annotated[Path, typer.Argument(help="Directory of status files.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Per executor, how many tasks have each status."""
    from scrapeflow.cli._display import summary_table
    from scrapeflow.status import summarize

    settings(ctx)  # the log level
    if not dir.is_dir():
        fail(f"{dir}: not a directory" if dir.exists() else f"{dir}: no such directory")
    skipped: list[Path] = []
    # A status "file" that is a directory, a FIFO or a device is refused (exit 2), never read.
    with input_errors():
        summary = summarize(dir, on_skip=lambda path, problem: skipped.append(path))
    foreign = (
        f"{len(skipped):,} file(s) that are not scrapeflow statuses (first: {skipped[0].name})"
        if skipped
        else ""
    )
    if not summary:
        fail(f"{dir}: no status files" + (f"; skipped {foreign}" if foreign else ""))
    if foreign:
        err.print(Text(f"note: skipped {foreign}"))
    if as_json:
        out.print_json(json.dumps({name: dict(c) for name, c in summary.items()}))
    else:
        out.print(summary_table(summary, title=escape(f"status of {dir}")))
