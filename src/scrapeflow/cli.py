"""The ``scrapeflow`` command.

Exit codes: 0 every task succeeded; 1 some tasks failed (recorded in their status files);
2 bad input (nothing stored was touched); 3 an unexpected error (finished tasks are saved);
130 interrupted (run the same command to resume).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from scrapeflow._bankcli import bank_app
from scrapeflow._console import http_table, run_async, scrape_with_display, summary_table
from scrapeflow._util.atomic import atomic_write_bytes
from scrapeflow._util.logs import configure_logging
from scrapeflow._util.redact import redact
from scrapeflow.errors import InputError, ScrapeflowError, StatusError, TaskConflict
from scrapeflow.executor import ALL
from scrapeflow.http import HostPolicy, HttpConfig, RetryPolicy
from scrapeflow.proxies import ProxyProviderFromList, validate_proxy_url
from scrapeflow.status import JsonDirStore, load_status_file, summarize
from scrapeflow.urllist import UrlList

__all__ = ["app", "main"]

EXIT_FAILED_TASKS = 1
EXIT_BAD_INPUT = 2
EXIT_UNEXPECTED = 3
EXIT_INTERRUPTED = 130


class _LogLevel(enum.StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


app = typer.Typer(
    name="scrapeflow",
    help="Fast, parallel, resumable web scraping.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(bank_app, name="bank")
out = Console()
err = Console(stderr=True)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line error and exit with ``code``."""
    # Text, not markup: file names and messages may hold "[...]".
    err.print(Text.assemble(("error: ", "bold red"), message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.callback()
def _options(
    log_level: Annotated[
        _LogLevel, typer.Option(help="Log level for scrapeflow's structured logs (stderr).")
    ] = _LogLevel.WARNING,
    log_json: Annotated[
        bool | None, typer.Option("--log-json/--log-pretty", help="Log format (default: auto).")
    ] = None,
) -> None:
    configure_logging(log_level.value, json=log_json)


@app.command("run")
def _run_command(
    urls_file: Annotated[Path, typer.Argument(help="URL list: one http(s) URL per line.")],
    dir: Annotated[Path, typer.Option("--dir", help="Directory of the status files.")],
    parallelism: Annotated[int, typer.Option(min=1, help="Concurrent tasks.")] = 100,
    timeout: Annotated[float, typer.Option(min=0.001, help="Seconds per task.")] = 30.0,
    force: Annotated[
        list[str] | None, typer.Option(help="Rerun this executor even if it succeeded ('all').")
    ] = None,
    proxies: Annotated[
        Path | None, typer.Option(help="Proxy list: one http(s)://[user:pass@]host:port a line.")
    ] = None,
    per_host: Annotated[
        int, typer.Option(min=1, help="Concurrent requests per host (and per proxy exit).")
    ] = HostPolicy().concurrency,
    delay: Annotated[
        float, typer.Option(min=0.0, help="Minimum seconds between requests to a host.")
    ] = HostPolicy().delay,
    retries: Annotated[
        int, typer.Option(min=0, help="Retries per request (5xx, 429, timeouts, drops).")
    ] = RetryPolicy().attempts - 1,
    rotate_after: Annotated[
        int, typer.Option(min=1, help="Consecutive failures through a proxy before changing it.")
    ] = HttpConfig().rotate_after,
    identity: Annotated[
        str, typer.Option(help="'browser': coherent browser headers per session; 'none'.")
    ] = "browser",
) -> None:
    """Scrape every URL of URLS_FILE into DIR (one <md5(url)>.status.json and .scrape each).

    A second run skips what succeeded, so an interrupted run resumes where it stopped.
    """
    try:
        urls = UrlList.open(urls_file)
        provider = ProxyProviderFromList(_read_proxy_file(proxies)) if proxies else None
        _check_task_set(dir, urls, force)
        http = HttpConfig(
            max_connections=parallelism,
            timeout=timeout,
            host=HostPolicy(concurrency=per_host, delay=delay),
            retry=RetryPolicy(attempts=retries + 1),
            rotate_after=rotate_after,
            identities=identity,
        )
    except ScrapeflowError as exc:
        _fail(str(exc))
    if urls.duplicates:
        err.print(f"note: {urls.duplicates:,} duplicate URL line(s) count once")
    try:
        progress = scrape_with_display(
            urls.tasks(),
            dir,
            total=urls.count,
            console=err,
            parallelism=parallelism,
            timeout=timeout,
            force=force,
            proxy_provider=provider,
            http=http,
        )
    except ScrapeflowError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted:[/] finished tasks are saved; run the same command to resume"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    out.print(progress.summary())
    if progress.http_stats is not None:
        out.print(http_table(progress.http_stats))
    out.print(Text(f"status files in {dir}"))
    raise typer.Exit(EXIT_FAILED_TASKS if progress.failed else 0)


def _read_proxy_file(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the proxy list ({exc.strerror})") from None
    proxies = []
    for lineno, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            proxies.append(validate_proxy_url(text))
        except InputError as exc:
            raise InputError(f"{path}:{lineno}: {exc}") from None
    if not proxies:
        raise InputError(f"{path}: no proxy in the file")
    return proxies


def _check_task_set(directory: Path, urls: UrlList, force: list[str] | None) -> None:
    """Everything that would stop the run halfway, found before anything is written: a
    directory that cannot hold statuses, status files of another URL list or that do not
    parse, an unknown --force name."""
    unknown = [name for name in force or [] if name not in ("scrape", ALL)]
    if unknown:
        raise InputError(
            f"--force names no executor of this run: {', '.join(unknown)} (scrape, all)"
        )
    if directory.exists() and not directory.is_dir():
        raise StatusError(f"{directory} exists and is not a directory")
    store = JsonDirStore(directory)
    asyncio.run(store.prepare())
    existing = set(store.keys())
    if not existing:
        return
    shared = 0
    for key, params in urls.tasks():
        if key not in existing:
            continue
        shared += 1
        status = load_status_file(store.path(key))  # StatusCorrupt names the file
        if status is not None and status.get("params") != params:
            raise TaskConflict(
                f"{store.path(key)} is for other params than {params['url']!r}; use another --dir"
            )
    if not shared:
        raise StatusError(
            f"{directory} holds {len(existing):,} status files of a different task set "
            "(none is for a URL of this list); use another --dir"
        )


@app.command("fetch")
def _fetch_command(
    urls_file: Annotated[Path, typer.Argument(help="URLs: a line each, or TSV/JSONL rows.")],
    store: Annotated[
        str | None, typer.Option(help="Directory or s3://bucket/prefix (default: the bucket).")
    ] = None,
    program: Annotated[str | None, typer.Option(help="Program name in the layout.")] = None,
    fetch_id: Annotated[str | None, typer.Option(help="This fetch's id (FETCH_ID).")] = None,
    offset: Annotated[int | None, typer.Option(help="First item (FETCH_OFFSET).")] = None,
    limit: Annotated[int | None, typer.Option(help="Items to fetch (FETCH_LIMIT).")] = None,
    cpus: Annotated[int | None, typer.Option(help="Processes (MAX_CPUS).")] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Fetches in flight per process (CONCURRENT_FETCHES).")
    ] = None,
    writers: Annotated[
        int | None, typer.Option(help="Store writers per process (CONCURRENT_S3WRITERS).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="TOML settings file (AWS_CONFIG_FILE).")
    ] = None,
    warc: Annotated[bool, typer.Option(help="Also write WARC records.")] = False,
    redis_url: Annotated[str | None, typer.Option(help="Push stored items (REDIS_URL).")] = None,
) -> None:
    """Fetch a URL list into a content-addressed store (gofetch): bodies by SHA-384, indexes,
    a fetch log; the same fetch id again resumes. Settings also come from gofetch's variables."""
    from scrapeflow.fetch import OUTCOMES, FetchSettings, read_items, run_fetch

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
    try:
        settings = FetchSettings.resolve(flags)
        items = read_items(urls_file, offset=settings.offset, limit=settings.limit)
    except ScrapeflowError as exc:
        _fail(str(exc))
    configure_logging(settings.log_level)
    err.print(Text(f"fetch id {settings.fetch_id}: {len(items):,} URLs into {settings.store}"))
    started = time.monotonic()
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

    try:
        with progress:
            report = run_fetch(settings, items, on_counts=show)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/] stored items are logged; the same --fetch-id resumes")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except ScrapeflowError as exc:
        _fail(str(exc))
    seconds = time.monotonic() - started
    table = Table(title=f"fetch {settings.fetch_id}", show_header=False)
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
    raise typer.Exit(EXIT_FAILED_TASKS if report.failed else 0)


@app.command("status")
def _status_command(
    dir: Annotated[Path, typer.Argument(help="Directory of status files.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Per executor, how many tasks have each status."""
    if not dir.is_dir():
        _fail(f"{dir}: no such directory")
    skipped: list[Path] = []
    try:
        summary = summarize(dir, on_skip=lambda path, problem: skipped.append(path))
    except ScrapeflowError as exc:
        _fail(str(exc))
    if skipped:
        err.print(
            Text(
                f"note: skipped {len(skipped):,} file(s) that are not scrapeflow statuses "
                f"(first: {skipped[0].name})"
            )
        )
    if not summary:
        _fail(f"{dir}: no status files")
    if as_json:
        out.print_json(json.dumps({name: dict(c) for name, c in summary.items()}))
    else:
        out.print(summary_table(summary, title=escape(f"status of {dir}")))


@app.command("demo")
def _demo_command(
    pages: Annotated[int, typer.Option(min=1, help="Pages of the sandbox site to scrape.")] = 300,
    dir: Annotated[
        Path | None, typer.Option("--dir", help="Keep the status files here (default: temp).")
    ] = None,
) -> None:
    """Start the sandbox on loopback and scrape it, with live progress and a summary."""
    from scrapeflow.demo import run_demo

    code = run_demo(pages=pages, directory=dir, out=out, err=err)
    raise typer.Exit(code)


@app.command("sandbox")
def _sandbox_command(
    host: Annotated[
        str, typer.Option(help="Address to serve on (keep it on loopback).")
    ] = "127.0.0.1",
    seed: Annotated[int, typer.Option(help="Same seed, same data.")] = 0,
    latency_ms: Annotated[
        str | None,
        typer.Option(help="Latency per response, 'A-B' ms, for every site (default: per site)."),
    ] = None,
    hostility: Annotated[
        str, typer.Option(help="Profile: none, realistic or hostile.")
    ] = "realistic",
    switch: Annotated[
        list[str] | None,
        typer.Option("--set", help="Change one hostility switch: NAME=VALUE (repeatable)."),
    ] = None,
    customers: Annotated[
        int, typer.Option(min=1, max=999_999, help="Customers at each bank.")
    ] = 10_000,
    manifest: Annotated[
        Path | None, typer.Option(help="Also write the manifest (sites, admin token) here.")
    ] = None,
) -> None:
    """Serve every sandbox site on loopback until Ctrl-C; print the manifest as JSON.

    The admin token comes from SCRAPEFLOW_SANDBOX_ADMIN_TOKEN, or is made up and printed.
    """
    from scrapeflow.sandbox import Sandbox, SandboxConfig

    try:
        latency = None if latency_ms is None else _parse_range(latency_ms)
    except ValueError:
        _fail(f"--latency-ms must be 'A-B' with 0 <= A <= B, got {latency_ms!r}")
    switches: dict[str, str] = {}
    for item in switch or []:
        name, sep, value = item.partition("=")
        if not sep:
            _fail(f"--set wants NAME=VALUE, got {item!r}")
        switches[name.strip()] = value.strip()
    try:
        config = SandboxConfig(
            host=host,
            seed=seed,
            hostility=hostility,
            switches=switches,
            latency_ms=latency,
            admin_token=os.environ.get("SCRAPEFLOW_SANDBOX_ADMIN_TOKEN") or None,
            customers=customers,
        )
        sandbox = Sandbox(config)
    except ValueError as exc:
        _fail(str(exc))

    async def serve_forever() -> None:
        async with sandbox:
            text = json.dumps(sandbox.manifest())
            if manifest is not None:
                atomic_write_bytes(manifest, (text + "\n").encode())
            print(text, flush=True)
            await asyncio.Event().wait()

    try:
        run_async(serve_forever())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        _fail(f"cannot serve on {host}: {exc.strerror or exc}")


def _parse_range(text: str) -> tuple[float, float]:
    low_text, _, high_text = text.partition("-")
    low = float(low_text)
    high = float(high_text) if high_text else low
    if not 0 <= low <= high:
        raise ValueError(text)
    return low, high


def main() -> None:
    """Console-script entry point."""
    _raise_open_files_limit()
    try:
        app()
    except BrokenPipeError:  # `scrapeflow status DIR | head`
        sys.exit(0)
    except ScrapeflowError as exc:
        err.print(Text.assemble(("error: ", "bold red"), str(exc)), highlight=False)
        sys.exit(EXIT_BAD_INPUT)
    except Exception as exc:  # a bug or the machine: one line, its own code, not a traceback
        err.print(
            Text.assemble(
                ("error: ", "bold red"),
                f"unexpected {type(exc).__name__}: {redact(str(exc))} "
                "(finished tasks are saved; --log-level DEBUG tells more)",
            ),
            highlight=False,
        )
        sys.exit(EXIT_UNEXPECTED)


def _raise_open_files_limit() -> None:
    """Let --parallelism go past the default 1,024 open files: lift the soft limit to the hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
