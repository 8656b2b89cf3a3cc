"""``scrapeflow fetch`` against plain aiohttp loops and Scrapy, with and without server latency.

One URL list of ``--urls`` distinct pages (20,000) — of the Python docs served by nginx where
no latency is added (``--site``), else of the sandbox PlainSite served by a process of its own
on loopback with every page rendered ahead (``bench/_loopback.py``) — is fetched by five
contenders, each in a fresh process writing into a fresh directory:

1. ``scrapeflow fetch`` with one process (``MAX_CPUS=1``), called as the CLI with gofetch's
   variables, storing on local disk: content under its SHA-384, the two default indexes
   (``sha384_checksum``, ``url_sha384``) and the run's fetch log;
2. the same with all CPUs (``MAX_CPUS`` = the machine's cores);
3. the **gofetch-layout loop**: a plain aiohttp loop (one session, a worker pool) that keeps
   gofetch's own layout — each body once at ``sha384_content/<sha384>``, a line appended to
   the checksum's index file ``index/sha384_checksum/<sha384>``, a JSON line per URL in the
   run's log — and nothing more (no by-URL index, no journal, nothing atomic). The goal of
   issue 24: ``scrapeflow fetch`` on one CPU at >= 0.85x its pages/s for <= 1.3x its CPU, on
   ext4, each store removed after its run;
4. a bare aiohttp loop: one session and a worker pool; GET, SHA-384 of the body, the body
   written to ``<dir>/<sha384>`` unless that file exists; no index, no log, no atomic write;
5. Scrapy 2.x (``bench/_scrapy_fetch.py``, in the bench's own ``bench/.venv-scrapy``, made
   here if missing): a spider reading the list, an item pipeline writing each body to
   ``<dir>/<sha384>``; robots.txt, cookies, retries and the telnet console off, asyncio reactor.

All have the same number of requests in flight: ``--concurrency`` (50) without added
latency and ``--latency-concurrency`` (100) with ``--latency-ms`` (100 ms) per response, added
by the server; scrapeflow's is ``CONCURRENT_FETCHES`` per CPU times the CPUs. At 100 ms a
client can do at most concurrency / 0.1 s pages per second (500/s at 50): the latency part
uses more requests in flight, the same for every contender, so that it measures the clients,
not only that ceiling, and stays short.

Seconds are each process's wall time, start to exit: interpreter start, imports, reading the
list and, for scrapeflow on several CPUs, starting its workers included, as a user waits for
them. The contenders' own timers (scrapeflow's "pages/s" line, the bare loop's and Scrapy's
fetch windows) are kept as "in-run" figures. Peak RSS is the sum over a contender's processes
of each one's high-water mark (``VmHWM``), read from ``/proc`` every 50 ms. CPU is the user and
system time of all the contender's processes; the server's is shown as a share of the wall time
(100% = a core). Every run must store every page (counted, and a sample re-hashed) or the
bench stops. Each run's directory is removed when the run ends, as a user re-running into a
fresh directory would: on this VM's ext4, files created just after a large delete cost more
(see ``bench/engine.py``), which is what a store creating a file per URL paid.

Repeats: ``--repeat`` (3) without latency, ``--latency-repeat`` (2) with it, the order
rotating; Scrapy runs ``--scrapy-repeat`` (1) times per part, its rate being CPU-bound and
steady, and its 45 s runs what would take the bench past 10 minutes. Medians are shown. The
stores go to ``--scratch`` (the system's temp directory, a disk); ext4's file creation time on
this VM varies from run to run, so the no-latency part is run again on tmpfs (``/dev/shm``,
``--no-tmpfs`` to skip) without Scrapy, where the figures are the clients' own.

    .venv/bin/python bench/fetch.py                      # the README's figures (~8 minutes)
    .venv/bin/python bench/fetch.py --urls 2000          # a quick look
    .venv/bin/python bench/fetch.py --no-latency-only --only scrapeflow-1cpu,gofetch
                                                         # issue 24's goal alone (~3 minutes)

Results go to ``bench/results/fetch.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from _loopback import (
    DOCS_ROOT,
    LoopbackServer,
    NginxServer,
    client_report,
    cpu_seconds_of,
    docs_pages,
    docs_urls,
    filesystem_of,
    machine_info,
    median,
    page_urls,
)

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results" / "fetch.json"
SCRAPY_VENV = BENCH / ".venv-scrapy"
SCRAPY_REQUIREMENT = "scrapy>=2.11,<3"
SCRAPY_CLIENT = BENCH / "_scrapy_fetch.py"
BARE_GOAL = 0.85  # scrapeflow (1 CPU) / bare aiohttp
CPU_GOAL = 1.3  # scrapeflow (1 CPU) CPU per page / bare aiohttp's
SCALE_GOAL = 1.6  # scrapeflow on 2 CPUs / on 1
SCRAPY_GOAL = 5.0  # scrapeflow / Scrapy
MINUTE_URLS = 22_000  # gofetch's "nearly 22,000 sources", under a minute at 100 ms
CPUS = os.cpu_count() or 1
GOFETCH_GOAL = 0.85  # scrapeflow (1 CPU) pages/s / the gofetch-layout loop's, on ext4
GOFETCH_CPU_GOAL = 1.3  # scrapeflow (1 CPU) CPU / the gofetch-layout loop's, on ext4
CONTENDERS = tuple(
    dict.fromkeys(("scrapeflow-1cpu", f"scrapeflow-{CPUS}cpu", "gofetch", "bare", "scrapy"))
)
LABELS = {
    "scrapeflow-1cpu": "scrapeflow fetch, 1 CPU",
    f"scrapeflow-{CPUS}cpu": f"scrapeflow fetch, {CPUS} CPUs",
    "gofetch": "gofetch-layout loop",
    "bare": "bare aiohttp loop",
    "scrapy": "Scrapy",
}
# gofetch's variables that must not leak into the runs from the caller's environment.
FETCH_VARIABLES = (
    "FETCH_ID",
    "FETCH_OFFSET",
    "FETCH_LIMIT",
    "CONCURRENT_FETCHES",
    "CONCURRENT_S3WRITERS",
    "MAX_CPUS",
    "LOG_LEVEL",
    "REDIS_URL",
    "AWS_STORAGE_BUCKET_NAME",
    "AWS_ENDPOINT_URL",
    "AWS_CONFIG_FILE",
)
TMPFS = Path("/dev/shm")
SAMPLE_EVERY = 0.05  # seconds between two /proc readings of a contender's processes


# --- the bare aiohttp client (run in its own process) -----------------------------------------


async def bare_store_all(urls: Iterator[str], directory: str, concurrency: int) -> int:
    """GET each URL with one session and ``concurrency`` workers; store each 2xx body at
    ``<directory>/<sha384 hex>`` unless that file exists. Returns the failures."""
    failed = 0
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=30)  # as scrapeflow's per-attempt default
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal failed
            for url in urls:
                try:
                    async with session.get(url) as response:
                        body = await response.read()
                        ok = 200 <= response.status < 300
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if not ok:
                    failed += 1
                    continue
                path = os.path.join(directory, hashlib.sha384(body).hexdigest())
                if not os.path.exists(path):
                    with open(path, "wb") as f:
                        f.write(body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


async def gofetch_store_all(urls: Iterator[str], directory: str, concurrency: int) -> int:
    """The bare loop plus gofetch's own layout, as a plain program would write it: each 2xx
    body once at ``sha384_content/<sha384>`` (unless that file exists), a line appended to the
    checksum's index file ``index/sha384_checksum/<sha384>`` (open, one write, close) and a
    JSON line per URL to the run's log (one file, one ``os.write`` per line). Nothing
    atomic, no by-URL index. Returns the failures."""
    failed = 0
    content = os.path.join(directory, "gofetch", "sha384_content")
    index = os.path.join(directory, "gofetch", "index", "sha384_checksum")
    logs = os.path.join(directory, "gofetch", "logs")
    for path in (content, index, logs):
        os.makedirs(path, exist_ok=True)
    started = time.strftime("%Y-%m-%d", time.gmtime())
    log = os.open(
        os.path.join(logs, f"{started}_bench_0_0"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    append = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=30)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def worker() -> None:
                nonlocal failed
                for url in urls:
                    begun = time.time()
                    clock = time.perf_counter_ns()
                    try:
                        async with session.get(url) as response:
                            body = await response.read()
                            status, final = response.status, str(response.url)
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        status, final, body = 0, url, b""
                        error: str | None = type(exc).__name__
                    else:
                        error = None if 200 <= status < 300 else f"HTTP {status}"
                    duration = time.perf_counter_ns() - clock
                    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(begun))
                    checksum = location = None
                    if error is None:
                        checksum = hashlib.sha384(body).hexdigest()
                        location = os.path.join(content, checksum)
                        if not os.path.exists(location):
                            with open(location, "wb") as f:
                                f.write(body)
                        line = f"{location}\t{url}\t{final}\t{when}Z\t{duration}\tHTML\n"
                        fd = os.open(os.path.join(index, checksum), append, 0o600)
                        try:
                            os.write(fd, line.encode())
                        finally:
                            os.close(fd)
                    else:
                        failed += 1
                    record = {
                        "requested_url": url,
                        "final_url": final,
                        "status": status,
                        "checksum": checksum,
                        "location": location,
                        "error": error,
                        "started": f"{when}Z",
                        "duration_ns": duration,
                    }
                    os.write(log, (json.dumps(record) + "\n").encode())

            await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        os.close(log)
    return failed


def _bare_main(args: argparse.Namespace) -> None:
    with open(args.urls_file, encoding="utf-8") as f:
        urls = [line.strip() for line in f if line.strip()]
    started = time.perf_counter()
    loop = gofetch_store_all if args.client == "gofetch" else bare_store_all
    failed = asyncio.run(loop(iter(urls), args.dir, args.concurrency))
    client_report(
        contender=args.client,
        urls=len(urls),
        failed=failed,
        seconds=round(time.perf_counter() - started, 4),
    )


# --- running a contender and watching its processes -----------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(child) for child in f.read().split())
    return found


def _hwm_kib(pid: int) -> int | None:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


class TreeWatcher:
    """Samples the peak RSS (``VmHWM``) of a process and of all its descendants."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(SAMPLE_EVERY):
                return

    def sample(self) -> None:
        todo = [self.pid]
        while todo:
            pid = todo.pop()
            hwm = _hwm_kib(pid)
            if hwm is not None:
                self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)
            todo.extend(_children(pid))

    @property
    def peak_rss_mb(self) -> float:
        return sum(self.peaks.values()) / 1024


def _children_cpu() -> tuple[float, float]:
    """User and system CPU seconds of this process's waited-for descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


def run_contender(
    command: list[str], *, env: dict[str, str], cwd: Path, server_pid: int
) -> dict[str, Any]:
    """Run ``command`` to its end; its wall time, CPU, peak RSS and output."""
    os.sync()  # the previous run's dirty pages are not this run's writes
    out_path, err_path = cwd / "stdout.txt", cwd / "stderr.txt"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        server_cpu, (user, system) = cpu_seconds_of(server_pid), _children_cpu()
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=cwd)
        with TreeWatcher(process.pid) as watcher:
            returncode = process.wait()
        wall = time.perf_counter() - started
        user_after, system_after = _children_cpu()
        server_cpu = cpu_seconds_of(server_pid) - server_cpu
    stdout, stderr = out_path.read_text(), err_path.read_text()
    if returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({returncode}):\n{stderr[-4000:]}")
    return {
        "seconds": wall,
        "client_user_seconds": user_after - user,
        "client_sys_seconds": system_after - system,
        "server_cpu_seconds": server_cpu,
        "peak_rss_mb": watcher.peak_rss_mb,
        "processes": len(watcher.peaks),
        "stdout": stdout,
        "stderr": stderr,
    }


def check_store(content: Path, distinct: int, contender: str) -> int:
    """Every distinct page stored once under its SHA-384, or the figures mean nothing.
    Re-hashes a sample of the files. Returns the bytes stored."""
    names = [entry.name for entry in os.scandir(content)] if content.is_dir() else []
    if len(names) != distinct:
        raise RuntimeError(
            f"{contender}: {len(names):,} bodies in {content} for {distinct:,} distinct pages"
        )
    for name in random.Random(0).sample(names, min(200, len(names))):
        if hashlib.sha384((content / name).read_bytes()).hexdigest() != name:
            raise RuntimeError(f"{contender}: {content / name} does not hold its SHA-384")
    return sum((content / name).stat().st_size for name in names)


# --- the contenders -------------------------------------------------------------------------


def scrapeflow_command(urls_file: Path, store: Path) -> list[str]:
    return [sys.executable, "-m", "scrapeflow", "fetch", str(urls_file), "--store", str(store)]


def scrapeflow_env(cpus: int, concurrency: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FETCH_VARIABLES}
    env.update(
        FETCH_ID="bench",
        MAX_CPUS=str(cpus),
        CONCURRENT_FETCHES=str(concurrency // cpus),
        COLUMNS="200",  # the summary table on one line per row, whatever the terminal
    )
    return env


def _cli_pages_per_second(stdout: str) -> float | None:
    found = re.search(r"pages/s\D*([\d,]+)", stdout)
    return float(found.group(1).replace(",", "")) if found else None


def run_one(
    contender: str,
    *,
    urls_file: Path,
    urls: int,
    concurrency: int,
    scratch: Path,
    server: LoopbackServer | NginxServer,
    distinct: int,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"{contender}-", dir=scratch))
    store = work / "store"
    store.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in FETCH_VARIABLES}
    if contender.startswith("scrapeflow"):
        cpus = 1 if contender == "scrapeflow-1cpu" else CPUS
        command = scrapeflow_command(urls_file, store)
        env = scrapeflow_env(cpus, concurrency)
        content = store / "gofetch" / "sha384_content"
    elif contender in {"bare", "gofetch"}:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            f"--client={contender}",
            f"--urls-file={urls_file}",
            f"--dir={store}",
            f"--concurrency={concurrency}",
        ]
        content = store / "gofetch" / "sha384_content" if contender == "gofetch" else store
    else:
        command = [
            str(SCRAPY_VENV / "bin" / "python"),
            str(SCRAPY_CLIENT),
            str(urls_file),
            str(store),
            f"--concurrency={concurrency}",
        ]
        content = store
    try:
        run = run_contender(command, env=env, cwd=work, server_pid=server.pid)
        stored_bytes = check_store(content, distinct, contender)
    finally:
        # As a user re-running into a fresh directory: the next run's files are created just
        # after this run's were deleted (which this VM's ext4 makes dearer, see the docstring).
        shutil.rmtree(work, ignore_errors=True)
    seconds = run["seconds"]
    row: dict[str, Any] = {
        "contender": contender,
        "urls": urls,
        "concurrency": concurrency,
        "seconds": round(seconds, 3),
        "pages_per_second": round(urls / seconds, 1),
        "peak_rss_mb": round(run["peak_rss_mb"], 1),
        "processes": run["processes"],
        "client_user_seconds": round(run["client_user_seconds"], 2),
        "client_sys_seconds": round(run["client_sys_seconds"], 2),
        "client_cpu_share": round(
            (run["client_user_seconds"] + run["client_sys_seconds"]) / seconds, 3
        ),
        "cpu_ms_per_page": round(
            1000 * (run["client_user_seconds"] + run["client_sys_seconds"]) / urls, 4
        ),
        "server_cpu_share": round(run["server_cpu_seconds"] / seconds, 3),
        "stored_mb": round(stored_bytes / 1e6, 1),
    }
    if contender.startswith("scrapeflow"):
        row["in_run_pages_per_second"] = _cli_pages_per_second(run["stdout"])
        row["env"] = {k: env[k] for k in ("MAX_CPUS", "CONCURRENT_FETCHES", "FETCH_ID")}
        # A failed URL makes the CLI exit non-zero, which run_contender has already refused.
    else:
        report = json.loads(run["stdout"].strip().splitlines()[-1])
        if report.get("failed"):
            raise RuntimeError(f"{contender}: {report['failed']} URLs failed")
        if report.get("seconds"):
            row["in_run_pages_per_second"] = round(urls / report["seconds"], 1)
        if contender == "scrapy":
            row["scrapy"] = report.get("scrapy")
            row["reactor"] = report.get("reactor")
    return row


def ensure_scrapy_venv() -> dict[str, Any]:
    """``bench/.venv-scrapy`` with Scrapy 2.x, made with ``python3 -m venv`` if missing."""
    python = SCRAPY_VENV / "bin" / "python"
    probe = [str(python), "-c", "import scrapy; print(scrapy.__version__)"]
    started = time.monotonic()
    made = False
    if not python.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        print(f"making {SCRAPY_VENV.relative_to(REPO)} ({SCRAPY_REQUIREMENT}) ...", flush=True)
        base = shutil.which("python3") or sys.executable
        subprocess.run([base, "-m", "venv", str(SCRAPY_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", SCRAPY_REQUIREMENT]
        subprocess.run(pip, check=True)
        made = True
    version = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    return {"scrapy": version, "venv_made": made, "setup_seconds": time.monotonic() - started}


# --- the bench ------------------------------------------------------------------------------


def run_part(
    name: str,
    *,
    latency_ms: float,
    concurrency: int,
    contenders: tuple[str, ...],
    repeat: int,
    args: argparse.Namespace,
    scratch_parent: Path,
) -> dict[str, Any]:
    """One server, one URL list, each contender ``repeat`` times (Scrapy ``--scrapy-repeat``
    times), the order rotating between repeats."""
    urls = args.urls
    filesystem = filesystem_of(scratch_parent)
    # nginx and a real site where no latency is added (nginx cannot add it): a Python server
    # would be as busy as the clients it serves.
    nginx = args.site == "nginx" and not latency_ms
    server: LoopbackServer | NginxServer
    if nginx:
        pages = docs_pages()
        server, distinct = NginxServer(DOCS_ROOT), min(urls, len(pages))
    else:
        server, distinct = LoopbackServer(pages=urls, warm=urls, latency_ms=latency_ms), urls
    with (
        server,
        tempfile.TemporaryDirectory(prefix=f"fetch-bench-{name}-", dir=scratch_parent) as tmp,
    ):
        part_dir = Path(tmp)
        urls_file = part_dir / "urls.txt"
        listed = docs_urls(server.url, urls, pages) if nginx else page_urls(server.url, urls)
        urls_file.write_text("".join(f"{url}\n" for url in listed))
        ceiling = concurrency / latency_ms * 1000 if latency_ms else None
        print(
            f"\n== {_title(latency_ms)}, stores on {scratch_parent} ({filesystem}): {urls:,} "
            f"URLs, {concurrency} requests in flight for every contender (scrapeflow: "
            f"CONCURRENT_FETCHES={concurrency} x 1 CPU, {concurrency // CPUS} x {CPUS} CPUs)"
            + (f"; at most {ceiling:,.0f} pages/s" if ceiling else "")
            + " ==",
            flush=True,
        )
        runs: list[dict[str, Any]] = []
        for number in range(repeat):
            shift = number % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                if contender == "scrapy" and number >= args.scrapy_repeat:
                    continue
                row = run_one(
                    contender,
                    urls_file=urls_file,
                    urls=urls,
                    concurrency=concurrency,
                    scratch=part_dir,
                    server=server,
                    distinct=distinct,
                )
                row["repeat"] = number
                runs.append(row)
                print(
                    f"  {LABELS[contender]:<26} {row['pages_per_second']:>8,.0f} pages/s "
                    f"{row['seconds']:>7.2f} s  (CPU user {row['client_user_seconds']:.1f} s, "
                    f"sys {row['client_sys_seconds']:.1f} s)",
                    flush=True,
                )
        print(f"  removing {part_dir} ...", flush=True)
    summary = {}
    for contender in contenders:
        mine = [r for r in runs if r["contender"] == contender]
        summary[contender] = {
            key: round(median([r[key] for r in mine if r.get(key) is not None]), 3)
            for key in MEDIAN_KEYS
        }
        summary[contender]["runs"] = len(mine)
    return {
        "part": name,
        "site": "nginx, Python docs" if nginx else "sandbox PlainSite",
        "latency_ms": latency_ms,
        "concurrency": concurrency,
        "pages_per_second_ceiling": ceiling,
        "urls": urls,
        "scratch": str(scratch_parent),
        "filesystem": filesystem,
        "runs": runs,
        "median": summary,
        "ratios": ratios(summary),
    }


MEDIAN_KEYS = (
    "pages_per_second",
    "seconds",
    "in_run_pages_per_second",
    "peak_rss_mb",
    "client_user_seconds",
    "client_sys_seconds",
    "client_cpu_share",
    "server_cpu_share",
    "cpu_ms_per_page",
)


def _title(latency_ms: float) -> str:
    return "no added latency" if not latency_ms else f"{latency_ms:g} ms per response"


def ratios(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    """scrapeflow's figures over the other contenders' (those of them that ran)."""
    result = {}
    mine = [f"scrapeflow-{cpus}cpu" for cpus in dict.fromkeys((1, CPUS))]
    for prefix, key in (("", "pages_per_second"), ("in_run_", "in_run_pages_per_second")):
        for other in ("gofetch", "bare", "scrapy"):
            for contender in mine:
                if other in summary and contender in summary:
                    name = contender.replace("-", "_")
                    result[f"{prefix}{name}_over_{other}"] = round(
                        summary[contender][key] / summary[other][key], 3
                    )
    if "scrapeflow-1cpu" in summary:
        for other in ("gofetch", "bare"):
            if other in summary:
                result[f"cpu_per_page_1cpu_over_{other}"] = round(
                    summary["scrapeflow-1cpu"]["cpu_ms_per_page"]
                    / summary[other]["cpu_ms_per_page"],
                    3,
                )
    if CPUS > 1 and {"scrapeflow-1cpu", f"scrapeflow-{CPUS}cpu"} <= set(summary):
        result[f"scrapeflow_{CPUS}cpu_over_1cpu"] = round(
            summary[f"scrapeflow-{CPUS}cpu"]["pages_per_second"]
            / summary["scrapeflow-1cpu"]["pages_per_second"],
            3,
        )
    return result


def print_part(part: dict[str, Any]) -> None:
    print(
        f"\n{_title(part['latency_ms'])}, {part['filesystem']} ({part['urls']:,} URLs, "
        f"{part['concurrency']} in flight; medians of the runs shown in 'n'):"
    )
    header = (
        f"  {'contender':<26} {'n':>2} {'pages/s':>8} {'seconds':>8} {'in-run p/s':>10} "
        f"{'peak RSS MB':>11} {'CPU user/sys s':>14} {'server CPU':>10}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for contender, row in part["median"].items():
        cpu = f"{row['client_user_seconds']:.1f}/{row['client_sys_seconds']:.1f}"
        print(
            f"  {LABELS[contender]:<26} {row['runs']:>2} {row['pages_per_second']:>8,.0f} "
            f"{row['seconds']:>8.2f} {row['in_run_pages_per_second']:>10,.0f} "
            f"{row['peak_rss_mb']:>11.1f} {cpu:>14} {row['server_cpu_share']:>10.0%}"
        )
    r = part["ratios"]
    verdict = {True: "MET", False: "NOT MET"}
    if "scrapeflow_1cpu_over_gofetch" in r:
        wall, cpu = r["scrapeflow_1cpu_over_gofetch"], r["cpu_per_page_1cpu_over_gofetch"]
        print(
            f"  scrapeflow (1 CPU) / gofetch-layout loop: pages/s {wall:.2f} (goal >= "
            f"{GOFETCH_GOAL}: {verdict[wall >= GOFETCH_GOAL]}; in-run "
            f"{r['in_run_scrapeflow_1cpu_over_gofetch']:.2f}), CPU {cpu:.2f}x (goal <= "
            f"{GOFETCH_CPU_GOAL}: {verdict[cpu <= GOFETCH_CPU_GOAL]})"
        )
    for cpus in dict.fromkeys((1, CPUS)):
        key = f"scrapeflow_{cpus}cpu_over_bare"
        if key not in r:
            continue
        goal = f"goal >= {BARE_GOAL}: {verdict[r[key] >= BARE_GOAL]}; " if cpus == 1 else ""
        print(
            f"  scrapeflow ({_cpus(cpus)}) / bare aiohttp: {r[key]:.2f} "
            f"({goal}in-run {r['in_run_' + key]:.2f})"
        )
    if "cpu_per_page_1cpu_over_bare" in r:
        cpu = r["cpu_per_page_1cpu_over_bare"]
        print(
            f"  CPU per page, scrapeflow (1 CPU) / bare aiohttp: {cpu:.2f} "
            f"(goal <= {CPU_GOAL}: {verdict[cpu <= CPU_GOAL]})"
        )
    if f"scrapeflow_{CPUS}cpu_over_1cpu" in r:
        scale = r[f"scrapeflow_{CPUS}cpu_over_1cpu"]
        print(
            f"  scrapeflow {_cpus(CPUS)} / 1 CPU: {scale:.2f}x "
            f"(goal >= {SCALE_GOAL}: {verdict[scale >= SCALE_GOAL]})"
        )
    if "scrapy" not in part["median"]:
        return
    for cpus in dict.fromkeys((1, CPUS)):
        key = f"scrapeflow_{cpus}cpu_over_scrapy"
        if key not in r:
            continue
        print(
            f"  scrapeflow ({_cpus(cpus)}) / Scrapy: {r[key]:.2f}x "
            f"(goal >= {SCRAPY_GOAL:g}x: {verdict[r[key] >= SCRAPY_GOAL]}; "
            f"in-run {r['in_run_' + key]:.2f}x)"
        )
    ceiling = part["pages_per_second_ceiling"]
    if ceiling:
        most = ceiling / part["median"]["scrapy"]["pages_per_second"]
        print(
            f"  (at {part['latency_ms']:g} ms and {part['concurrency']} in flight no client "
            f"passes {ceiling:,.0f} pages/s: {most:.1f}x Scrapy is the most any could show)"
        )


def _cpus(cpus: int) -> str:
    return f"{cpus} CPU" + ("s" if cpus > 1 else "")


def minute_check(part: dict[str, Any]) -> dict[str, Any]:
    """At the latency part's measured rates: would 22,000 URLs take under a minute?"""
    checks: dict[str, Any] = {"urls": MINUTE_URLS, "extrapolated": part["urls"] < MINUTE_URLS}
    for contender, row in part["median"].items():
        seconds = MINUTE_URLS / row["pages_per_second"]
        checks[contender] = {"seconds": round(seconds, 1), "under_a_minute": seconds < 60}
    return checks


def print_minute(check: dict[str, Any], part: dict[str, Any]) -> None:
    how = (
        f"EXTRAPOLATED from the {part['urls']:,}-URL runs' rates, process wall time"
        if check["extrapolated"]
        else "measured"
    )
    print(
        f"\n{MINUTE_URLS:,} URLs at {part['latency_ms']:g} ms per response, "
        f"{part['concurrency']} in flight ({how}):"
    )
    for contender in part["median"]:
        row = check[contender]
        print(
            f"  {LABELS[contender]:<26} {row['seconds']:>6.1f} s -> under a minute: "
            f"{'yes' if row['under_a_minute'] else 'NO'}"
        )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--urls", type=int, default=20_000, help="distinct URLs in the list")
    parser.add_argument("--concurrency", type=int, default=50, help="in flight, no latency")
    parser.add_argument(
        "--latency-concurrency", type=int, default=100, help="in flight, with latency"
    )
    parser.add_argument("--latency-ms", type=float, default=100.0, help="the server's delay")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender, no latency")
    parser.add_argument(
        "--latency-repeat", type=int, default=2, help="runs per contender, with latency"
    )
    parser.add_argument(
        "--scrapy-repeat", type=int, default=1, help="Scrapy's runs per part (at most the above)"
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the stores go (a local disk; removed after each part)",
    )
    parser.add_argument(
        "--tmpfs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also the no-latency part without Scrapy with the stores on {TMPFS} (tmpfs), "
        "where the disk's noise is gone",
    )
    parser.add_argument(
        "--site",
        choices=["nginx", "sandbox"],
        default="nginx" if NginxServer.available() else "sandbox",
        help=f"no-latency parts: nginx serving the Python docs ({DOCS_ROOT}, Debian's "
        "python3-doc; apt-get install nginx-light python3-doc) or the sandbox site",
    )
    parser.add_argument(
        "--no-latency-only",
        action="store_true",
        help="only the no-latency part on --scratch (a quick look at the CPU figures)",
    )
    parser.add_argument(
        "--no-scrapy", action="store_true", help="leave Scrapy out (it is the slowest by far)"
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(CONTENDERS),
        help=f"the contenders to run, comma-separated (of {','.join(CONTENDERS)})",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    # A bare-loop client process:
    parser.add_argument("--client", choices=["bare", "gofetch"], help=argparse.SUPPRESS)
    parser.add_argument("--urls-file", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("concurrency", "latency_concurrency"):
        if getattr(args, name) % CPUS:
            parser.error(f"--{name.replace('_', '-')} must be a multiple of the {CPUS} CPUs")
    unknown = sorted(set(args.only) - set(CONTENDERS))
    if unknown or not args.only:
        parser.error(f"--only: unknown contenders {unknown}; known: {', '.join(CONTENDERS)}")
    if min(args.repeat, args.latency_repeat, args.scrapy_repeat) < 1:
        parser.error("repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.client:
        _bare_main(args)
        return
    started = time.monotonic()
    machine = machine_info()
    print(
        f"scrapeflow fetch bench, {machine['date']}: {machine['nproc']} cores "
        f"({machine['cpu']}), Python {machine['python']}, aiohttp {machine['aiohttp']}, "
        f"commit {machine['git_commit'] or '?'}",
        flush=True,
    )
    scrapy = {"scrapy": "not run", "venv_made": False, "setup_seconds": 0.0}
    if not args.no_scrapy and "scrapy" in args.only:
        scrapy = ensure_scrapy_venv()
    scratch = args.scratch.resolve()
    print(
        f"Scrapy {scrapy['scrapy']} in {SCRAPY_VENV.relative_to(REPO)}: asyncio reactor "
        "(AsyncioSelectorReactor); CONCURRENT_REQUESTS = CONCURRENT_REQUESTS_PER_DOMAIN = the "
        "concurrency; DOWNLOAD_DELAY 0; robots.txt, cookies, retries, telnet console off; "
        "LOG_LEVEL WARNING\n"
        "scrapeflow: `python -m scrapeflow fetch URLS --store DIR` with FETCH_ID, MAX_CPUS and "
        "CONCURRENT_FETCHES (= concurrency / MAX_CPUS), the rest default: 4 writers per "
        "process, indexes sha384_checksum and url_sha384, fetch log, no WARC\n"
        "gofetch-layout loop: aiohttp, each body once per SHA-384, a line appended to the "
        "checksum's index file, a JSON line per URL in the run's log; bare loop: the bodies only; "
        "each run's directory removed when it ends\n"
        f"server: {'nginx serving the Python docs (no latency), ' if args.site == 'nginx' else ''}"
        "the sandbox PlainSite in its own process, pages rendered ahead, latency added by "
        "the server\n"
        "seconds: process wall time, start to exit; in-run: the contender's own timer; peak "
        "RSS: sum over the contender's processes; CPU: all the contender's processes",
        flush=True,
    )
    results: dict[str, Any] = {
        "bench": "fetch",
        "machine": machine,
        "options": {
            name: str(value) if isinstance(value, Path) else value
            for name, value in vars(args).items()
            if name not in {"client", "urls_file", "dir"}
        },
        "scrapy": {
            **scrapy,
            "setup_seconds": round(scrapy["setup_seconds"], 1),
            "reactor": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
            "settings": "CONCURRENT_REQUESTS and CONCURRENT_REQUESTS_PER_DOMAIN = concurrency, "
            "DOWNLOAD_DELAY 0, ROBOTSTXT_OBEY False, COOKIES_ENABLED False, RETRY_ENABLED "
            "False, TELNETCONSOLE_ENABLED False, LOG_LEVEL WARNING, requests dont_filter",
        },
        "scrapeflow": "CLI `python -m scrapeflow fetch URLS --store DIR`, env FETCH_ID=bench, "
        "MAX_CPUS, CONCURRENT_FETCHES = concurrency / MAX_CPUS, the other settings default "
        "(CONCURRENT_S3WRITERS 4, indexes sha384_checksum + url_sha384, fetch log, no WARC)",
        "gofetch": "a plain aiohttp loop (one session, the same concurrency) writing gofetch's own "
        "layout: each body once at sha384_content/<sha384>, a line appended to "
        "index/sha384_checksum/<sha384>, a JSON line per URL in the run's log",
    }
    contenders = tuple(
        c for c in CONTENDERS if c in args.only and not (args.no_scrapy and c == "scrapy")
    )
    parts = [
        run_part(
            "no-latency",
            latency_ms=0.0,
            concurrency=args.concurrency,
            contenders=contenders,
            repeat=args.repeat,
            args=args,
            scratch_parent=scratch,
        )
    ]
    if not args.no_latency_only:
        parts.append(
            run_part(
                "latency",
                latency_ms=args.latency_ms,
                concurrency=args.latency_concurrency,
                contenders=contenders,
                repeat=args.latency_repeat,
                args=args,
                scratch_parent=scratch,
            )
        )
    if (
        not args.no_latency_only
        and args.tmpfs
        and TMPFS.is_dir()
        and filesystem_of(scratch) != "tmpfs"
    ):
        parts.append(
            run_part(
                "no-latency-tmpfs",
                latency_ms=0.0,
                concurrency=args.concurrency,
                contenders=tuple(c for c in contenders if c != "scrapy"),
                repeat=args.repeat,
                args=args,
                scratch_parent=TMPFS,
            )
        )
    results["parts"] = parts
    if len(parts) > 1:
        results["minute"] = minute_check(parts[1])
    results["bench_seconds"] = round(time.monotonic() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.output.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(results, indent=2) + "\n")
    temporary.replace(args.output)
    print("\n== Results ==")
    for part in parts:
        print_part(part)
    if len(parts) > 1:
        print_minute(results["minute"], parts[1])
    print(f"\nwhole bench: {results['bench_seconds']:.0f} s; results in {_shown(args.output)}")


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
