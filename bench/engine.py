"""The engine's overhead: ``execute_async([scrape])`` against a bare aiohttp loop, and its memory.

Part 1 (throughput): the same ``--tasks`` distinct URLs of the sandbox plain site, served by a
separate process on loopback, are fetched by two contenders, each in a fresh process writing
into a fresh directory, with the same concurrency:

* ``bare``: one ``aiohttp.ClientSession``, a pool of workers, GET, read, write the body to
  ``<md5(url)>.scrape``. It writes the bodies but no status files.
* ``scrapeflow``: ``execute_async([scrape], dir, tasks, max_parallelism=concurrency)`` with the
  key the CLI uses (the URL's MD5): a body file and a status file per task.

Runs alternate the order and repeat (``--repeat``); the medians make the ratio scrapeflow/bare,
whose goal is >= 0.7. Part 1 runs in the system's temp directory (``--scratch``), a disk as a
user's run would have, and again on tmpfs (``/dev/shm``), where file creation is cheap and
steady, so the engine's own CPU cost shows without the disk's noise (``--no-tmpfs`` skips it).

Part 2 (memory): the peak RSS of ``execute_async`` at ``--rss-tasks`` tasks, given as a generator
of ``(key, params)`` pairs and, separately, as a dict (whose params are the caller's memory, so
the RSS just before the call is shown too). Goal: < 200 MB. It writes where part 1 last did
(tmpfs when there is one): files written, not mapped, are not in a process's RSS.

    .venv/bin/python bench/engine.py            # the README's figures (about 3 minutes)
    .venv/bin/python bench/engine.py --quick    # a smoke run (about 30 seconds)

Results go to ``bench/results/engine.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _loopback import (
    DOCS_ROOT,
    ClientRun,
    LoopbackServer,
    NginxServer,
    bare_fetch_all,
    client_report,
    cpu_seconds_of,
    cpu_seconds_self,
    current_rss_mb,
    docs_pages,
    docs_urls,
    filesystem_of,
    machine_info,
    median,
    page_urls,
    run_client,
    url_key,
)

RATIO_GOAL = 0.8
"""execute_async([scrape]) over the bare loop, both timed inside their processes."""
CLI_GOAL = 0.7
"""``scrapeflow run`` over the bare loop, both timed as whole processes."""
RSS_GOAL_MB = 200.0
SERVER_SATURATED = 0.9  # server CPU share above which a run may be measuring the server
TMPFS = Path("/dev/shm")
RESULTS = Path(__file__).resolve().parent / "results" / "engine.json"


# --- the client processes -------------------------------------------------------------------


def _client_main(args: argparse.Namespace) -> None:
    contender, directory = args.client, Path(args.dir)
    count, concurrency = args.count, args.concurrency
    if contender == "idle":
        import scrapeflow.executor
        import scrapeflow.scrape  # noqa: F401 - the imports are what is measured

        client_report(contender=contender, tasks=0, seconds=0.0, cpu_seconds=0.0)
        return
    if contender == "cli":
        _cli_main(args)
        return
    if contender == "bare":
        urls = _urls(args, count)
        window, errors = _timed(
            lambda: bare_fetch_all(urls, directory, concurrency), args.server_pid
        )
        client_report(contender=contender, tasks=count, failed=errors, **window)
        return

    from scrapeflow.executor import execute_async
    from scrapeflow.scrape import scrape

    tasks: Any
    if args.task_input == "dict":
        tasks = {url_key(url): {"url": url} for url in _urls(args, count)}
    else:
        tasks = ((url_key(url), {"url": url}) for url in _urls(args, count))
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


def _cli_main(args: argparse.Namespace) -> None:
    command = [sys.executable, "-m", "scrapeflow", "run", args.urls_file, "--dir", args.dir]
    command += ["--parallelism", str(args.concurrency)]
    server_cpu = cpu_seconds_of(args.server_pid)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"scrapeflow run failed ({done.returncode}): {done.stderr[-3000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_report(
        contender="cli",
        tasks=args.count,
        failed=0,
        seconds=round(seconds, 4),
        cpu_seconds=round(usage.ru_utime + usage.ru_stime, 3),
        server_cpu_seconds=round(cpu_seconds_of(args.server_pid) - server_cpu, 3),
        peak_rss_mb=round(usage.ru_maxrss / 1024, 1),
    )


def _urls(args: argparse.Namespace, count: int) -> Iterator[str]:
    if args.site == "nginx":
        return docs_urls(args.base_url, count, docs_pages())
    return page_urls(args.base_url, count)


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

    def __init__(self, server: LoopbackServer | NginxServer, site: str, concurrency: int) -> None:
        self.server = server
        self.site = site
        self.concurrency = concurrency

    def urls(self, count: int) -> Iterator[str]:
        if self.site == "nginx":
            return docs_urls(self.server.url, count, docs_pages())
        return page_urls(self.server.url, count)

    @contextlib.contextmanager
    def scratch(self, parent: Path) -> Iterator[Path]:
        """A directory for one part's runs, removed when the part ends, not after each run:
        on this VM's ext4, files created in the seconds after a large delete cost several
        times more, which would charge one run for the previous one's cleanup."""
        with tempfile.TemporaryDirectory(prefix="scrapeflow-bench-", dir=parent) as scratch:
            yield Path(scratch)

    def run(
        self, contender: str, tasks: int, scratch: Path, task_input: str = "generator"
    ) -> ClientRun:
        directory = Path(tempfile.mkdtemp(prefix=f"{contender}-", dir=scratch))
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
            f"--site={self.site}",
        ]
        result = run_client(command)
        _check_files(result, directory, contender, tasks)
        _drop_if_in_memory(directory)
        return result

    def run_cli(self, urls_file: Path, tasks: int, scratch: Path) -> ClientRun:
        """``scrapeflow run URLS --dir D --parallelism N`` as a user runs it: the whole
        process timed, its start, imports and end-of-run table included (through a small
        client process that starts it and reads its resource usage)."""
        directory = Path(tempfile.mkdtemp(prefix="cli-", dir=scratch))
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--client=cli",
            f"--urls-file={urls_file}",
            f"--dir={directory}",
            f"--count={tasks}",
            f"--concurrency={self.concurrency}",
            f"--server-pid={self.server.pid}",
        ]
        result = run_client(command)
        _check_files(result, directory, "scrapeflow", tasks)
        _drop_if_in_memory(directory)
        return result


def _drop_if_in_memory(directory: Path) -> None:
    """Remove a run's files at once when they are in memory (tmpfs): 20,000 pages of the
    Python docs are 1.9 GB, and a part's nine runs kept to its end filled a 24 GB machine.
    On a disk they stay to the part's end (see ``Bench.scratch``)."""
    if filesystem_of(directory) == "tmpfs":
        shutil.rmtree(directory, ignore_errors=True)


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


def _row(label: str, run: ClientRun) -> dict[str, Any]:
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
        "cpu_ms_per_page": round(
            1000 * run.report.get("cpu_seconds", 0.0) / max(1, run.report["tasks"]), 4
        ),
    }


_COLUMNS = (
    f"{'run':<7} {'contender':<23} {'tasks':>7} {'seconds':>8} {'pages/s':>8} "
    f"{'peak RSS MB':>11} {'client CPU':>10} {'server CPU':>10}"
)


def _print_row(row: dict[str, Any], *, rss_before: bool = False) -> None:
    name = row["contender"] + (f" ({row['task_input']})" if row.get("task_input") else "")
    line = f"{row['run']:<7} {name:<23} "
    if row["tasks"]:
        line += (
            f"{row['tasks']:>7} {row['seconds']:>8.2f} {row['pages_per_second']:>8.0f} "
            f"{row['peak_rss_mb']:>11.1f} {row['client_cpu_share']:>10.0%} "
            f"{row['server_cpu_share']:>10.0%}"
        )
    else:
        line += f"{'':>7} {'':>8} {'':>8} {row['peak_rss_mb']:>11.1f}"
    if rss_before and row.get("rss_before_run_mb") is not None:
        line += f" {row['rss_before_run_mb']:>10.1f}"
    print(line.rstrip(), flush=True)


CONTENDERS = ("bare", "scrapeflow", "cli")


def _throughput(
    bench: Bench, tasks: int, repeat: int, scratch: Path, filesystem: str
) -> dict[str, Any]:
    print(
        f"\n== Part 1: throughput, {tasks:,} tasks, concurrency {bench.concurrency}, "
        f"files in {scratch} ({filesystem}) =="
    )
    rows: list[dict[str, Any]] = []
    with bench.scratch(scratch) as directory:
        urls_file = directory / "urls.txt"
        urls_file.write_text("".join(f"{url}\n" for url in bench.urls(tasks)))
        warm = bench.run("bare", min(1000, tasks), directory)
        print(f"(warm-up: bare, {warm.report['tasks']} tasks, not counted)")
        print(_COLUMNS)
        for i in range(repeat):
            shift = i % len(CONTENDERS)
            for contender in CONTENDERS[shift:] + CONTENDERS[:shift]:
                if contender == "cli":
                    run = bench.run_cli(urls_file, tasks, directory)
                else:
                    run = bench.run(contender, tasks, directory)
                rows.append(_row(f"{i + 1}/{repeat}", run))
                _print_row(rows[-1])

    summary: dict[str, dict[str, Any]] = {}
    for contender in CONTENDERS:
        mine = [r for r in rows if r["contender"] == contender]
        summary[contender] = {
            "run": "median",
            "contender": contender,
            "tasks": tasks,
            "seconds": median([r["seconds"] for r in mine]),
            "pages_per_second": median([r["pages_per_second"] for r in mine]),
            "process_wall_seconds": median([r["process_wall_seconds"] for r in mine]),
            "cpu_ms_per_page": median([r["cpu_ms_per_page"] for r in mine]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
            "client_cpu_share": median([r["client_cpu_share"] for r in mine]),
            "server_cpu_share": median([r["server_cpu_share"] for r in mine]),
        }
    bare, engine, cli = (summary[c] for c in CONTENDERS)
    ratio = engine["pages_per_second"] / bare["pages_per_second"]
    # Whole processes: the bare loop's start to exit against scrapeflow run's.
    cli_ratio = bare["process_wall_seconds"] / cli["seconds"]
    pair_ratios = []  # each repeat's runs, back to back: their ratio, noise and all
    for i in range(repeat):
        mine = {r["contender"]: r for r in rows[i * 3 : i * 3 + 3]}
        pair_ratios.append(
            mine["scrapeflow"]["pages_per_second"] / mine["bare"]["pages_per_second"]
        )
    bare_server = bare["server_cpu_share"]
    server_bound = bare_server >= SERVER_SATURATED

    engine_cpu = engine["cpu_ms_per_page"] / bare["cpu_ms_per_page"]
    cli_cpu = cli["cpu_ms_per_page"] / bare["cpu_ms_per_page"]
    print(f"-- median of {repeat} run(s) per contender (peak RSS: the highest) --")
    for contender in CONTENDERS:
        _print_row(summary[contender])
    verdict = "PASS" if ratio >= RATIO_GOAL else "FAIL"
    print(
        f"execute_async/bare = {ratio:.2f} (per repeat: "
        f"{', '.join(f'{r:.2f}' for r in pair_ratios)}); goal >= {RATIO_GOAL}: {verdict}"
    )
    print(
        f"scrapeflow run/bare, whole processes = {cli_ratio:.2f} "
        f"({bare['process_wall_seconds']:.2f} s / {cli['seconds']:.2f} s); goal >= {CLI_GOAL}: "
        f"{'PASS' if cli_ratio >= CLI_GOAL else 'FAIL'}"
    )
    print(
        f"CPU per page: bare {bare['cpu_ms_per_page']:.3f} ms, execute_async "
        f"{engine['cpu_ms_per_page']:.3f} ms ({engine_cpu:.2f}x), scrapeflow run "
        f"{cli['cpu_ms_per_page']:.3f} ms ({cli_cpu:.2f}x)"
    )
    if server_bound:
        print(
            f"WARNING: the server used {bare_server:.0%} of a core during the bare runs: the "
            "bare loop may be measuring the server, which flatters the ratio."
        )
    else:
        print(
            f"server not the bottleneck: {bare_server:.0%} of a core during the bare runs, "
            f"while the bare client used {bare['client_cpu_share']:.0%}."
        )
    return {
        "scratch": str(scratch),
        "filesystem": filesystem,
        "tasks": tasks,
        "concurrency": bench.concurrency,
        "repeat": repeat,
        "runs": rows,
        "median": summary,
        "ratio": round(ratio, 3),
        "pair_ratios": [round(r, 3) for r in pair_ratios],
        "ratio_goal": RATIO_GOAL,
        "ratio_pass": ratio >= RATIO_GOAL,
        "cli_ratio": round(cli_ratio, 3),
        "cli_goal": CLI_GOAL,
        "cli_pass": cli_ratio >= CLI_GOAL,
        "cpu_per_page_ratio": round(engine_cpu, 3),
        "cli_cpu_per_page_ratio": round(cli_cpu, 3),
        "server_bound": server_bound,
    }


def _memory(bench: Bench, tasks: int, scratch: Path, filesystem: str) -> dict[str, Any]:
    print(
        f"\n== Part 2: peak RSS at {tasks:,} tasks, concurrency {bench.concurrency}, "
        f"files in {scratch} ({filesystem}) =="
    )
    print(
        "idle: a process that only imports scrapeflow. RSS before: the process just before "
        "execute_async was called\n(for the dict run, the caller's dict of params is built "
        "by then, and counts in the peak)."
    )
    print(f"{_COLUMNS} {'RSS before':>10}")
    rows: list[dict[str, Any]] = []
    runs = (("idle", None), ("bare", None), ("scrapeflow", "generator"), ("scrapeflow", "dict"))
    with bench.scratch(scratch) as directory:
        for contender, task_input in runs:
            count = 0 if contender == "idle" else tasks
            row = _row("rss", bench.run(contender, count, directory, task_input or "generator"))
            row["task_input"] = task_input
            rows.append(row)
            _print_row(row, rss_before=True)
    bare = next(r for r in rows if r["contender"] == "bare")
    if bare["server_cpu_share"] >= SERVER_SATURATED:
        print(
            "(the bare run here was server-bound: the server renders the pages past the "
            "first part's on request; only its RSS matters here)"
        )
    verdicts = {}
    for row in rows:
        if row["contender"] == "scrapeflow":
            ok = row["peak_rss_mb"] < RSS_GOAL_MB
            verdicts[row["task_input"]] = ok
            print(
                f"scrapeflow ({row['task_input']}) at {tasks:,} tasks: peak RSS "
                f"{row['peak_rss_mb']:.1f} MB; goal < {RSS_GOAL_MB:.0f} MB: "
                f"{'PASS' if ok else 'FAIL'}"
            )
    return {
        "scratch": str(scratch),
        "filesystem": filesystem,
        "tasks": tasks,
        "concurrency": bench.concurrency,
        "runs": rows,
        "rss_goal_mb": RSS_GOAL_MB,
        "rss_pass": verdicts,
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per throughput run")
    parser.add_argument("--rss-tasks", type=int, default=100_000, help="tasks of the RSS runs")
    parser.add_argument("--concurrency", type=int, default=100, help="the same for both")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs per contender")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2,000 tasks, 5,000 RSS tasks, 2 repeats"
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the runs write their files",
    )
    parser.add_argument(
        "--tmpfs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also run part 1 with the files on tmpfs ({TMPFS})",
    )
    parser.add_argument("--skip-rss", action="store_true", help="skip part 2")
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    # The client processes: the bench starts this file again with these.
    parser.add_argument(
        "--site",
        choices=["nginx", "sandbox"],
        default="nginx" if NginxServer.available() else "sandbox",
        help=f"nginx serving the Python docs ({DOCS_ROOT}, Debian's python3-doc), or the "
        "sandbox plain site served by Python",
    )
    parser.add_argument(
        "--client", choices=["bare", "scrapeflow", "cli", "idle"], help=argparse.SUPPRESS
    )
    parser.add_argument("--urls-file", help=argparse.SUPPRESS)
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
    if min(args.tasks, args.rss_tasks, args.concurrency, args.repeat) < 1:
        parser.error("--tasks, --rss-tasks, --concurrency and --repeat must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.client:
        _client_main(args)
        return
    started = time.monotonic()
    machine = machine_info()
    print(
        f"scrapeflow engine bench, {machine['date']}: {machine['nproc']} cores "
        f"({machine['cpu']}), Python {machine['python']}, aiohttp {machine['aiohttp']}, "
        f"commit {machine['git_commit'] or '?'}"
    )
    pages = max(100_000, args.tasks, args.rss_tasks)
    scratch = args.scratch.resolve()
    filesystem = filesystem_of(scratch)
    passes = [(scratch, filesystem)]
    if args.tmpfs and TMPFS.is_dir() and filesystem != "tmpfs":
        passes.append((TMPFS, filesystem_of(TMPFS)))
    results: dict[str, Any] = {"bench": "engine", "machine": machine, "options": _options(args)}
    server: LoopbackServer | NginxServer
    if args.site == "nginx":
        server, site = (
            NginxServer(DOCS_ROOT),
            f"nginx serving {len(docs_pages())} pages of the Python docs as ?i=N",
        )
    else:
        server = LoopbackServer(pages=pages, warm=args.tasks)
        site = f"sandbox PlainSite, {pages:,} pages (the first {args.tasks:,} rendered ahead)"
    with server:
        print(
            f"server: {site}, in its own process at {server.url}\n"
            "bare: one aiohttp session and a worker pool; it writes each body to "
            "<md5(url)>.scrape, but no status file.\n"
            "scrapeflow: execute_async([scrape]); a body file and a status file per task.\n"
            "cli: scrapeflow run URLS --dir D --parallelism N, the whole process timed.\n"
            "CPU columns: CPU seconds over the measured seconds (100% = one core busy)."
        )
        bench = Bench(server, args.site, args.concurrency)
        results["throughput"] = [
            _throughput(bench, args.tasks, args.repeat, where, fs) for where, fs in passes
        ]
        if not args.skip_rss:
            # Peak RSS does not depend on where the files go (written, not mapped): the
            # fastest place keeps the bench short.
            where, fs = passes[-1]
            results["memory"] = _memory(bench, args.rss_tasks, where, fs)
    results["bench_seconds"] = round(time.monotonic() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    _print_summary(results)
    print(f"whole bench: {results['bench_seconds']:.0f} s; results in {_shown(args.output)}")


def _print_summary(results: dict[str, Any]) -> None:
    print("\n== Summary ==")
    for part in results["throughput"]:
        median_of = part["median"]
        print(
            f"throughput ({part['filesystem']}): scrapeflow "
            f"{median_of['scrapeflow']['pages_per_second']:.0f} pages/s, bare "
            f"{median_of['bare']['pages_per_second']:.0f} pages/s, ratio {part['ratio']:.2f} "
            f"(goal >= {RATIO_GOAL}: {'PASS' if part['ratio_pass'] else 'FAIL'}); "
            f"scrapeflow run, whole process: {part['cli_ratio']:.2f} (goal >= {CLI_GOAL}: "
            f"{'PASS' if part['cli_pass'] else 'FAIL'}); CPU per page "
            f"{part['cpu_per_page_ratio']:.2f}x bare (run: {part['cli_cpu_per_page_ratio']:.2f}x)"
            + (" [server-bound]" if part["server_bound"] else "")
        )
    memory = results.get("memory")
    if memory:
        for row in memory["runs"]:
            if row["contender"] == "scrapeflow":
                ok = memory["rss_pass"][row["task_input"]]
                print(
                    f"peak RSS at {memory['tasks']:,} tasks ({row['task_input']}): "
                    f"{row['peak_rss_mb']:.1f} MB (goal < {RSS_GOAL_MB:.0f} MB: "
                    f"{'PASS' if ok else 'FAIL'})"
                )


def _options(args: argparse.Namespace) -> dict[str, Any]:
    names = ("tasks", "rss_tasks", "concurrency", "repeat", "quick", "scratch", "tmpfs", "site")
    return {name: str(v) if isinstance(v := getattr(args, name), Path) else v for name in names}


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
