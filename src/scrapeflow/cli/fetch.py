"""``scrapeflow fetch``: a URL list into a content-addressed store, as gofetch does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from scrapeflow.cli._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    RootOptions,
    err,
    input_errors,
    out,
    settings,
)

if TYPE_CHECKING:
    from scrapeflow.fetch import FetchSettings

__all__ = ["fetch"]


def fetch(
    ctx: typer.Context,
    urls_file: Annotated[Path, typer.Argument(help="URLs: a line each, or TSV/JSONL rows.")],
    store: Annotated[
        str | None, typer.Option(help="Directory or s3://bucket/prefix (default: the bucket).")
    ] = None,
    program: Annotated[str | None, typer.Option(help="Program name in the layout.")] = None,
    fetch_id: Annotated[str | None, typer.Option(help="This fetch's id (FETCH_ID).")] = None,
    offset: Annotated[int | None, typer.Option(help="First item (FETCH_OFFSET).")] = None,
    limit: Annotated[int | None, typer.Option(help="Items to fetch (FETCH_LIMIT).")] = None,
    cpus: Annotated[
        int | None,
        typer.Option(help="Processes, at most the machine's CPUs and 1,024 (MAX_CPUS)."),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(help="Fetches in flight per process, at most 10,000 (CONCURRENT_FETCHES)."),
    ] = None,
    writers: Annotated[
        int | None,
        typer.Option(help="Store writers per process, at most 1,000 (CONCURRENT_S3WRITERS)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="A gofetch TOML settings file (AWS_CONFIG_FILE).")
    ] = None,
    warc: Annotated[bool, typer.Option(help="Also write WARC records.")] = False,
    redis_url: Annotated[str | None, typer.Option(help="Push stored items (REDIS_URL).")] = None,
) -> None:
    """Fetch a URL list into a content-addressed store (gofetch): bodies by SHA-384, indexes,
    a fetch log; the same fetch id again resumes. Settings also come from gofetch's variables."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from scrapeflow._util.logs import configure_logging
    from scrapeflow.fetch import OUTCOMES, FetchRun, FetchSettings, read_items

    flags = {
        "store": store,
        "program": program,
        "fetch_id": fetch_id,
        "offset": offset,
        "limit": limit,
        "max_cpus": cpus,
        "concurrent_fetches": concurrency,
        "concurrent_writers": writers,
        "config": config,
        "warc": warc or None,
        "redis_url": redis_url,
    }
    shared = settings(ctx)
    # Everything is checked before anything is written: the settings, every line of the list,
    # then (entering the run) Redis and the store; only then the lock, the log, the content.
    with input_errors():
        fetch_settings = FetchSettings.resolve(
            flags, file_values=shared.fetch, file_name=_config_name(ctx)
        )
        items = read_items(urls_file, offset=fetch_settings.offset, limit=fetch_settings.limit)
    configure_logging(fetch_settings.log_level)
    if fetch_settings.new_fetch_id:  # gofetch's meaning: no id, a new fetch each time
        err.print(
            Text(
                f"a new fetch, id {fetch_settings.fetch_id}: resume it with the same command "
                f"and --fetch-id {fetch_settings.fetch_id}"
            )
        )
    started = time.monotonic()
    try:
        with input_errors(), FetchRun(fetch_settings, items) as run:
            err.print(Text(_header(fetch_settings, len(items), run.skipped, run.repaired)))
            progress = Progress(
                TextColumn("[bold]fetch"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[detail]}"),
                console=err,
            )
            task = progress.add_task("fetch", total=len(items), detail="")
            next_draw = 0.0

            def show(counts: dict[str, int]) -> None:
                nonlocal next_draw
                now = time.monotonic()
                done = sum(counts.values())
                if now < next_draw and done < len(items):
                    return  # called per URL: redraw ten times a second, not twenty thousand
                next_draw = now + 0.1
                detail = "  ".join(f"{name} {counts[name]:,}" for name in OUTCOMES)
                progress.update(task, completed=done, detail=detail)

            with progress:
                report = run.fetch(on_counts=show)
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted:[/] stored items are logged; the same command with "
            f"--fetch-id {fetch_settings.fetch_id} resumes"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    seconds = time.monotonic() - started
    table = Table(title=f"fetch {fetch_settings.fetch_id}", show_header=False)
    for name, value in (
        ("URLs", report.items),
        ("stored (new content)", report.stored),
        ("stored before (same content)", report.duplicates),
        ("done in an earlier run", report.skipped),
        ("failed", report.failed),
        ("MB fetched", round(report.bytes / 1e6, 1)),
        ("pages/s", round((report.stored + report.duplicates + report.failed) / seconds)),
    ):
        table.add_row(name, f"{value:,}")
    for kind, count in sorted(report.errors.items()):
        table.add_row(Text(f"  {kind}"), f"{count:,}")
    out.print(table)
    raise typer.Exit(EXIT_FAILED if report.failed else 0)


def _config_name(ctx: typer.Context) -> str | None:
    """The scrapeflow config file in use, to name it in errors about its [fetch] table."""
    import os

    from scrapeflow.config import CONFIG_ENV

    root = ctx.find_object(RootOptions)
    path = (root.config if root is not None else None) or os.environ.get(CONFIG_ENV, "").strip()
    return str(path) if path else None


def _header(settings: FetchSettings, items: int, skipped: int, repaired: int) -> str:
    text = f"fetch id {settings.fetch_id}: {items:,} URLs into {settings.store}"
    if skipped:
        text += f" ({skipped:,} done in an earlier run"
        text += f", {repaired:,} of them completed now)" if repaired else ")"
    return text
