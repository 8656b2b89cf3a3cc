"""``scrapeflow run``: a URL list through the engine, one status file per URL."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from scrapeflow._util.interrupts import terminate
from scrapeflow.cli._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    err,
    input_errors,
    out,
    settings,
)

__all__ = ["run"]


def run(
    ctx: typer.Context,
    urls_file: Annotated[Path, typer.Argument(help="URL list: one http(s) URL per line.")],
    dir: Annotated[Path, typer.Option("--dir", help="Directory of the status files.")],
    parallelism: Annotated[
        int | None,
        typer.Option(help="Concurrent tasks (at most 10,000).", show_default="100"),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds per task.", show_default="30")
    ] = None,
    force: Annotated[
        list[str] | None, typer.Option(help="Rerun this executor even if it succeeded ('all').")
    ] = None,
    proxies: Annotated[
        Path | None,
        typer.Option(help="Proxy list: one http(s)://[user:pass@]host:port a line."),
    ] = None,
    per_host: Annotated[
        int | None,
        typer.Option(help="Concurrent requests per host (and per proxy exit).", show_default="16"),
    ] = None,
    delay: Annotated[
        float | None,
        typer.Option(help="Minimum seconds between requests to a host.", show_default="0"),
    ] = None,
    retries: Annotated[
        int | None,
        typer.Option(help="Retries per request (5xx, 429, timeouts, drops).", show_default="3"),
    ] = None,
    rotate_after: Annotated[
        int | None,
        typer.Option(
            help="Consecutive failures through a proxy before changing it.", show_default="3"
        ),
    ] = None,
    identity: Annotated[
        str | None,
        typer.Option(
            help="'browser': coherent browser headers per session; 'none'.",
            show_default="browser",
        ),
    ] = None,
) -> None:
    """Scrape every URL of URLS_FILE into DIR (one <md5(url)>.status.json and .scrape each).

    A second run skips what succeeded, so an interrupted run resumes where it stopped.
    """
    # SIGTERM stops it like Ctrl-C (exit 130) from the start, while the inputs are checked too;
    # during the run itself the engine's loop turns it into a clean cancel.
    signal.signal(signal.SIGTERM, terminate)
    config = settings(
        ctx,
        parallelism=parallelism,
        timeout=timeout,
        proxies=proxies,
        per_host=per_host,
        delay=delay,
        retries=retries,
        rotate_after=rotate_after,
        identity=identity,
    )
    from scrapeflow.cli._display import http_table, scrape_with_display
    from scrapeflow.http import HttpConfig
    from scrapeflow.proxies import ProxyProviderFromList
    from scrapeflow.status import check_task_set
    from scrapeflow.urllist import UrlList

    with input_errors():
        urls = UrlList.open(urls_file)
        provider = ProxyProviderFromList.from_file(config.proxies) if config.proxies else None
        http = HttpConfig.from_settings(
            config, max_connections=config.parallelism, timeout=config.timeout
        )
        check_task_set(dir, urls.tasks(), executors=["scrape"], force=force)
    if urls.duplicates:
        err.print(f"note: {urls.duplicates:,} duplicate URL line(s) count once")
    try:
        with input_errors():
            progress = scrape_with_display(
                urls.tasks(),
                dir,
                total=urls.count,
                console=err,
                parallelism=config.parallelism,
                timeout=config.timeout,
                force=force,
                proxy_provider=provider,
                http=http,
            )
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted:[/] finished tasks are saved; run the same command to resume"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    out.print(progress.summary())
    if progress.http_stats is not None:
        out.print(http_table(progress.http_stats))
    out.print(Text(f"status files in {dir}"))
    raise typer.Exit(EXIT_FAILED if progress.failed else 0)
