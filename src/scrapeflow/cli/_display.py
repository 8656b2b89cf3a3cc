"""What the CLI shows a person: a live progress bar for a run, and summary tables."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from scrapeflow.cli._common import run_async
from scrapeflow.executor import RunProgress, execute_async
from scrapeflow.http import HttpClient, HttpConfig, Stats
from scrapeflow.proxies import ProxyProvider
from scrapeflow.scrape import scrape
from scrapeflow.status import ERROR_PREFIX, Params

__all__ = ["RunDisplay", "http_table", "scrape_with_display", "summary_table"]

_REFRESH_SECONDS = 0.1


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f}/s" if speed else "–/s", style="progress.data.speed")


class RunDisplay:
    """A progress bar fed by ``execute_async(on_progress=display.update)``.

    Also keeps what the closing summary needs: this run's counts and its error kinds.
    """

    def __init__(self, console: Console, total: int | None, description: str = "scrape") -> None:
        self.console = console
        self.errors: Counter[str] = Counter()
        self.last: RunProgress | None = None
        self.failed = 0
        self.http_stats: Stats | None = None
        self._next_refresh = 0.0
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _RateColumn(),
            TextColumn("ok {task.fields[ok]:,}  failed {task.fields[failed]:,}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total, ok=0, failed=0)

    def __enter__(self) -> RunDisplay:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.last is not None:
            self._render(self.last)
        self._progress.stop()

    def update(self, progress: RunProgress) -> None:
        """The ``on_progress`` callback: cheap per task, redraws at most ten times a second."""
        self.last = progress
        self.failed = progress.failed
        outcome = progress.last
        if outcome is not None and not outcome.ok:
            for name, text in outcome.statuses.items():
                if text.startswith(ERROR_PREFIX):
                    self.errors[f"{name}: {text.split('::', 1)[0]}"] += 1
        now = time.monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + _REFRESH_SECONDS
            self._render(progress)

    def _render(self, progress: RunProgress) -> None:
        self._progress.update(
            self._task,
            total=progress.total,
            completed=progress.done,
            ok=progress.succeeded + progress.skipped,
            failed=progress.failed,
        )

    def summary(self) -> Table:
        """This run's counts, and its errors grouped by executor and exception type."""
        p = self.last
        table = Table(title="run summary", show_header=False)
        table.add_column("what")
        table.add_column("count", justify="right")
        if p is None:
            table.add_row("tasks", "0")
            return table
        table.add_row("tasks done", f"{p.done:,}")
        table.add_row("succeeded", f"{p.succeeded:,}")
        table.add_row("skipped (done before)", f"{p.skipped:,}")
        table.add_row("failed", f"{p.failed:,}")
        table.add_row("seconds", f"{p.elapsed:,.2f}")
        table.add_row("tasks/s", f"{p.rate:,.0f}")
        for kind, count in self.errors.most_common(10):
            table.add_row(Text(f"  {kind}"), f"{count:,}")
        return table


def summary_table(summary: dict[str, Counter[str]], *, title: str) -> Table:
    """The ``status_summary`` histogram as a table: executor, status message, tasks."""
    table = Table(title=title)
    table.add_column("executor")
    table.add_column("status")
    table.add_column("tasks", justify="right")
    for name, counts in summary.items():
        for text, count in counts.most_common():
            shown = text if len(text) <= 100 else text[:97] + "..."
            table.add_row(Text(name), Text(shown), f"{count:,}")
    return table


def scrape_with_display(
    tasks: Iterable[tuple[str, Params]],
    directory: Path,
    *,
    total: int | None,
    console: Console,
    parallelism: int,
    timeout: float,
    force: list[str] | None = None,
    proxy_provider: ProxyProvider | None = None,
    http: HttpConfig | None = None,
    description: str = "scrape",
) -> RunDisplay:
    """Run ``scrape`` over ``tasks`` with a progress bar; the display holds the run's summary
    and, in ``display.http_stats``, what the HTTP layer did per host and per proxy."""
    config = http or HttpConfig(max_connections=parallelism, timeout=timeout)

    async def run(display: RunDisplay) -> None:
        async with HttpClient(config, proxy_provider=proxy_provider) as client:
            display.http_stats = client.stats
            await execute_async(
                [scrape],
                directory,
                tasks,
                timeout=timeout,
                force_executors=force,
                max_parallelism=parallelism,
                http=client,
                on_progress=display.update,
            )

    with RunDisplay(console, total, description) as display:
        run_async(run(display))
    return display


def http_table(stats: Stats) -> Table:
    """Per host and per proxy: requests, outcomes and latency percentiles."""
    table = Table(title="traffic")
    for column in ("", "requests", "ok", "retries", "bans", "captchas", "429/503", "errors"):
        table.add_column(column, justify="left" if not column else "right")
    for column in ("p50 ms", "p90 ms", "p99 ms"):
        table.add_column(column, justify="right")
    for kind, group in (("host", stats.hosts), ("proxy", stats.proxies)):
        for name, traffic in group.items():
            snap = traffic.snapshot()
            latency = snap["latency_ms"]
            table.add_row(
                Text(f"{kind} {name}"),
                f"{traffic.requests:,}",
                f"{traffic.ok:,}",
                f"{traffic.retries:,}",
                f"{traffic.bans:,}",
                f"{traffic.captchas:,}",
                f"{traffic.throttled:,}",
                f"{sum(traffic.errors.values()):,}",
                *(
                    "-" if latency[q] is None else f"{latency[q]:,.0f}"
                    for q in ("p50", "p90", "p99")
                ),
            )
    return table
