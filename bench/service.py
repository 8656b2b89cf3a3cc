"""The service under load: ``scrapeflow serve`` refreshing 1,000 sandbox customers for 100 API
clients at once, who poll, stream and read while the refreshes run.

Method:

* the sandbox (seed 7, hostility ``realistic``, the banks' default latency of 80-250 ms an
  answer) runs in a process of its own. The service's launcher goes out through ``--proxies``
  tinyproxy exit IPs (default 8, 127.0.0.2-9), as a deployment's proxy rotation has it: the
  API bank's scraper paces itself at the bank's documented 10 requests/s per client IP, and
  from one exit IP that pace alone held a 1,000-customer run to about 7 refreshes/s whatever
  the service's speed. The sandbox's own enforcement of that limit is lifted
  (``--api-bank-limit`` keeps it);
* customers ``cust-N`` (no two-factor, none locked) are added to a fresh database — SQLite in a
  temporary directory, or a new PostgreSQL database that is dropped afterwards — with their
  sandbox credentials: by default one access each, the banks taken in turn (``--banks all``
  gives each customer an access at every bank: four times the scraping for the same API
  load, which this service cannot finish in a bounded run on 2 cores: see ``--quick`` first);
* the real ``scrapeflow serve`` runs as a subprocess on port 0 (``SCRAPEFLOW_SCHEDULE=off``,
  ``SCRAPEFLOW_REFRESH_CONCURRENCY`` = ``--job-concurrency``, default the number of clients, so
  a refresh never waits in the job queue behind the others: each client has at most one refresh
  running, and the time to balances is then the service's own, not a queue's; the one API key,
  a UI backend's, may hold a stream per client: ``SCRAPEFLOW_MAX_STREAMS_PER_KEY``);
* the API clients run in ``--client-processes`` processes (default 1) of asyncio + aiohttp.
  Each client takes the next customer and: opens its event stream
  (``GET /v1/customers/{id}/events``), ``POST …/refresh``, polls ``GET …/status`` every
  ``--poll`` seconds and, once the stream has shown its balances, ``GET …/accounts`` at each
  poll; when ``status`` says ``all_updated`` it reads the accounts and every page of
  ``GET …/movements``, closes the stream and takes the next customer;
* measured: latency of each API call (request sent to body read), p50/p95/p99 for the reads
  (status, accounts, movements) and for the ``POST …/refresh``; the time from sending the
  ``POST`` to receiving, on the stream, the first ``bank.accounts`` event of that refresh's job;
  refreshes completed (the job succeeded and ``status`` said ``all_updated``); errors (any
  answer but 2xx, a transport error, a refresh that failed or timed out, an access that did not
  end ``success``); peak RSS of the service process (its ``VmHWM``); the CPU seconds of the
  service, the sandbox and the clients over the run, and the whole machine's busy share.

The run is bounded (``--timeout``, default 15 minutes); on any failure, Ctrl-C or SIGTERM the
processes it started are stopped (and they stop by themselves should this one die) and its
databases and files removed.

    .venv/bin/python bench/service.py                   # 1,000 customers, 100 clients, SQLite
    .venv/bin/python bench/service.py --db postgres     # PostgreSQL at 127.0.0.1:5432
    .venv/bin/python bench/service.py --quick           # 60 customers, 20 clients

Results go to ``bench/results/service.json``. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _loopback import (
    REPO,
    child_pids,
    cpu_seconds_of,
    cpu_seconds_self,
    machine_info,
    peak_rss_mb,
)
from banking import tinyproxies

BANKS = ("formbank", "apibank", "legacybank", "neobank")
SEED = 7
RESULTS = Path(__file__).resolve().parent / "results" / "service.json"


def results_file(args: argparse.Namespace) -> Path:
    """``service.json`` for SQLite, ``service-postgres.json`` for PostgreSQL: each its own."""
    return RESULTS if args.db == "sqlite" else RESULTS.with_name("service-postgres.json")


PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
GOALS = {
    "read_p95": 0.100,
    "balance_event_p95": 3.0,
    "refresh_total_p95": 10.0,
    "refreshes_per_second": 10.0,
    "machine_busy": 0.85,
    "cpu_per_read_ms": 1.5,
}
READ_COST_REQUESTS = 3000
"""Requests per endpoint of the read-cost part (after the run, the service otherwise idle)."""
SEED_TARGET_BALANCES = 10.0
READS = ("status", "accounts", "movements")


# --- processes that die with this one --------------------------------------------------------


def _die_with_parent() -> None:
    """In a child, before exec: SIGTERM when this process dies (Linux ``PR_SET_PDEATHSIG``),
    so a bench killed outright leaves no service, sandbox or client behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def spawn(command: Sequence[str], **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(list(command), text=True, preexec_fn=_die_with_parent, **kwargs)


def stop(process: subprocess.Popen[str] | None, grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    if process is None:
        return
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def read_line(process: subprocess.Popen[str], timeout: float, what: str) -> str:
    """The first line of ``process``'s stdout, within ``timeout`` seconds."""
    if process.stdout is None:
        raise RuntimeError(f"no stdout pipe to {what}")
    ready = select.select([process.stdout], [], [], timeout)[0]
    line = process.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"{what} did not start within {timeout:g} s (exit {process.poll()})")
    return line.strip()


def vm_field(pid: int, name: str) -> float:
    """A ``/proc/<pid>/status`` memory field (``VmHWM``, ``VmRSS``) in MB; 0 when gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from ``/proc/stat``."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


# --- the sandbox process ---------------------------------------------------------------------


def sandbox_child(spec_json: str) -> None:
    spec = json.loads(spec_json)
    asyncio.run(_sandbox(spec))


async def _sandbox(spec: dict[str, Any]) -> None:
    from scrapeflow.sandbox import Sandbox, SandboxConfig

    config = SandboxConfig(seed=SEED, hostility=spec["hostility"], customers=spec["customers"])
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    # stdin closing (the bench exiting, even by a crash) stops the sandbox too.
    loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.buffer.read1() or done.set())
    async with Sandbox(config) as sandbox:
        if not spec["api_bank_limit"]:
            sandbox.sites["apibank"].client_rate_per_second = 0
        print(json.dumps(sandbox.manifest()), flush=True)
        await done.wait()


# --- the database and the customers ----------------------------------------------------------


def usable_customers(count: int) -> list[int]:
    """``count`` customer numbers without 2FA (n % 4 == 2) or a locked login (n % 97 == 13)."""
    found, n = [], 1
    while len(found) < count:
        if n % 4 != 2 and n % 97 != 13:
            found.append(n)
        n += 1
    return found


def banks_of(index: int, mode: str) -> tuple[str, ...]:
    return BANKS if mode == "all" else (BANKS[index % len(BANKS)],)


async def setup_database(
    db_url: str, manifest: dict[str, Any], numbers: Sequence[int], mode: str, vault_key: str
) -> str:
    """Migrate, add the customers and their accesses; an API key (read, refresh)."""
    from scrapeflow.banking import CredentialVault, add_access, add_customer, migrate
    from scrapeflow.db import create_engine, session_factory
    from scrapeflow.sandbox import SandboxAdmin
    from scrapeflow.server import create_key

    await migrate(db_url)
    wanted = [(bank, n) for i, n in enumerate(numbers) for bank in banks_of(i, mode)]
    logins: dict[tuple[str, int], Any] = {}
    limit = asyncio.Semaphore(32)
    async with SandboxAdmin.from_manifest(manifest) as admin:

        async def one(bank: str, n: int) -> None:
            async with limit:
                logins[bank, n] = await admin.customer(bank, n)

        await asyncio.gather(*(one(bank, n) for bank, n in wanted))
    vault = CredentialVault([vault_key])
    engine = create_engine(db_url)
    try:
        sessions = session_factory(engine)
        for i, n in enumerate(numbers):
            await add_customer(sessions, f"cust-{n}", f"Customer {n}")
            for bank in banks_of(i, mode):
                login = logins[bank, n]
                await add_access(
                    sessions, vault, f"cust-{n}", bank, login["username"], login["password"]
                )
        token, _ = await create_key(engine, scopes=["read", "refresh"], name="bench")
    finally:
        await engine.dispose()
    return token


async def _pg(statement: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(PG_ADMIN)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextlib.contextmanager
def database(kind: str, workdir: Path) -> Iterator[str]:
    """A new, empty database: a SQLite file in ``workdir`` or a PostgreSQL database, dropped
    on the way out whatever happened."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{workdir / 'service.db'}"
        return
    name = f"bench_service_{os.getpid()}"
    asyncio.run(_pg(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(_pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


# --- the API clients (a child process) -------------------------------------------------------


@dataclass
class ClientStats:
    latency: dict[str, list[float]] = field(default_factory=lambda: {})
    balance_event: list[float] = field(default_factory=list)
    balance_by_bank: dict[str, list[float]] = field(default_factory=lambda: {})
    refresh_total: list[float] = field(default_factory=list)
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    access_results: Counter[str] = field(default_factory=Counter)
    accounts: int = 0
    movements: int = 0
    events: int = 0

    def took(self, what: str, seconds: float) -> None:
        self.latency.setdefault(what, []).append(seconds)


class ApiError(Exception):
    pass


@dataclass
class Watch:
    """What one customer's event stream has shown, as it arrives."""

    job_id: str | None = None
    first_accounts: dict[str, float] = field(default_factory=dict)  # job id -> time seen
    final: dict[str, tuple[str, float]] = field(default_factory=dict)  # job id -> (kind, time)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


async def _call(
    http: Any, stats: ClientStats, what: str, method: str, path: str, ok: int = 200
) -> Any:
    import aiohttp

    started = time.monotonic()
    try:
        async with http.request(method, path) as response:
            body = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        stats.errors[f"{what}: {type(exc).__name__}"] += 1
        raise ApiError(what) from exc
    stats.took(what, time.monotonic() - started)
    if status != ok:
        stats.errors[f"{what}: HTTP {status}"] += 1
        raise ApiError(f"{what}: {status} {body[:200]!r}")
    return json.loads(body)


async def _read_stream(response: Any, watch: Watch, stats: ClientStats) -> None:
    kind, data = "", ""
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif not line and kind:
            now = time.monotonic()
            stats.events += 1
            job_id = json.loads(data).get("job_id") if data else None
            if job_id and kind == "bank.accounts":
                watch.first_accounts.setdefault(job_id, now)
            elif job_id and kind in ("job.succeeded", "job.failed", "job.cancelled"):
                watch.final[job_id] = (kind, now)
            watch.changed.set()
            kind, data = "", ""


async def _one_customer(http: Any, customer: str, spec: dict[str, Any], stats: ClientStats):
    import aiohttp

    base = f"/v1/customers/{customer}"
    watch = Watch()
    started = time.monotonic()
    try:
        stream = await http.get(
            f"{base}/events", timeout=aiohttp.ClientTimeout(total=None, sock_read=60)
        )
    except (aiohttp.ClientError, TimeoutError) as exc:
        stats.errors[f"events: {type(exc).__name__}"] += 1
        return
    stats.took("events_open", time.monotonic() - started)
    reader = None
    try:
        if stream.status != 200:
            stats.errors[f"events: HTTP {stream.status}"] += 1
            return
        reader = asyncio.create_task(_read_stream(stream, watch, stats))
        posted = time.monotonic()
        job = await _call(http, stats, "refresh", "POST", f"{base}/refresh", ok=202)
        job_id = watch.job_id = job["id"]
        deadline = posted + spec["refresh_timeout"]
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), spec["poll"])
            if reader.done():
                stats.errors["events: stream ended"] += 1
                return
            status = await _call(http, stats, "status", "GET", f"{base}/status")
            if job_id in watch.first_accounts:
                await _call(http, stats, "accounts", "GET", f"{base}/accounts")
            if status["all_updated"] and status["refresh_job"] is None:
                break
            if time.monotonic() > deadline:
                stats.errors["refresh: not all_updated before the timeout"] += 1
                return
        final = watch.final.get(job_id)
        if final is None:  # status may say it a moment before the stream does
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    while job_id not in watch.final:
                        watch.changed.clear()
                        await watch.changed.wait()
            final = watch.final.get(job_id)
        if final is None or final[0] != "job.succeeded":
            what = final[0] if final else "final job event not streamed 10 s after all_updated"
            stats.errors[f"refresh: {what}"] += 1
            return
        if job_id in watch.first_accounts:
            balance = watch.first_accounts[job_id] - posted
            stats.balance_event.append(balance)
            banks = {access["bank"] for access in status["accesses"]}
            bank = banks.pop() if len(banks) == 1 else "several banks"
            stats.balance_by_bank.setdefault(bank, []).append(balance)
        else:
            stats.errors["refresh: no bank.accounts event"] += 1
        stats.refresh_total.append(final[1] - posted)
        stats.completed += 1
        for access in status["accesses"]:
            stats.access_results[f"{access['bank']}: {access['result']}"] += 1
            if access["result"] != "success":
                stats.errors[f"access {access['bank']}: {access['result']}"] += 1
        stats.accounts += len(await _call(http, stats, "accounts", "GET", f"{base}/accounts"))
        cursor = None
        while True:
            query = "?limit=200" + (f"&cursor={cursor}" if cursor else "")
            page = await _call(http, stats, "movements", "GET", f"{base}/movements{query}")
            stats.movements += len(page["movements"])
            cursor = page["next_cursor"]
            if not cursor:
                break
    except ApiError:
        return
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        stream.close()


async def _clients(spec: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    stats = ClientStats()
    queue: asyncio.Queue[str] = asyncio.Queue()
    for customer in spec["customers"]:
        queue.put_nowait(customer)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    headers = {"Authorization": f"Bearer {spec['key']}"}
    timeout = aiohttp.ClientTimeout(total=spec["request_timeout"])
    cpu_before = cpu_seconds_self()
    started = time.time()
    async with aiohttp.ClientSession(
        spec["url"], connector=connector, headers=headers, timeout=timeout
    ) as http:

        async def client() -> None:
            while not queue.empty():
                await _one_customer(http, queue.get_nowait(), spec, stats)

        try:
            async with asyncio.timeout(spec["deadline"]):
                await asyncio.gather(*(client() for _ in range(spec["clients"])))
        except TimeoutError:
            stats.errors["bench deadline reached"] += 1
    return {
        "started": started,
        "ended": time.time(),
        "cpu_seconds": round(cpu_seconds_self() - cpu_before, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "latency": stats.latency,
        "balance_event": stats.balance_event,
        "balance_by_bank": stats.balance_by_bank,
        "refresh_total": stats.refresh_total,
        "completed": stats.completed,
        "errors": dict(stats.errors),
        "access_results": dict(stats.access_results),
        "accounts": stats.accounts,
        "movements": stats.movements,
        "events": stats.events,
        "not_started": queue.qsize(),
    }


def clients_child() -> None:
    spec = json.loads(sys.stdin.readline())
    print(json.dumps(asyncio.run(_clients(spec))), flush=True)


# --- figures ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank: the smallest value with ``q`` of them at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def spread(values: Sequence[float], scale: float = 1.0) -> dict[str, Any]:
    def at(q: float) -> float | None:
        found = percentile(values, q)
        return None if found is None else round(found * scale, 3)

    return {"count": len(values), "p50": at(0.5), "p95": at(0.95), "p99": at(0.99)}


def merge(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    latency: dict[str, list[float]] = {}
    errors: Counter[str] = Counter()
    results: Counter[str] = Counter()
    for part in parts:
        for what, values in part["latency"].items():
            latency.setdefault(what, []).extend(values)
        errors.update(part["errors"])
        results.update(part["access_results"])
    total = lambda key: sum(p[key] for p in parts)  # noqa: E731
    return {
        "latency": latency,
        "balance_event": [v for p in parts for v in p["balance_event"]],
        "balance_by_bank": {
            bank: [v for p in parts for v in p["balance_by_bank"].get(bank, [])]
            for bank in sorted({bank for p in parts for bank in p["balance_by_bank"]})
        },
        "refresh_total": [v for p in parts for v in p["refresh_total"]],
        "completed": total("completed"),
        "not_started": total("not_started"),
        "errors": dict(errors),
        "access_results": dict(results),
        "accounts": total("accounts"),
        "movements": total("movements"),
        "events": total("events"),
        "started": min(p["started"] for p in parts),
        "ended": max(p["ended"] for p in parts),
        "cpu_seconds": round(total("cpu_seconds"), 2),
        "peak_rss_mb": max(p["peak_rss_mb"] for p in parts),
    }


def ratio(value: float | None, goal: float) -> float | None:
    if value is None:
        return None
    return round(value / goal, 3) if goal else (0.0 if value == 0 else math.inf)


# --- the run ---------------------------------------------------------------------------------


def tree(pid: int) -> list[int]:
    """``pid`` and its children: ``serve --processes N`` is a supervisor and N processes."""
    import psutil

    return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]


def tree_cpu(pids: Sequence[int]) -> float:
    return sum(cpu_seconds_of(pid) for pid in pids)


def tree_field(pids: Sequence[int], name: str) -> float:
    return sum(vm_field(pid, name) for pid in pids)


class Monitor(threading.Thread):
    """Samples the service's RSS every 0.2 s (``VmHWM`` is the figure; this is a check)."""

    def __init__(self, pids: Sequence[int]) -> None:
        super().__init__(daemon=True)
        self.pids = list(pids)
        self.sampled_peak = 0.0
        self._halted = threading.Event()

    def run(self) -> None:
        while not self._halted.wait(0.2):
            self.sampled_peak = max(self.sampled_peak, tree_field(self.pids, "VmRSS"))

    def halt(self) -> None:
        self._halted.set()
        self.join(2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from scrapeflow.banking import CredentialVault

    started = time.monotonic()
    deadline = started + args.timeout
    numbers = usable_customers(args.customers)
    processes: list[subprocess.Popen[str]] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-service-"))
    exits = contextlib.ExitStack()
    try:
        proxy_env = {}
        if args.proxies:
            # The launcher's exit IPs, as a deployment's proxy rotation gives it: a bank's own
            # limit per client IP (the API bank declares 10 requests/s) is per exit IP.
            urls = exits.enter_context(tinyproxies(args.proxies, 256))
            (workdir / "proxies.txt").write_text("".join(f"{url}\n" for url in urls))
            proxy_env = {"SCRAPEFLOW_PROXIES": str(workdir / "proxies.txt")}
        proxy_pids = child_pids("tinyproxy")
        sandbox = spawn(
            [
                sys.executable,
                __file__,
                "--sandbox-child",
                json.dumps(
                    {
                        "hostility": args.hostility,
                        "customers": max(10_000, numbers[-1]),
                        "api_bank_limit": args.api_bank_limit,
                    }
                ),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        processes.append(sandbox)
        manifest = json.loads(read_line(sandbox, 60, "the sandbox"))
        manifest_path = workdir / "sandbox.json"
        manifest_path.write_text(json.dumps(manifest))
        vault_key = CredentialVault.generate_key()
        with database(args.db, workdir) as db_url:
            print(f"setting up {len(numbers)} customers ({args.banks} banks) on {args.db} ...")
            setup_started = time.monotonic()
            key = asyncio.run(setup_database(db_url, manifest, numbers, args.banks, vault_key))
            setup_seconds = time.monotonic() - setup_started
            env = {
                **os.environ,
                "SCRAPEFLOW_DB_URL": db_url,
                "SCRAPEFLOW_VAULT_KEYS": vault_key,
                "SCRAPEFLOW_SANDBOX_MANIFEST": str(manifest_path),
                "SCRAPEFLOW_LOG_DIR": str(workdir / "logs"),
                "SCRAPEFLOW_JOBS_DIR": str(workdir / "jobs"),
                "SCRAPEFLOW_SCHEDULE": "off",
                "SCRAPEFLOW_JOB_CONCURRENCY": str(args.job_concurrency),
                "SCRAPEFLOW_REFRESH_CONCURRENCY": str(args.job_concurrency),
                # One key, the UI backend's, streams for every client at once.
                "SCRAPEFLOW_MAX_STREAMS_PER_KEY": str(max(20, args.clients)),
                "SCRAPEFLOW_OVERALL": str(args.overall),
                "SCRAPEFLOW_PER_BANK": str(args.per_bank),
                "PYTHONUNBUFFERED": "1",
                **proxy_env,
            }
            with open(workdir / "service.stderr", "w") as service_log:
                service = spawn(
                    [
                        *(sys.executable, "-m", "scrapeflow", "serve", "--port", "0"),
                        *("--processes", str(args.processes)),
                    ],
                    env=env,
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=service_log,
                )
                processes.append(service)
                try:
                    url = read_line(service, 120, "the service").split()[-1]
                except RuntimeError:
                    stop(service)
                    raise RuntimeError(
                        "the service did not start:\n" + _tail(workdir / "service.stderr")
                    ) from None
                pids = tree(service.pid)
                monitor = Monitor(pids)
                monitor.start()
                rss_idle = tree_field(pids, "VmRSS")
                print(
                    f"service at {url} (RSS {rss_idle:.0f} MB); {args.clients} clients in "
                    f"{args.client_processes} process(es) ...",
                    flush=True,
                )
                cpu = {
                    "service": tree_cpu(pids),
                    "sandbox": cpu_seconds_of(sandbox.pid),
                    "proxies": sum(cpu_seconds_of(pid) for pid in proxy_pids),
                }
                busy_before = machine_busy()
                children = []
                for i in range(args.client_processes):
                    spec = {
                        "url": url,
                        "key": key,
                        "customers": [f"cust-{n}" for n in numbers[i :: args.client_processes]],
                        "clients": len(range(i, args.clients, args.client_processes)),
                        "poll": args.poll,
                        "refresh_timeout": args.refresh_timeout,
                        "request_timeout": 30.0,
                        "deadline": max(30.0, deadline - time.monotonic() - 30),
                    }
                    # The spec (with the API key) goes through stdin, never the argument list.
                    child = spawn(
                        [sys.executable, __file__, "--clients-child"],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                    )
                    processes.append(child)
                    children.append(child)
                    assert child.stdin is not None
                    child.stdin.write(json.dumps(spec) + "\n")
                    child.stdin.close()
                    child.stdin = None  # sent: communicate() below only reads
                parts = []
                for child in children:
                    remaining = max(5.0, deadline - time.monotonic())
                    out, err = child.communicate(timeout=remaining)
                    lines = out.strip().splitlines()
                    if child.returncode != 0 or not lines:
                        raise RuntimeError(f"a client process failed:\n{err[-4000:]}")
                    parts.append(json.loads(lines[-1]))
                busy_after = machine_busy()
                cpu = {
                    "service": tree_cpu(pids) - cpu["service"],
                    "sandbox": cpu_seconds_of(sandbox.pid) - cpu["sandbox"],
                    "proxies": sum(cpu_seconds_of(pid) for pid in proxy_pids) - cpu["proxies"],
                }
                peak = tree_field(pids, "VmHWM")
                print("the read cost, the service otherwise idle ...", flush=True)
                served = [f"cust-{n}" for n in numbers]
                read_cost = asyncio.run(measure_read_cost(url, key, served, pids))
                monitor.halt()
                stop(service)
                service_errors = _tail(workdir / "service.stderr", 3000)
    finally:
        for process in reversed(processes):
            stop(process)
        exits.close()
        shutil.rmtree(workdir, ignore_errors=True)

    merged = merge(parts)
    window = merged["ended"] - merged["started"]
    busy = (busy_after[0] - busy_before[0]) / max(1, busy_after[1] - busy_before[1])
    return {
        "setup_seconds": round(setup_seconds, 1),
        "run_seconds": round(window, 1),
        "merged": merged,
        "cpu": {
            "service_seconds": round(cpu["service"], 1),
            "service_share": round(cpu["service"] / window, 2),
            "sandbox_seconds": round(cpu["sandbox"], 1),
            "sandbox_share": round(cpu["sandbox"] / window, 2),
            "proxies_seconds": round(cpu["proxies"], 1),
            "proxies_share": round(cpu["proxies"] / window, 2),
            "clients_seconds": merged["cpu_seconds"],
            "clients_share": round(merged["cpu_seconds"] / window, 2),
            "machine_busy_share": round(busy, 2),
        },
        "service_rss": {
            "idle_mb": round(rss_idle, 1),
            "peak_mb": round(peak, 1),
            "sampled_peak_mb": round(monitor.sampled_peak, 1),
        },
        "service_stderr_tail": service_errors,
        "read_cost": read_cost,
        "processes": len(pids) - 1 if len(pids) > 1 else 1,
    }


READ_PATHS = {
    "status": "/v1/customers/{}/status",
    "accounts": "/v1/customers/{}/accounts",
    "movements": "/v1/customers/{}/movements",
}
"""What a UI reads most, as it reads it (a movements page: the default 200)."""


async def measure_read_cost(
    url: str, key: str, customers: Sequence[str], pids: Sequence[int]
) -> dict[str, Any]:
    """Service CPU per read of each kind: :data:`READ_COST_REQUESTS` by 20 clients, the
    service's CPU over them divided by their number (the customers' data in place)."""
    import aiohttp

    cost: dict[str, Any] = {}
    async with aiohttp.ClientSession(url, headers={"Authorization": f"Bearer {key}"}) as http:
        for what, path in READ_PATHS.items():
            sent = 0

            async def reader(count: int, what: str = what, path: str = path) -> None:
                nonlocal sent
                while sent < count:
                    sent += 1
                    async with http.get(path.format(customers[sent % len(customers)])) as answer:
                        body = await answer.read()
                        if answer.status != 200:
                            raise RuntimeError(f"{what}: HTTP {answer.status} {body[:300]!r}")

            await asyncio.gather(*(reader(300) for _ in range(20)))  # warm: caches, statements
            sent = 0
            before, started = tree_cpu(pids), time.monotonic()
            await asyncio.gather(*(reader(READ_COST_REQUESTS) for _ in range(20)))
            seconds, used = time.monotonic() - started, tree_cpu(pids) - before
            cost[what] = {
                "cpu_ms_per_read": round(used / sent * 1000, 3),
                "reads_per_second": round(sent / seconds),
            }
    return cost


def _tail(path: Path, size: int = 2000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-size:]
    return ""


def summarize(args: argparse.Namespace, raw: dict[str, Any]) -> dict[str, Any]:
    m = raw["merged"]
    lat = m["latency"]
    reads = [v for what in READS for v in lat.get(what, [])]
    customers = args.customers
    errors = sum(m["errors"].values())
    figures = {
        "read_ms": spread(reads, 1000),
        "read_ms_by_endpoint": {what: spread(lat.get(what, []), 1000) for what in READS},
        "refresh_post_ms": spread(lat.get("refresh", []), 1000),
        "events_open_ms": spread(lat.get("events_open", []), 1000),
        "balance_event_s": spread(m["balance_event"]),
        "balance_event_s_by_bank": {
            bank: spread(values) for bank, values in m["balance_by_bank"].items()
        },
        "refresh_total_s": spread(m["refresh_total"]),
        "refreshes_completed": m["completed"],
        "errors": errors,
        "errors_by_kind": m["errors"],
        "access_results": m["access_results"],
        "service_peak_rss_mb": raw["service_rss"]["peak_mb"],
        "requests": sum(len(v) for v in lat.values()),
        "requests_per_second": round(sum(len(v) for v in lat.values()) / raw["run_seconds"], 1),
        "refreshes_per_second": round(m["completed"] / raw["run_seconds"], 2),
        "accounts_read": m["accounts"],
        "movements_read": m["movements"],
        "events_received": m["events"],
        "service_processes": raw["processes"],
        "service_cpu_ms_per_read": raw["read_cost"],
        "service_cpu_ms_per_refresh_all_in": round(
            raw["cpu"]["service_seconds"] / max(1, m["completed"]) * 1000, 1
        ),
        "machine_busy_share": raw["cpu"]["machine_busy_share"],
    }
    p95 = lambda key: (figures[key]["p95"] or 0) / (1000 if key.endswith("_ms") else 1)  # noqa: E731
    figures["vs_goal"] = {
        "read_p95": ratio(p95("read_ms"), GOALS["read_p95"]),
        "balance_event_p95": ratio(p95("balance_event_s"), GOALS["balance_event_p95"]),
        "balance_event_p95_vs_seed": ratio(p95("balance_event_s"), SEED_TARGET_BALANCES),
        "refresh_total_p95": ratio(p95("refresh_total_s"), GOALS["refresh_total_p95"]),
        "refreshes_completed": ratio(m["completed"], customers),
        "refreshes_per_second": ratio(
            figures["refreshes_per_second"], GOALS["refreshes_per_second"]
        ),
        "machine_busy": ratio(raw["cpu"]["machine_busy_share"], GOALS["machine_busy"]),
        "cpu_per_read": {
            what: ratio(cost["cpu_ms_per_read"], GOALS["cpu_per_read_ms"])
            for what, cost in raw["read_cost"].items()
        },
    }
    return {
        "bench": "service",
        "machine": machine_info(),
        "settings": {
            "customers": customers,
            "banks": args.banks,
            "accesses": customers * (3 if args.banks == "all" else 1),
            "clients": args.clients,
            "client_processes": args.client_processes,
            "db": args.db,
            "exit_ips": args.proxies,
            "processes": args.processes or "one per core (the default)",
            "job_concurrency": args.job_concurrency,
            "overall": args.overall,
            "per_bank": args.per_bank,
            "poll_seconds": args.poll,
            "refresh_timeout_seconds": args.refresh_timeout,
            "sandbox": {
                "seed": SEED,
                "hostility": args.hostility,
                "latency_ms": "bank defaults (80-250)",
                "api_bank_rate_limit": "10/s per IP" if args.api_bank_limit else "off",
            },
            "schedule": "off",
        },
        "goals": {
            "read_p95_ms": GOALS["read_p95"] * 1000,
            "balance_event_p95_s": GOALS["balance_event_p95"],
            "refresh_total_p95_s": GOALS["refresh_total_p95"],
            "refreshes_per_second": GOALS["refreshes_per_second"],
            "machine_busy_share": GOALS["machine_busy"],
            "service_cpu_ms_per_read": GOALS["cpu_per_read_ms"],
            "seed_balances_s": SEED_TARGET_BALANCES,
            "refreshes_completed": customers,
            "errors": 0,
        },
        "results": figures,
        "run": {
            "setup_seconds": raw["setup_seconds"],
            "run_seconds": raw["run_seconds"],
            "cpu": raw["cpu"],
            "service_rss": raw["service_rss"],
            "clients_peak_rss_mb": m["peak_rss_mb"],
            "refreshes_not_started": m["not_started"],
        },
        "results_file": str(results_file(args).relative_to(REPO)),
    }


def fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.3g}{unit}" if value < 10 else f"{value:,.0f}{unit}"


def print_table(out: dict[str, Any]) -> None:
    s, r, run_ = out["settings"], out["results"], out["run"]
    print(
        f"\n{s['customers']} customers ({s['accesses']} accesses, banks: {s['banks']}), "
        f"{s['clients']} clients, db {s['db']}, job concurrency {s['job_concurrency']}; "
        f"run {run_['run_seconds']} s (setup {run_['setup_seconds']} s)"
    )
    print(f"  {'figure':34}{'p50':>10}{'p95':>10}{'p99':>10}{'goal':>14}{'ratio':>8}")
    rows = [
        (
            "API reads (status/accounts/movements)",
            r["read_ms"],
            " ms",
            "p95 < 100 ms",
            r["vs_goal"]["read_p95"],
        ),
        ("POST refresh", r["refresh_post_ms"], " ms", "", None),
        (
            "POST refresh -> first balance (SSE)",
            r["balance_event_s"],
            " s",
            "p95 < 3 s",
            r["vs_goal"]["balance_event_p95"],
        ),
        (
            "  (seed's target for balances)",
            r["balance_event_s"],
            " s",
            "10 s",
            r["vs_goal"]["balance_event_p95_vs_seed"],
        ),
        (
            "POST refresh -> all updated",
            r["refresh_total_s"],
            " s",
            "p95 < 10 s",
            r["vs_goal"]["refresh_total_p95"],
        ),
        ("open the event stream", r["events_open_ms"], " ms", "", None),
    ]
    for what, d in r["read_ms_by_endpoint"].items():
        rows.insert(1, (f"  GET {what} ({d['count']})", d, " ms", "", None))
    at = next(n for n, row in enumerate(rows) if row[0].startswith("  (seed's"))
    for bank, d in reversed(r["balance_event_s_by_bank"].items()):
        rows.insert(at, (f"  {bank} ({d['count']})", d, " s", "", None))
    for label, d, unit, goal, rat in rows:
        print(
            f"  {label:34}{fmt(d['p50'], unit):>10}{fmt(d['p95'], unit):>10}"
            f"{fmt(d['p99'], unit):>10}{goal:>14}{fmt(rat):>8}"
        )
    print(
        f"  {'refreshes completed':34}{r['refreshes_completed']:>30,}"
        f"{'all ' + str(s['customers']):>14}{fmt(r['vs_goal']['refreshes_completed']):>8}"
    )
    print(f"  {'errors':34}{r['errors']:>30,}{'none':>14}")
    print(f"  {'service peak RSS':34}{fmt(r['service_peak_rss_mb'], ' MB'):>30}")
    cpu = run_["cpu"]
    print(
        f"  CPU (share of one core over the run): service {cpu['service_share']}, sandbox "
        f"{cpu['sandbox_share']}, proxies {cpu['proxies_share']}, clients "
        f"{cpu['clients_share']}; machine busy "
        f"{cpu['machine_busy_share']:.0%} of its {out['machine']['nproc']} cores"
    )
    print(
        f"  {r['requests']:,} API requests ({r['requests_per_second']}/s), "
        f"{r['refreshes_per_second']} refreshes/s, {r['events_received']:,} events streamed, "
        f"{r['accounts_read']:,} accounts and {r['movements_read']:,} movements read"
    )
    print(
        f"  refreshes/s {r['refreshes_per_second']} (goal >= 10: "
        f"{fmt(r['vs_goal']['refreshes_per_second'])}); machine busy "
        f"{r['machine_busy_share']:.0%} (goal >= 85%); service processes "
        f"{r['service_processes']}"
    )
    reads = r["service_cpu_ms_per_read"]
    print(
        "  service CPU per read (goal <= 1.5 ms): "
        + ", ".join(
            f"{what} {cost['cpu_ms_per_read']} ms ({cost['reads_per_second']}/s)"
            for what, cost in reads.items()
        )
        + f"; per refresh, all in: {r['service_cpu_ms_per_refresh_all_in']} ms"
    )
    print(f"  access results: {r['access_results']}")
    for kind, count in sorted(r["errors_by_kind"].items(), key=lambda kv: -kv[1]):
        print(f"  ERROR x{count}: {kind}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--customers", type=int, help="customers (default 1000; quick 60)")
    parser.add_argument("--clients", type=int, help="concurrent API clients (default 100)")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="a small run: a smoke check")
    parser.add_argument(
        "--banks",
        choices=["one", "all"],
        default="one",
        help="one access per customer, the banks in turn (default), or one at every bank",
    )
    parser.add_argument("--job-concurrency", type=int, help="default: the number of clients")
    parser.add_argument("--overall", type=int, help="accesses at once (default: enough for all)")
    parser.add_argument("--per-bank", type=int, help="accesses at once per bank (default: same)")
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument(
        "--processes", type=int, default=0, help="serve --processes (default 0: one per core)"
    )
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between status polls")
    parser.add_argument("--refresh-timeout", type=float, default=300.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="the whole run's bound")
    parser.add_argument("--hostility", default="realistic", choices=["none", "realistic"])
    parser.add_argument(
        "--proxies",
        type=int,
        default=8,
        help="tinyproxy exit IPs the service's launcher goes out through (8; 0: none)",
    )
    parser.add_argument(
        "--api-bank-limit", action="store_true", help="keep the API bank's 10 req/s per IP"
    )
    parser.add_argument("--sandbox-child", help=argparse.SUPPRESS)
    parser.add_argument("--clients-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sandbox_child:
        sandbox_child(args.sandbox_child)
        return
    if args.clients_child:
        clients_child()
        return
    args.customers = args.customers or (60 if args.quick else 1000)
    args.clients = min(args.clients or (20 if args.quick else 100), args.customers)
    args.job_concurrency = args.job_concurrency or args.clients
    at_once = args.job_concurrency * (3 if args.banks == "all" else 1)
    args.overall = args.overall or max(200, at_once)
    args.per_bank = args.per_bank or max(50, args.overall)
    args.client_processes = max(1, min(args.client_processes, args.clients))

    # SIGTERM as Ctrl-C: the same clean-up (processes stopped, database dropped).
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    raw = run(args)
    out = summarize(args, raw)
    print_table(out)
    if raw["service_stderr_tail"].strip():
        print(f"  service stderr (tail):\n{raw['service_stderr_tail']}")
    where = results_file(args)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nresults in {out['results_file']}")


if __name__ == "__main__":
    main()
