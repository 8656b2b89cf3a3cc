"""The engine's overhead: ``execute_async([scrape])`` against a bare aiohttp loop, and its memory.

Part 1 (throughput): the same ``--tasks`` distinct URLs of the sandbox plain site, served by a
separate process on loopback, are fetched by two contenders, each in a fresh process writing
into a fresh directory, with the same concurrency:

* ``bare``: one ``aiohttp.ClientSession``, a pool of workers, GET, read, write the body to
  ``<md5(url)>.scrape``. It writes the bodies but no status files.
* ``scrapeflow``: ``execute_async([scrape], dir, tasks, max_parallelism=concurrency)`` with the
  key the CLI uses (the URL's MD5): a body file and a status file per task.

Runs alternate the order and repeat (``--repeat``); the medians make the ratio
scrapeflow/bare, whose goal is >= 0.7.

Part 2 (memory): the peak RSS of ``execute_async`` at ``--rss-tasks`` tasks, given as a generator
of ``(key, params)`` pairs and, separately, as a dict (whose 100k params are the caller's memory,
so the RSS just before the call is shown too). Goal: < 200 MB.

    .venv/bin/python bench/engine.py            # the README's figures (a few minutes)
    .venv/bin/python bench/engine.py --quick    # a smoke run

Results go to ``bench/results/engine.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _loopback import (
    ClientRun,
    LoopbackServer,
    bare_fetch_all,
    client_report,
    cpu_seconds_of,
    cpu_seconds_self,
    current_rss_mb,
    machine_info,
    median,
    page_urls,
    run_client,
    url_key,
)

RATIO_GOAL = 0.7
RSS_GOAL_MB = 200.0
SERVER_SATURATED = 0.9  # server CPU share above which a run may be measuring the server
RESULTS = Path(__file__).resolve().parent / "results" / "engine.json"


# --- the client processes -------------------------------------------------------------------


def _client_main(args: argparse.Namespace) -> None:
    contender, directory = args.client, Path(args.dir)
    count, concurrency = args.count, args.concurrency
    if contender == "idle":
        import scrapeflow.executor  # noqa: F401 - the import is what is measured
        import scrapeflow.scrape  # noqa: F401

        client_report(contender=contender, tasks=0, seconds=0.0, cpu_seconds=0.0)
        return
    if contender == "bare":
        urls = page_urls(args.base_url, count)
        window, errors = _timed(
            lambda: bare_fetch_all(urls, directory, concurrency), args.server_pid
        )
        client_report(contender=contender, tasks=count, failed=errors, **window)
        return

    from scrapeflow.executor import execute_async
    from scrapeflow.scrape import scrape

    tasks: Any
    if args.task_input == "dict":
        tasks = {url_key(url): {"url": url} for url in page_urls(args.base_url, count)}
    else:
        tasks = ((url_key(url), {"url": url}) for url in page_urls(args.base_url, count))
    rss_before = current_rss_mb()
    window, ok = _timed(
        lambda: execute_async([scrape], directory, tasks, max_parallelism=concurrency),
        args.server_pid,
    )
    client_report(
        contender=contender,
        task_input=args.task_input,
        tasks=count,
        failed=count - len(ok),
        rss_before_run_mb=round(rss_before, 1),
        **window,
    )


def _timed(make: Callable[[], Any], server_pid: int | None) -> tuple[dict[str, float], Any]:
    """Await ``make()``; its seconds and the CPU seconds this process and the server used."""

    async def run() -> tuple[dict[str, float], Any]:
        server_cpu = cpu_seconds_of(server_pid) if server_pid else 0.0
        cpu = cpu_seconds_self()
        started = time.perf_counter()
        result = await make()
        seconds = time.perf_counter() - started
        window = {
            "seconds": round(seconds, 4),
            "cpu_seconds": round(cpu_seconds_self() - cpu, 3),
            "server_cpu_seconds": round(
                cpu_seconds_of(server_pid) - server_cpu if server_pid else 0.0, 3
            ),
        }
        return window, result

    return asyncio.run(run())


# --- the bench ------------------------------------------------------------------------------


class Bench:
    """Runs contenders against one server, each in a fresh process and a fresh directory."""

    def __init__(self, server: LoopbackServer, concurrency: int, scratch: Path) -> None:
        self.server = server
        self.concurrency = concurrency
        self.scratch = scratch
        self._runs = 0

    def run(self, contender: str, tasks: int, task_input: str = "generator") -> ClientRun:
        self._runs += 1
        directory = self.scratch / f"run-{self._runs}-{contender}"
        directory.mkdir()
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            f"--client={contender}",
            f"--base-url={self.server.url}",
            f"--dir={directory}",
            f"--count={tasks}",
            f"--concurrency={self.concurrency}",
            f"--task-input={task_input}",
            f"--server-pid={self.server.pid}",
        ]
        try:
            result = run_client(command)
            _check_files(result, directory, contender, tasks)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return result


def _check_files(result: ClientRun, directory: Path, contender: str, tasks: int) -> None:
    """Both contenders must have done the whole job, or their figures compare nothing."""
    if contender == "idle":
        return
    bodies = statuses = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(".scrape"):
                bodies += 1
            elif entry.name.endswith(".status.json"):
                statuses += 1
    expected_statuses = tasks if contender == "scrapeflow" else 0
    if result.report.get("failed") or bodies != tasks or statuses != expected_statuses:
        raise RuntimeError(
            f"{contender} did not do the whole job: {result.report.get('failed')} failed, "
            f"{bodies} body files and {statuses} status files for {tasks} tasks"
        )


def _run_row(label: str, run: ClientRun) -> dict[str, Any]:
    return {
        "run": label,
        "contender": run.report["contender"],
        "task_input": run.report.get("task_input"),
        "tasks": run.report["tasks"],
        "seconds": run.seconds,
        "pages_per_second": round(run.pages_per_second, 1),
        "peak_rss_mb": run.report["peak_rss_mb"],
        "rss_before_run_mb": run.report.get("rss_before_run_mb"),
        "client_cpu_share": round(run.client_cpu_share, 3),
        "server_cpu_share": round(run.server_cpu_share, 3),
        "process_wall_seconds": round(run.wall_seconds, 3),
    }


HEADER = (
    f"{'run':<7} {'contender':<22} {'tasks':>7} {'seconds':>8} {'pages/s':>8} "
    f"{'peak RSS MB':>11} {'client CPU':>10} {'server CPU':>10}"
)


def _print_row(row: dict[str, Any]) -> None:
    name = row["contender"] + (f" ({row['task_input']})" if row["task_input"] else "")
    print(
        f"{row['run']:<7} {name:<22} {row['tasks']:>7} {row['seconds']:>8.2f} "
        f"{row['pages_per_second']:>8.0f} {row['peak_rss_mb']:>11.1f} "
        f"{row['client_cpu_share']:>10.0%} {row['server_cpu_share']:>10.0%}",
        flush=True,
    )


def _throughput(bench: Bench, tasks: int, repeat: int) -> dict[str, Any]:
    print(f"\n== Part 1: throughput, {tasks:,} tasks, concurrency {bench.concurrency} ==")
    print(
        "bare = one aiohttp session + worker pool; it writes each body to <md5(url)>.scrape "
        "but no status file.\nscrapeflow = execute_async([scrape]): the body file and a "
        "status file per task.\nCPU columns: CPU seconds / measured seconds (100% = one core)."
    )
    warm = bench.run("bare", min(1000, tasks))
    print(f"(warm-up: bare, {warm.report['tasks']} tasks, not counted)")
    print(HEADER)
    rows: list[dict[str, Any]] = []
    for i in range(repeat):
        order = ("bare", "scrapeflow") if i % 2 == 0 else ("scrapeflow", "bare")
        for contender in order:
            row = _run_row(f"{i + 1}/{repeat}", bench.run(contender, tasks))
            rows.append(row)
            _print_row(row)

    summary: dict[str, dict[str, float]] = {}
    for contender in ("bare", "scrapeflow"):
        mine = [r for r in rows if r["contender"] == contender]
        summary[contender] = {
            "tasks": tasks,
            "seconds": median([r["seconds"] for r in mine]),
            "pages_per_second": median([r["pages_per_second"] for r in mine]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
            "client_cpu_share": median([r["client_cpu_share"] for r in mine]),
            "server_cpu_share": median([r["server_cpu_share"] for r in mine]),
        }
    ratio = summary["scrapeflow"]["pages_per_second"] / summary["bare"]["pages_per_second"]
    pair_ratios = []  # each repeat's two runs, back to back: their ratio, noise and all
    for first, second in zip(rows[0::2], rows[1::2], strict=True):
        bare, mine = (first, second) if first["contender"] == "bare" else (second, first)
        pair_ratios.append(mine["pages_per_second"] / bare["pages_per_second"])
    server_bound = summary["bare"]["server_cpu_share"] >= SERVER_SATURATED

    print(f"\nmedian of {repeat} run(s) (peak RSS: the highest):")
    print(
        f"{'contender':<12} {'tasks':>7} {'seconds':>8} {'pages/s':>8} {'peak RSS MB':>11} "
        f"{'client CPU':>10} {'server CPU':>10}"
    )
    for contender, s in summary.items():
        print(
            f"{contender:<12} {s['tasks']:>7} {s['seconds']:>8.2f} {s['pages_per_second']:>8.0f} "
            f"{s['peak_rss_mb']:>11.1f} {s['client_cpu_share']:>10.0%} "
            f"{s['server_cpu_share']:>10.0%}"
        )
    verdict = "PASS" if ratio >= RATIO_GOAL else "FAIL"
    print(
        f"ratio scrapeflow/bare = {ratio:.2f} (per pair: "
        f"{', '.join(f'{r:.2f}' for r in pair_ratios)}); goal >= {RATIO_GOAL}: {verdict}"
    )
    if server_bound:
        print(
            f"WARNING: the server used {summary['bare']['server_cpu_share']:.0%} of a core "
            "during the bare runs: the bare loop may be measuring the server, so the ratio "
            "is flattered."
        )
    else:
        print(
            f"server not the bottleneck: it used {summary['bare']['server_cpu_share']:.0%} of "
            f"a core while the bare client used {summary['bare']['client_cpu_share']:.0%}."
        )
    return {
        "tasks": tasks,
        "concurrency": bench.concurrency,
        "repeat": repeat,
        "runs": rows,
        "median": summary,
        "ratio": round(ratio, 3),
        "pair_ratios": [round(r, 3) for r in pair_ratios],
        "ratio_goal": RATIO_GOAL,
        "ratio_pass": ratio >= RATIO_GOAL,
        "server_bound": server_bound,
        "note": "bare writes the body files but no status files",
    }


def _memory(bench: Bench, tasks: int) -> dict[str, Any]:
    print(f"\n== Part 2: peak RSS at {tasks:,} tasks, concurrency {bench.concurrency} ==")
    print(
        "idle = a process that only imports scrapeflow and aiohttp. For the dict run, the "
        "caller's dict of params is in the figure;\n'RSS before' is the process just before "
        "execute_async was called (dict built)."
    )
    print(HEADER + f" {'RSS before':>10}")
    rows: list[dict[str, Any]] = []
    for label, contender, task_input in (
        ("idle", "idle", None),
        ("rss", "bare", None),
        ("rss", "scrapeflow", "generator"),
        ("rss", "scrapeflow", "dict"),
    ):
        count = 0 if contender == "idle" else tasks
        run = bench.run(contender, count, task_input or "generator")
        row = _run_row(label, run)
        row["task_input"] = task_input
        rows.append(row)
        if contender == "idle":
            print(f"{'idle':<7} {'imports only':<22} {'':>7} {'':>8} {'':>8} ", end="")
            print(f"{row['peak_rss_mb']:>11.1f}", flush=True)
        else:
            _print_row_with_before(row)
    verdicts = {}
    for row in rows:
        if row["contender"] == "scrapeflow":
            ok = row["peak_rss_mb"] < RSS_GOAL_MB
            verdicts[row["task_input"]] = ok
            print(
                f"scrapeflow ({row['task_input']}): peak RSS {row['peak_rss_mb']:.1f} MB; "
                f"goal < {RSS_GOAL_MB:.0f} MB: {'PASS' if ok else 'FAIL'}"
            )
    return {
        "tasks": tasks,
        "concurrency": bench.concurrency,
        "runs": rows,
        "rss_goal_mb": RSS_GOAL_MB,
        "rss_pass": verdicts,
    }


def _print_row_with_before(row: dict[str, Any]) -> None:
    name = row["contender"] + (f" ({row['task_input']})" if row["task_input"] else "")
    before = row["rss_before_run_mb"]
    print(
        f"{row['run']:<7} {name:<22} {row['tasks']:>7} {row['seconds']:>8.2f} "
        f"{row['pages_per_second']:>8.0f} {row['peak_rss_mb']:>11.1f} "
        f"{row['client_cpu_share']:>10.0%} {row['server_cpu_share']:>10.0%} "
        f"{'' if before is None else f'{before:.1f}':>10}",
        flush=True,
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per throughput run")
    parser.add_argument("--rss-tasks", type=int, default=100_000, help="tasks of the RSS runs")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs per contender")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2,000 tasks, 5,000 RSS tasks, 2 repeats"
    )
    parser.add_argument("--scratch", type=Path, default=None, help="where runs write")
    parser.add_argument("--skip-rss", action="store_true", help="only part 1")
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    # The client processes: the bench starts this file again with these.
    parser.add_argument("--client", choices=["bare", "scrapeflow", "idle"], help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--task-input", choices=["generator", "dict"], default="generator", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.rss_tasks, args.repeat = 2_000, 5_000, 2
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.client:
        _client_main(args)
        return
    started = time.monotonic()
    machine = machine_info()
    print(
        f"scrapeflow engine bench - {machine['date']}, {machine['nproc']} cores "
        f"({machine['cpu']}), Python {machine['python']}, aiohttp {machine['aiohttp']}, "
        f"commit {machine['git_commit'] or '?'}"
    )
    pages = max(100_000, args.tasks, args.rss_tasks)
    results: dict[str, Any] = {"bench": "engine", "machine": machine}
    with (
        tempfile.TemporaryDirectory(prefix="scrapeflow-bench-", dir=args.scratch) as scratch,
        LoopbackServer(pages=pages, warm=args.tasks) as server,
    ):
        print(
            f"server: sandbox PlainSite ({pages:,} pages, the first {args.tasks:,} rendered "
            f"ahead) in its own process at {server.url}"
        )
        bench = Bench(server, args.concurrency, Path(scratch))
        results["throughput"] = _throughput(bench, args.tasks, args.repeat)
        if not args.skip_rss:
            results["memory"] = _memory(bench, args.rss_tasks)
    results["bench_seconds"] = round(time.monotonic() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(_dumps(results) + "\n")
    print(f"\nwhole bench: {results['bench_seconds']:.0f} s; results in {_shown(args.output)}")


def _dumps(results: dict[str, Any]) -> str:
    import json

    return json.dumps(results, indent=2)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
