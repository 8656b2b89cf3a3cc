"""The job backends on the same work: embedded vs 1 vs 2 ``scrapeflow worker`` processes.

Also a worker SIGKILLed mid-job, and a cursor feed walked as a chain of jobs. Every figure is a
ratio of two things measured in the same run, on the same machine.

Method:

* **the same work, three ways.** This process submits the jobs through the ``scrapeflow.jobs``
  queue API — ``EmbeddedJobQueue(SqlJobStore(url), kinds, run_jobs=False)`` or
  ``ProcrastinateJobQueue(url, kinds, run_jobs=False)`` — to a fresh PostgreSQL database
  (migrated as the service leaves it), and worker processes started beforehand (not timed)
  run them:

  - *embedded*: one process running ``EmbeddedJobQueue`` over ``SqlJobStore`` on that same
    PostgreSQL: this script with ``--embedded-worker``, which is ``scrapeflow worker``'s own
    loop with ``SCRAPEFLOW_JOBS_BACKEND=embedded`` (the job kinds of
    ``scrapeflow.server._work.job_kinds``, the same event log): only the backend differs;
  - *1 worker*, *2 workers*: ``scrapeflow worker`` processes on the procrastinate backend,
    where ``job_kinds`` spreads each ``bank.refresh`` as one ``bank.access`` follow-up job per
    access (so any worker may scrape any access): the figures include that fan-out.

  Each process runs at most C jobs at once (``SCRAPEFLOW_JOB_CONCURRENCY``): a worker is a unit
  of capacity, two hold twice the jobs in flight. Two workloads:

  - **the bank batch**: one ``bank.refresh`` job per customer, 200 customers with an access at
    each of the 3 banks (600 accesses), 60 accesses in flight per process: the refresh lane
    (``SCRAPEFLOW_REFRESH_CONCURRENCY``) is 20 on the embedded backend, where a refresh scrapes
    its 3 accesses inside its one place, and 60 on workers, where every access is a job that
    takes a place of its own (a refresh holds none while it waits for them); the sandbox
    (``scrapeflow sandbox --seed 7``, hostility ``realistic``, the banks' default latency of
    80-250 ms) in a process of its own, reached through 8 tinyproxy exit IPs (127.0.0.2-9) given as
    ``SCRAPEFLOW_PROXIES``, as in ``bench/banking.py``, with 200 accesses at once per bank and
    600 in all per process. Every run has the same customers, on a new database and a new
    sandbox (the same seed), so each reads the same full 14 days;
  - **the fetch**: 20,000 URLs of the sandbox plain site (``bench/_loopback.py``'s server
    process, every page rendered ahead, no latency) as 20 ``fetch`` jobs of 1,000 URLs (50
    fetches in flight each), C = 2, stored on tmpfs.

  Wall time runs from the first submit to the last job's ``finished_at``. What the workers
  logged at warning level or above is counted (a heartbeat that failed, a refused connection).
* **CPU seconds of every party** over that window, per unit of work (access, page): the worker
  processes (``utime + stime`` from ``/proc/<pid>/stat``, ended children included); PostgreSQL,
  as the sum over the backends serving the run's database (their pids read from
  ``pg_stat_activity`` every 0.2 s, each one's CPU from ``/proc``: its growth since the window
  opened, or since it was born in it — the server's shared background processes are left out,
  and a backend's last 0.2 s before it exits can be missed); the sandbox or the page server;
  the tinyproxies; this process (the submitter); and ``other``: the machine's busy time
  (``/proc/stat``) not spent by those — other people's processes, PostgreSQL's background work.
  Goals: worker CPU per access and per page on procrastinate at most 1.10x the embedded one;
  2 workers finish the bank batch at least 1.5x faster than 1. The sandbox is one asyncio
  process and, with the tinyproxies and the workers, shares this machine's 2 cores: each run
  says which of them was saturated.
* **SIGKILL -> done**: a ``fetch`` job of 2,000 URLs at 100 ms a response (10 in flight: ~20 s)
  on two idle workers (C = 1); once its stored progress passes a quarter (progress is stored
  with each heartbeat), the worker holding it is SIGKILLed. Measured: the time until the other
  worker holds it, and until its row is ``succeeded`` (the fetch skips what its log has). The
  settings that bound it, the defaults (read from the code and printed): ``job_heartbeat``
  5 s, a job stalled after 3 heartbeats, the sweep every 5 s, the dispatch poll 1 s. Goal
  < 45 s; Crawlee's lease is 300 s.
* **PostgreSQL down 10 s**: the bank batch (200 customers, 1 worker, the lane of 60) on a
  PostgreSQL server of the bench's own (``tests/_pginstance.py``: the machine's shared one
  stays up), twice in one run: as is, and with the server stopped (``pg_ctl stop -m fast``)
  for 10 s once a third of the refreshes are done. Measured: each job the outage cut (run
  again after it), the seconds from the server's return to its new run (goal: every one
  within 10 s), and the batch's time against the batch without an outage (goal <= 1.3x).
* **a cursor chain**, Aerocene's shape: ``feed.page`` jobs, each fetching one cursor page of
  the sandbox feed (hostility ``none``, 50 ms a response) and queueing the next cursor's job;
  1,000 pages on the embedded backend and on 2 workers, beside the floor pages x latency (goal
  <= 1.2x), Aerocene's 2,995 s, and the same pages (200 of them) walked by a plain loop in this
  process (``scrapeflow.http``, no jobs, as ``bench/cursor.py``): the job hop's own cost. A
  feed profile has at most 5,000 posts: the chain asks for posts // 1,000 posts a page of the
  biggest of 100 profiles and stops at 1,000 pages.

Workers run on this host, not in network namespaces (one per worker would need PostgreSQL and
the sandbox reachable beyond loopback): the client IPs the banks see are the tinyproxies', as in
``bench/banking.py``. One run per setup; nothing here asserts a time.

    .venv/bin/python bench/distributed.py            # the figures (~10 minutes)
    .venv/bin/python bench/distributed.py --quick    # 20 customers, 4,000 URLs, 50 pages
    .venv/bin/python bench/distributed.py --only bank,failover,outage

Results go to ``bench/results/distributed.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _loopback import (
    CLOCK_TICKS,
    LoopbackServer,
    PostgresCpu,
    child_pids,
    cpu_seconds_self,
    machine_info,
    page_urls,
    tree_cpu_seconds,
)
from banking import BANKS, SandboxProcess, postgres_db, tinyproxies, usable_customers
from banking import _setup as add_bank_customers
from cursor import SHARED, signed
from service import machine_busy, read_line, spawn, stop

RESULTS = Path(__file__).resolve().parent / "results" / "distributed.json"
GOALS = {
    "cpu_ratio": 1.10,
    "speedup": 1.5,
    "failover_s": 45.0,
    "chain_ratio": 1.2,
    "outage_rerun_s": 10.0,
    "outage_batch_ratio": 1.3,
}
AEROCENE_CHAIN_S = 2995.0  # Aerocene's 1,000 cursor pages
CRAWLEE_LEASE_S = 300.0
# Each setup's job backend and number of worker processes.
SETUPS = {
    "embedded": ("embedded", 1),
    "1 worker": ("procrastinate", 1),
    "2 workers": ("procrastinate", 2),
}
KINDS = ("bank.refresh", "fetch", "feed.page")
BANK = {"per_bank": 200, "overall": 600}
FETCH = {"urls_per_job": 1_000, "in_flight": 50, "per_host": 64}
FAILOVER = {"latency_ms": 100.0, "in_flight": 10}
OUTAGE = {"down_s": 10.0, "at_done": 1 / 3}
BANK_KINDS = frozenset({"bank.refresh", "bank.access", "bank.otp"})


def _bank_lane() -> Any:
    """The service's refresh lane, as this process submits through it: its bank jobs are
    dispatched on the lane's queue, as the service's are (its concurrency is the workers')."""
    from scrapeflow.jobs import Lane

    return Lane("refresh", BANK_KINDS, 1)


BANK_LANE = _bank_lane()
ACCESSES_PER_CUSTOMER = len(BANKS)  # each customer has an access at every bank of the sandbox
FEED_LATENCY_MS = 50.0
READY = "worker taking jobs"
# gofetch's variables that must not reach the workers from the caller's environment.
FETCH_VARIABLES = (
    *("FETCH_ID", "FETCH_OFFSET", "FETCH_LIMIT", "CONCURRENT_FETCHES", "MAX_CPUS"),
    *("REDIS_URL", "AWS_STORAGE_BUCKET_NAME", "AWS_ENDPOINT_URL"),
)


# --- worker processes ---------------------------------------------------------------------------


def start_workers(
    backend: str, count: int, concurrency: int, env: Mapping[str, str], log: Path
) -> list[subprocess.Popen[str]]:
    """``count`` worker processes of ``backend``, each taking jobs once this returns; their
    stderr in ``<log>-<n>.log``."""
    if backend == "embedded":
        command = [sys.executable, str(Path(__file__).resolve()), "--embedded-worker"]
    else:
        command = [sys.executable, "-m", "scrapeflow", "worker"]
    env = {
        **env,
        "SCRAPEFLOW_JOBS_BACKEND": backend,
        "SCRAPEFLOW_JOB_CONCURRENCY": str(concurrency),
    }
    workers: list[subprocess.Popen[str]] = []
    try:
        for n in range(count):
            with open(f"{log}-{n}.log", "w") as stderr:
                workers.append(
                    spawn(
                        command,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                    )
                )
        for worker in workers:
            line = read_line(worker, 120, f"a {backend} worker")
            if not line.startswith(READY):
                raise RuntimeError(f"a {backend} worker said {line!r}")
    except BaseException:
        stop_workers(workers)
        raise
    return workers


def stop_workers(workers: Sequence[subprocess.Popen[str]]) -> None:
    """SIGTERM to all at once (each lets its jobs finish), then wait for each."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        stop(worker, grace=30)


def embedded_worker() -> None:
    """This script as the embedded backend's worker: ``scrapeflow worker``'s own loop on the
    settings of the environment, whose ``SCRAPEFLOW_JOBS_BACKEND`` is ``embedded``."""
    from scrapeflow.cli.worker import _work
    from scrapeflow.config import Settings

    config = Settings.load()
    if config.jobs_backend != "embedded":
        raise SystemExit("--embedded-worker runs with SCRAPEFLOW_JOBS_BACKEND=embedded")
    stopped = asyncio.run(_work(config))
    sys.exit(1 if stopped is False else 0)  # older versions told False: it stopped by itself


# --- one setup running: the submitting queue, the workers, the CPU window ----------------------


async def _runs_elsewhere(context: Any) -> None:
    raise RuntimeError("this process only submits: the workers run the jobs")


@dataclass
class Window:
    """The CPU seconds of each party (their pids) over one timed run, and PostgreSQL's."""

    parties: dict[str, list[int]]
    database: str
    before: dict[str, float] = field(default_factory=dict)
    busy: tuple[float, float] = (0.0, 0.0)
    pg: PostgresCpu | None = None

    def open(self) -> None:
        self.pg = PostgresCpu(self.database)
        self.before = {name: self._cpu(pids) for name, pids in self.parties.items()}
        self.before["submitter"] = cpu_seconds_self()
        self.busy = machine_busy()
        self.pg.start()

    @staticmethod
    def _cpu(pids: Sequence[int]) -> float:
        return sum(tree_cpu_seconds(pid) for pid in pids)

    def close(self) -> dict[str, Any]:
        if self.pg is None:
            raise RuntimeError("the window was not opened")
        busy = machine_busy()
        used = {name: self._cpu(pids) - self.before[name] for name, pids in self.parties.items()}
        used["submitter"] = cpu_seconds_self() - self.before["submitter"]
        used["postgresql"] = self.pg.halt()
        busy_seconds = (busy[0] - self.busy[0]) / CLOCK_TICKS
        used["other"] = max(0.0, busy_seconds - sum(used.values()))
        return {
            "cpu": used,
            "machine_busy": (busy[0] - self.busy[0]) / max(1.0, busy[1] - self.busy[1]),
            "pg_backends_peak": self.pg.peak_backends,
        }


@dataclass
class Run:
    """A setup's workers taking jobs, and the queue this process submits through."""

    queue: Any
    workers: list[subprocess.Popen[str]]
    window: Window
    timeout: float

    async def until(self, done: Callable[[], Awaitable[bool]]) -> None:
        """Poll ``done`` every 0.2 s; fail when a worker dies or the timeout passes."""
        deadline = time.monotonic() + self.timeout
        while not await done():
            dead = [w.pid for w in self.workers if w.poll() is not None]
            if dead:
                raise RuntimeError(f"worker(s) {dead} exited mid-run")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the jobs did not end within {self.timeout:g} s")
            await asyncio.sleep(0.2)


@dataclass(frozen=True)
class Setup:
    """How one timed run is set up: ``name`` (a key of :data:`SETUPS`), the jobs each process
    runs at once, the workers' environment (its ``SCRAPEFLOW_DB_URL`` the run's database), the
    other parties' pids, where the workers' stderr goes, and the run's bound in seconds."""

    name: str
    concurrency: int
    env: Mapping[str, str]
    parties: dict[str, list[int]]
    log: Path
    timeout: float


@contextlib.asynccontextmanager
async def running(setup: Setup) -> AsyncIterator[Run]:
    """The setup's workers taking jobs, and the queue this process submits through."""
    from scrapeflow.jobs import EmbeddedJobQueue, ProcrastinateJobQueue, SqlJobStore

    backend, count = SETUPS[setup.name]
    db_url = setup.env["SCRAPEFLOW_DB_URL"]
    kinds = dict.fromkeys(KINDS, _runs_elsewhere)
    queue: Any
    if backend == "embedded":
        queue = EmbeddedJobQueue(SqlJobStore(db_url), kinds, run_jobs=False, lanes=[BANK_LANE])
    else:  # opened first: procrastinate's schema is applied once, not by two workers at once
        queue = ProcrastinateJobQueue(db_url, kinds, run_jobs=False, lanes=[BANK_LANE])
    async with queue:
        workers = await asyncio.to_thread(
            start_workers, backend, count, setup.concurrency, setup.env, setup.log
        )
        try:
            pids = {"workers": [w.pid for w in workers], **setup.parties}
            window = Window(pids, db_url.rsplit("/", 1)[1])
            yield Run(queue, workers, window, setup.timeout)
        finally:
            await asyncio.to_thread(stop_workers, workers)


async def prepare_database(db_url: str) -> None:
    """The schema as the service leaves it at its start: the bank's migrations, the API keys',
    webhooks' and events' tables. ``scrapeflow worker`` makes all but the keys' table, which its
    webhooks' outbox reads: on a database no service opened, it logs "job listener failed" at
    every change of a job."""
    from scrapeflow.banking import migrate
    from scrapeflow.db import create_engine
    from scrapeflow.server._events import EventLog
    from scrapeflow.server._keys import open_keys
    from scrapeflow.server._webhooks import Webhooks

    await migrate(db_url)
    engine = create_engine(db_url)
    try:
        await open_keys(engine)
        webhooks = Webhooks(engine)
        await webhooks.open()
        async with EventLog(engine, outbox=webhooks):
            pass
    finally:
        await engine.dispose()


def base_env(workdir: Path, db_url: str) -> dict[str, str]:
    """The caller's environment without scrapeflow's or gofetch's settings, and the run's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in FETCH_VARIABLES and not k.startswith("SCRAPEFLOW_")
    }
    return {
        **env,
        "SCRAPEFLOW_DB_URL": db_url,
        "SCRAPEFLOW_LOG_DIR": str(workdir / "logs"),
        "SCRAPEFLOW_JOBS_DIR": str(workdir / "jobs"),
        "SCRAPEFLOW_SCHEDULE": "off",
        # The pages and banks are on loopback, which the egress policy blocks by default.
        "SCRAPEFLOW_EGRESS_ALLOW": "127.0.0.0/8",
        "PYTHONUNBUFFERED": "1",
    }


# --- a batch of jobs, three ways ----------------------------------------------------------------


async def batch(run: Run, kind: str, params: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Submit one job per ``params`` and wait for all to end: the window's figures, the wall
    time (first submit to the last ``finished_at``) and the jobs."""
    from scrapeflow.jobs import ACTIVE_STATES

    run.window.open()
    started = datetime.now(UTC)
    ids: list[str] = []
    tally: Any = None

    async def ended() -> bool:
        nonlocal tally
        tally = await run.queue.tally(ids)
        return not any(tally.counts.get(state) for state in ACTIVE_STATES)

    try:
        ids += [(await run.queue.submit(kind, p)).id for p in params]
        await run.until(ended)
    finally:
        figures = run.window.close()
    figures["seconds"] = ((tally.last_finished_at or started) - started).total_seconds()
    figures["jobs"] = [await run.queue.get(job_id) for job_id in ids]
    return figures


async def batch_on(setup: Setup, kind: str, params: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`batch` on ``setup``'s workers, started for it and stopped after."""
    async with running(setup) as run:
        figures = await batch(run, kind, params)
    figures["worker_log"] = worker_log(setup.log)
    return figures


def worker_log(log: Path) -> dict[str, int]:
    """What the workers logged at warning level or above: how many times each event (and the
    kind of error it carried)."""
    seen: Counter[str] = Counter()
    for path in log.parent.glob(f"{log.name}-*.log"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                entry = {"level": "text", "event": line[:100]}
            if not isinstance(entry, dict) or entry.get("level") in ("debug", "info"):
                continue
            error = str(entry.get("error") or "")
            why = f" ({error[:100]})" if error else ""
            seen[f"{entry.get('level')}: {entry.get('event')}{why}"] += 1
    return dict(seen.most_common(8))


def count_bank(jobs: Sequence[Any]) -> dict[str, Any]:
    """Accesses and their outcomes; the seconds of the customers' refreshes and accesses."""
    codes: Counter[str] = Counter()
    seconds: dict[str, list[float]] = {"customer": [], **{bank: [] for bank in BANKS}}
    for job in jobs:
        if job.state.value != "succeeded" or not job.result:
            codes[f"job {job.state.value}: {(job.error or '')[:80]}"] += len(BANKS)
            continue
        codes.update(a["result"] for a in job.result["accesses"])
        seconds["customer"].append(job.result["seconds"])
        for access in job.result["accesses"]:
            seconds.setdefault(access["bank"], []).append(access["seconds"])
    spread = {what: _p50_max(values) for what, values in seconds.items() if values}
    return {"units": sum(codes.values()), "outcomes": dict(codes), "job_seconds": spread}


def _p50_max(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(ordered[(len(ordered) - 1) // 2], 2), "max": round(ordered[-1], 2)}


def count_fetch(jobs: Sequence[Any]) -> dict[str, Any]:
    """The URLs, and their outcomes: stored, failed (and why), or in a job that failed."""
    outcomes: Counter[str] = Counter()
    for job in jobs:
        result = job.result or {}
        if job.state.value != "succeeded" or not result:
            outcomes[f"job {job.state.value}: {(job.error or '')[:80]}"] += len(job.params["urls"])
            continue
        outcomes["stored"] += result["stored"] + result["duplicates"] + result["skipped"]
        outcomes["failed"] += result["failed"]
        outcomes.update({f"failed: {why}": n for why, n in result["errors"].items()})
    return {"units": sum(len(job.params["urls"]) for job in jobs), "outcomes": dict(outcomes)}


def summarize(raw: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """A run's figures: wall time, units per second, and each party's CPU (seconds, per unit,
    share of a core)."""
    units, seconds = counted["units"], raw["seconds"]
    cpu = {k: round(v, 2) for k, v in raw["cpu"].items()}
    return {
        "seconds": round(seconds, 2),
        "units": units,
        "per_second": round(units / seconds, 1) if seconds > 0 else None,
        "outcomes": counted["outcomes"],
        **({"job_seconds": counted["job_seconds"]} if "job_seconds" in counted else {}),
        "cpu_seconds": cpu,
        "cpu_ms_per_unit": {k: round(1000 * v / max(1, units), 3) for k, v in cpu.items()},
        "cpu_share": {k: round(v / seconds, 2) if seconds > 0 else None for k, v in cpu.items()},
        "machine_busy": round(raw["machine_busy"], 2),
        "pg_backends_peak": raw["pg_backends_peak"],
        "worker_log": raw.get("worker_log", {}),
    }


def compare(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The ratios between the setups of one workload."""
    out: dict[str, float] = {}

    def ratio(name: str, a: str, b: str, figure: Callable[[dict[str, Any]], float]) -> None:
        if a in runs and b in runs and figure(runs[b]):
            out[name] = round(figure(runs[a]) / figure(runs[b]), 3)

    worker_cpu = lambda run: float(run["cpu_ms_per_unit"]["workers"])  # noqa: E731
    wall = lambda run: float(run["seconds"])  # noqa: E731
    ratio("worker_cpu_1_worker_vs_embedded", "1 worker", "embedded", worker_cpu)
    ratio("worker_cpu_2_workers_vs_embedded", "2 workers", "embedded", worker_cpu)
    ratio("speedup_2_vs_1_worker", "1 worker", "2 workers", wall)
    ratio("wall_1_worker_vs_embedded", "1 worker", "embedded", wall)
    return out


def saturated(run: dict[str, Any], cores: int) -> list[str]:
    """What was saturated in a run: a one-process server near a core, or the whole machine."""
    found = []
    for party in ("sandbox", "page server"):
        share = run["cpu_share"].get(party)
        if share is not None and share >= 0.85:
            found.append(f"the {party} (one asyncio process) at {share:.0%} of a core")
    if run["machine_busy"] >= 0.85:
        found.append(f"the machine: {run['machine_busy']:.0%} of its {cores} cores busy")
    return found


def bank_workload(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The bank batch on each setup, on the same customers: each setup on a new database and
    a new sandbox (the same seed: the same banks' data, none of the last setup's sessions,
    consents or counters). Setups given other customers compared other work: 40 customers
    had 13% more movements than the next 40."""
    from scrapeflow.banking import CredentialVault

    runs: dict[str, dict[str, Any]] = {}
    key = CredentialVault.generate_key()
    customers = usable_customers(args.customers)
    with tinyproxies(args.proxies, 256) as proxies:
        proxy_file = workdir / "proxies.txt"
        proxy_file.write_text("".join(f"{url}\n" for url in proxies))
        for setup in args.setups:
            with (
                SandboxProcess(workdir) as sandbox,
                postgres_db(f"bench_distributed_{os.getpid()}_bank") as db_url,
            ):
                parties = {"sandbox": [sandbox.pid], "tinyproxies": child_pids("tinyproxy")}
                env = bank_setup(
                    workdir,
                    db_url,
                    sandbox,
                    customers,
                    key,
                    proxy_file,
                    refresh_places(SETUPS[setup][0], args.bank_concurrency),
                )
                params = [{"customer": f"cust-{n}"} for n in customers]
                print(f"  bank batch, {setup} ...", flush=True)
                log = workdir / "worker-logs" / f"bank-{setup}"
                on = Setup(setup, args.bank_concurrency, env, parties, log, args.timeout)
                raw = asyncio.run(batch_on(on, "bank.refresh", params))
            runs[setup] = summarize(raw, count_bank(raw["jobs"]))
    return {
        "unit": "access",
        "settings": {
            "customers": args.customers,
            "accesses": len(BANKS) * args.customers,
            "refreshes_at_once_per_process": args.bank_concurrency,
            "accesses_in_flight_per_process": args.bank_concurrency * ACCESSES_PER_CUSTOMER,
            "refresh_concurrency": {
                backend: refresh_places(backend, args.bank_concurrency)
                for backend in ("embedded", "procrastinate")
            },
            "exit_ips": args.proxies,
            **BANK,
            "sandbox": {"seed": 7, "hostility": "realistic", "latency_ms": "bank defaults"},
        },
        "runs": runs,
        "ratios": compare(runs),
    }


def bank_setup(
    workdir: Path,
    db_url: str,
    sandbox: SandboxProcess,
    customers: list[int],
    key: str,
    proxy_file: Path,
    refresh_concurrency: int,
) -> dict[str, str]:
    """The bank batch's database ready (``customers`` at every bank of ``sandbox``, their
    passwords sealed with ``key``), and the environment of the processes that run it."""
    from scrapeflow.banking import CredentialVault

    vault = CredentialVault([key])
    asyncio.run(add_bank_customers(db_url, sandbox.manifest, customers, vault))
    asyncio.run(prepare_database(db_url))
    return {
        **base_env(workdir, db_url),
        "SCRAPEFLOW_VAULT_KEYS": key,
        "SCRAPEFLOW_SANDBOX_MANIFEST": str(sandbox.manifest_path),
        "SCRAPEFLOW_PROXIES": str(proxy_file),
        "SCRAPEFLOW_PER_BANK": str(BANK["per_bank"]),
        "SCRAPEFLOW_OVERALL": str(BANK["overall"]),
        "SCRAPEFLOW_REFRESH_CONCURRENCY": str(refresh_concurrency),
    }


def refresh_places(backend: str, refreshes: int) -> int:
    """The refresh lane's concurrency that puts ``refreshes`` customers' accesses in flight:
    on the embedded backend a refresh runs its accesses inside its one place; on workers every
    access is a job of its own that takes a place (the refresh takes none while it waits)."""
    return refreshes if backend == "embedded" else refreshes * ACCESSES_PER_CUSTOMER


def fetch_workload(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The fetch on each setup: a new database and a new store each time."""
    runs: dict[str, dict[str, Any]] = {}
    with scratch_dir() as scratch, LoopbackServer(pages=args.urls, warm=args.urls) as server:
        urls = list(page_urls(server.url, args.urls))
        size = FETCH["urls_per_job"]
        params = [
            {"urls": urls[i : i + size], "concurrency": FETCH["in_flight"], "per_host": 50}
            for i in range(0, len(urls), size)
        ]
        for setup in args.setups:
            store = scratch / setup.replace(" ", "-")
            with postgres_db(f"bench_distributed_{os.getpid()}_fetch") as db_url:
                asyncio.run(prepare_database(db_url))
                env = {
                    **base_env(workdir, db_url),
                    "SCRAPEFLOW_JOBS_STORE": str(store),
                    "SCRAPEFLOW_PER_HOST": str(FETCH["per_host"]),
                }
                print(f"  fetch, {setup} ...", flush=True)
                log = workdir / "worker-logs" / f"fetch-{setup}"
                parties = {"page server": [server.pid]}
                on = Setup(setup, args.fetch_concurrency, env, parties, log, args.timeout)
                raw = asyncio.run(batch_on(on, "fetch", params))
            runs[setup] = summarize(raw, count_fetch(raw["jobs"]))
            shutil.rmtree(store, ignore_errors=True)
    return {
        "unit": "page",
        "settings": {
            "urls": args.urls,
            "jobs": len(params),
            "jobs_at_once_per_process": args.fetch_concurrency,
            **FETCH,
            "store": f"a local directory on {scratch.parent}",
        },
        "runs": runs,
        "ratios": compare(runs),
    }


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A directory for stores: on tmpfs when there is one (disk writes vary run to run)."""
    root = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="bench-distributed-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- SIGKILL -> done ----------------------------------------------------------------------------


def failover(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One fetch job, its worker SIGKILLed past a quarter of it: until the other worker holds
    it, and until it has succeeded."""
    latency = FAILOVER["latency_ms"]
    with (
        scratch_dir() as scratch,
        LoopbackServer(pages=args.kill_urls, warm=args.kill_urls, latency_ms=latency) as server,
        postgres_db(f"bench_distributed_{os.getpid()}_failover") as db_url,
    ):
        asyncio.run(prepare_database(db_url))
        env = {**base_env(workdir, db_url), "SCRAPEFLOW_JOBS_STORE": str(scratch / "store")}
        params = {
            "urls": list(page_urls(server.url, args.kill_urls)),
            "concurrency": FAILOVER["in_flight"],
            "per_host": FAILOVER["in_flight"],
        }
        print("  SIGKILL -> done ...", flush=True)
        log = workdir / "worker-logs" / "failover"
        found = asyncio.run(_failover(env, params, log, args.timeout))
    taken, done = found["kill_to_taken_over_s"], found["kill_to_succeeded_s"]
    return {
        "urls": args.kill_urls,
        **FAILOVER,
        **found,
        "job_seconds_after_taken_over": None if taken is None else round(done - taken, 2),
        "bounded_by": default_timings(),
        "vs_goal": round(done / GOALS["failover_s"], 3),
        "vs_crawlee_lease": round(done / CRAWLEE_LEASE_S, 3),
    }


async def _failover(
    env: dict[str, str], params: dict[str, Any], log: Path, timeout: float
) -> dict[str, Any]:
    async with running(Setup("2 workers", 1, env, {}, log, timeout)) as run:
        job = await run.queue.submit("fetch", params)
        quarter = len(params["urls"]) / 4
        current = job

        async def past_a_quarter() -> bool:
            nonlocal current
            current = await run.queue.get(job.id)
            return bool(current.progress.get("done", 0) >= quarter)

        await run.until(past_a_quarter)
        victim = holder(current.owner, run.workers)
        if victim is None:
            raise RuntimeError(
                f"no worker of ours holds the job ({current.owner!r}, {current.state.value}, "
                f"attempts {current.attempts}, progress {current.progress})"
            )
        stored_at_kill = current.progress.get("done", 0)
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        victim.wait()
        stop(victim)  # its pipes
        run.workers.remove(victim)  # dead on purpose: until() watches the survivor
        taken: float | None = None

        async def succeeded() -> bool:
            nonlocal current, taken
            current = await run.queue.get(job.id)
            if taken is None and holder(current.owner, run.workers) is not None:
                taken = time.monotonic() - killed
            return bool(current.state.final)

        await run.until(succeeded)
        done = time.monotonic() - killed
    return {
        "stored_at_kill": stored_at_kill,
        "kill_to_taken_over_s": None if taken is None else round(taken, 2),
        "kill_to_succeeded_s": round(done, 2),
        "final_state": current.state.value,
        "attempts": current.attempts,
        "result": current.result,
    }


def default_timings() -> dict[str, float]:
    """The settings a worker's death is found and its jobs run again with: the defaults, read
    from the code (the workers run with no timing setting of their own)."""
    import inspect

    from scrapeflow.config import Settings
    from scrapeflow.jobs import ProcrastinateJobQueue

    queue = inspect.signature(ProcrastinateJobQueue).parameters
    heartbeat = float(Settings.model_fields["job_heartbeat"].default)
    return {
        "job_heartbeat_s": heartbeat,
        "stalled_after_s": 3 * heartbeat,
        "sweep_every_s": float(queue["sweep_every"].default),
        "dispatch_poll_s": float(queue["poll"].default),
    }


def holder(
    owner: str | None, workers: Sequence[subprocess.Popen[str]]
) -> subprocess.Popen[str] | None:
    """The worker whose delivery ``owner`` is (a delivery's owner starts ``host:pid:``)."""
    if not owner:
        return None
    return next((w for w in workers if f":{w.pid}:" in f":{owner}:"), None)


# --- PostgreSQL down ---------------------------------------------------------------------------


def outage_phase(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The bank batch on ``scrapeflow worker`` processes over a PostgreSQL server of this
    bench's own (the machine's shared one must stay up), twice: as is, and with the server
    stopped for 10 s once a third of the refreshes are done. The runs cut by the outage: how
    long after the server is back each runs again; the batch's time against the one without."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' PgInstance
    from tests._pginstance import start_pg_instance

    from scrapeflow.banking import CredentialVault

    key = CredentialVault.generate_key()
    customers = usable_customers(args.outage_customers, start=5_000)
    runs: dict[str, dict[str, Any]] = {}
    backend = "procrastinate"
    with tinyproxies(args.proxies, 256) as proxies:
        proxy_file = workdir / "outage-proxies.txt"
        proxy_file.write_text("".join(f"{url}\n" for url in proxies))
        instance = start_pg_instance(workdir)
        try:
            for n, name in enumerate(("as is", f"PostgreSQL down {OUTAGE['down_s']:g} s")):
                # The same customers on a new sandbox (as in bank_workload): the same work.
                with SandboxProcess(workdir) as sandbox:
                    database = f"bench_outage_{n}"
                    asyncio.run(_pg_on(instance.url(), f'CREATE DATABASE "{database}"'))
                    db_url = instance.url(database)
                    env = bank_setup(
                        workdir,
                        db_url,
                        sandbox,
                        customers,
                        key,
                        proxy_file,
                        refresh_places(backend, args.bank_concurrency),
                    )
                    params = [{"customer": f"cust-{c}"} for c in customers]
                    print(f"  PostgreSQL down, {name} ...", flush=True)
                    log = workdir / "worker-logs" / f"outage-{n}"
                    stop_pg = instance if n else None
                    raw = asyncio.run(_outage_run(env, params, log, args.timeout, stop_pg))
                    raw["worker_log"] = worker_log(log)
                    runs[name] = raw
        finally:
            instance.close()
    plain, cut = runs.values()
    ratio = cut["seconds"] / plain["seconds"] if plain["seconds"] else None
    return {
        "settings": {
            "customers": args.outage_customers,
            "accesses": ACCESSES_PER_CUSTOMER * args.outage_customers,
            "workers": 1,
            "refresh_concurrency": refresh_places(backend, args.bank_concurrency),
            "down_s": OUTAGE["down_s"],
            "stopped_once_done": "a third of the refreshes",
            "timings": default_timings(),
            "server": "a PostgreSQL of the bench's own (fsync off), stopped with pg_ctl -m fast",
        },
        "runs": runs,
        "batch_ratio": None if ratio is None else round(ratio, 3),
        "goal_batch_ratio": GOALS["outage_batch_ratio"],
        "goal_rerun_s": GOALS["outage_rerun_s"],
    }


async def _pg_on(url: str, sql: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    connection = await asyncpg.connect(
        host=parts.host, port=parts.port, user=parts.username, database=parts.database
    )
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _outage_run(
    env: Mapping[str, str],
    params: Sequence[Mapping[str, Any]],
    log: Path,
    timeout: float,
    instance: Any,
) -> dict[str, Any]:
    """One batch on one worker; with ``instance``, that server stopped for the outage once a
    third of the refreshes are done. Figures: the batch's seconds, the outcomes, and for each
    job the outage cut (run again after it), the seconds from the server's return to its run."""
    from scrapeflow.jobs import ACTIVE_STATES, JobState, ProcrastinateJobQueue

    db_url = env["SCRAPEFLOW_DB_URL"]
    kinds = dict.fromkeys((*KINDS, "bank.access"), _runs_elsewhere)
    down: dict[str, Any] = {}
    async with ProcrastinateJobQueue(db_url, kinds, run_jobs=False, lanes=[BANK_LANE]) as queue:
        workers = await asyncio.to_thread(start_workers, "procrastinate", 1, 1, {**env}, log)
        try:
            started = datetime.now(UTC)
            ids = [(await queue.submit("bank.refresh", p)).id for p in params]
            deadline = time.monotonic() + timeout
            tally: Any = None
            while True:
                try:
                    tally = await queue.tally(ids)
                except Exception:  # the server is away: the client rides it out too
                    tally = None
                if tally is not None and not any(tally.counts.get(s) for s in ACTIVE_STATES):
                    break
                if [w.pid for w in workers if w.poll() is not None]:
                    raise RuntimeError("the worker exited mid-run")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the batch did not end within {timeout:g} s")
                ended = (
                    0
                    if tally is None
                    else len(ids) - sum(tally.counts.get(s, 0) for s in ACTIVE_STATES)
                )
                if instance is not None and not down and ended >= len(ids) * OUTAGE["at_done"]:
                    down["running_at_stop"] = [
                        job.id for job in await queue.find(states=[JobState.RUNNING], limit=10_000)
                    ]
                    down["stopping"] = datetime.now(UTC)
                    await asyncio.to_thread(instance.stop)
                    down["stopped"] = datetime.now(UTC)
                    await asyncio.sleep(OUTAGE["down_s"])
                    await asyncio.to_thread(instance.start)
                    down["back"] = datetime.now(UTC)
                await asyncio.sleep(0.2)
            seconds = ((tally.last_finished_at or started) - started).total_seconds()
            jobs = [await queue.get(job_id) for job_id in ids]
            parts = await queue.find(kind="bank.access", limit=100_000)
        finally:
            await asyncio.to_thread(stop_workers, workers)
    figures: dict[str, Any] = {"seconds": round(seconds, 2), **count_bank(jobs)}
    figures.pop("job_seconds", None)
    figures["jobs"] = {
        "refreshes": len(jobs),
        "accesses": len(parts),
        "states": dict(Counter(job.state.value for job in [*jobs, *parts])),
    }
    if down:
        back = down["back"]
        everything = {job.id: job for job in [*jobs, *parts]}
        cut = [j for j in everything.values() if j.attempts > 1 and j.started_at is not None]
        rerun = sorted((j.started_at - back).total_seconds() for j in cut if j.started_at)
        running = [everything[i] for i in down["running_at_stop"] if i in everything]
        figures["outage"] = {
            "down_s": round((back - down["stopped"]).total_seconds(), 2),
            "stop_took_s": round((down["stopped"] - down["stopping"]).total_seconds(), 2),
            "running_at_stop": len(running),
            "cut_and_run_again": len(cut),
            "rode_it_out": sum(1 for j in running if j.attempts == 1),
            "rerun_after_back_s": {
                "p50": round(rerun[(len(rerun) - 1) // 2], 2) if rerun else None,
                "max": round(rerun[-1], 2) if rerun else None,
            },
            "attempts_max": max((j.attempts for j in everything.values()), default=0),
        }
    return figures


def print_outage(part: dict[str, Any]) -> None:
    st = part["settings"]
    print(
        f"\nPostgreSQL down {st['down_s']:g} s: a batch of {st['customers']} customers "
        f"({st['accesses']} accesses) on {st['workers']} worker, refresh lane "
        f"{st['refresh_concurrency']}; settings {st['timings']}"
    )
    for name, run in part["runs"].items():
        print(f"  {name:24} {fmt(run['seconds'], ' s', 1)}; {run['outcomes']}; {run['jobs']}")
        if "outage" in run:
            print(f"  {'':24} {run['outage']}")
        for what, times in run["worker_log"].items():
            print(f"  {name}: workers logged x{times}: {what}")
    rerun = next(
        (r["outage"]["rerun_after_back_s"] for r in part["runs"].values() if "outage" in r), {}
    )
    last, goal = rerun.get("max"), part["goal_rerun_s"]
    if last is None:
        reruns = "the outage cut no job"
    else:
        verdict = "met" if last <= goal else "NOT met"
        reruns = (
            f"the cut jobs ran again {rerun.get('p50')} s (p50), {last} s (last) after the"
            f" return (goal: every one within {goal:g} s: {verdict})"
        )
    print(
        f"  batch time, down / as is: x{part['batch_ratio']} (goal <= {part['goal_batch_ratio']});"
        f" {reruns}"
    )


# --- the cursor chain ---------------------------------------------------------------------------


def feed_page_missing() -> str | None:
    """Why the workers cannot run ``feed.page`` jobs, or None when they can."""
    try:
        from scrapeflow.config import Settings
        from scrapeflow.server._work import chain_job_kinds

        kinds = chain_job_kinds(Settings.load())
    except ImportError as exc:
        return f"feed.page is not available yet ({exc})"
    return None if "feed.page" in kinds else "feed.page is not available yet"


@contextlib.contextmanager
def feed_sandbox(latency_ms: float) -> Iterator[tuple[str, int]]:
    """The sandbox (hostility ``none``, every answer ``latency_ms`` late) in a process of its
    own: its feed's URL and its pid."""
    command = [sys.executable, "-m", "scrapeflow", "sandbox", "--hostility", "none"]
    command += ["--latency-ms", f"{latency_ms:g}", "--seed", "0", "--customers", "10"]
    env = {**os.environ, "SCRAPEFLOW_SANDBOX_ADMIN_TOKEN": "bench-distributed"}
    process = spawn(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        manifest = json.loads(read_line(process, 60, "the sandbox"))
        yield manifest["sites"]["feed"], process.pid
    finally:
        stop(process)


async def biggest_profile(feed: str, candidates: int = 100) -> tuple[str, int]:
    """The profile with the most posts among the first ``candidates``, from their pages."""
    import aiohttp

    found: dict[str, int] = {}
    async with aiohttp.ClientSession() as http:

        async def count(name: str) -> None:
            async with http.get(f"{feed}/u/{name}") as response:
                text = await response.text()
            match = re.search(r'data-count="(\d+)"', text)
            found[name] = int(match.group(1)) if match else 0

        await asyncio.gather(*(count(f"user{n:04d}") for n in range(candidates)))
    name = max(found, key=lambda k: found[k])
    return name, found[name]


async def plain_walk(feed: str, profile: str, first: int, pages: int) -> tuple[float, float]:
    """Seconds and CPU seconds a page when the same pages are walked by a plain loop in this
    process (``scrapeflow.http``, no jobs, as ``bench/cursor.py``): what the chain costs beyond
    its HTTP."""
    from scrapeflow.http import HttpClient, HttpConfig

    async with HttpClient(HttpConfig()) as http:
        found = SHARED.search((await http.get(f"{feed}/u/{profile}")).text())
        if found is None:
            raise RuntimeError(f"no profile page for {profile}")
        shared = json.loads(found.group(1))
        after = None
        started, cpu = time.perf_counter(), cpu_seconds_self()
        for _ in range(pages):
            variables: dict[str, Any] = {"id": shared["profile_id"], "first": first}
            if after is not None:
                variables["after"] = after
            url, headers = signed(feed, shared["rhx_gis"], variables)
            response = await http.get(url, headers=headers)
            if response.status != 200:
                raise RuntimeError(f"page refused: HTTP {response.status}")
            after = response.json()["data"]["user"]["edge_owner_to_timeline_media"]["page_info"][
                "end_cursor"
            ]
        return (time.perf_counter() - started) / pages, (cpu_seconds_self() - cpu) / pages


def chain_phase(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """A chain of ``args.pages`` ``feed.page`` jobs on each chain setup."""
    missing = feed_page_missing()
    if missing is not None:
        print(f"  cursor chain: {missing}", flush=True)
        return {"skipped": missing}
    runs: dict[str, dict[str, Any]] = {}
    with feed_sandbox(FEED_LATENCY_MS) as (feed, sandbox_pid):
        profile, posts = asyncio.run(biggest_profile(feed))
        first = max(1, min(50, posts // args.pages))
        if posts < first * args.pages:
            raise RuntimeError(f"no profile has {args.pages} pages ({profile}: {posts} posts)")
        params = {"url": feed, "profile": profile, "first": first, "pages": args.pages}
        control_pages = min(args.pages, 200)
        print(f"  cursor chain, a plain loop of {control_pages} pages ...", flush=True)
        loop_page, loop_cpu = asyncio.run(plain_walk(feed, profile, first, control_pages))
        for setup in args.chain_setups:
            with postgres_db(f"bench_distributed_{os.getpid()}_chain") as db_url:
                asyncio.run(prepare_database(db_url))
                env = base_env(workdir, db_url)
                print(f"  cursor chain, {setup} ...", flush=True)
                log = workdir / "worker-logs" / f"chain-{setup}"
                on = Setup(setup, 4, env, {"sandbox": [sandbox_pid]}, log, args.timeout)
                raw = asyncio.run(chain(on, params))
            floor = raw["pages"] * FEED_LATENCY_MS / 1000
            run = summarize(raw, {"units": raw["pages"], "outcomes": raw["outcomes"]})
            run["floor_seconds"] = round(floor, 2)
            run["vs_floor"] = round(raw["seconds"] / floor, 3) if floor else None
            run["vs_aerocene"] = round(raw["seconds"] / AEROCENE_CHAIN_S, 4)
            page = raw["seconds"] / max(1, raw["pages"])
            run["ms_per_page"] = round(1000 * page, 1)
            run["job_overhead_ms_per_page"] = round(1000 * (page - loop_page), 1)
            run["page_phases_ms"] = raw["page_phases_ms"]
            runs[setup] = run
    return {
        "settings": {
            "pages": args.pages,
            "profile": profile,
            "profile_posts": posts,
            "first": first,
            "latency_ms": FEED_LATENCY_MS,
            "jobs_at_once_per_process": 4,
            "sandbox": {"seed": 0, "hostility": "none"},
        },
        "plain_loop": {
            "pages": control_pages,
            "ms_per_page": round(1000 * loop_page, 1),
            "cpu_ms_per_page": round(1000 * loop_cpu, 2),
        },
        "runs": runs,
        "goal_vs_floor": GOALS["chain_ratio"],
        "aerocene_seconds": AEROCENE_CHAIN_S,
    }


async def chain(setup: Setup, params: Mapping[str, Any]) -> dict[str, Any]:
    """Submit the chain's first page; wait until no page is queued or running. Wall time: the
    submit to the last page's ``finished_at``."""
    from scrapeflow.jobs import JobState

    kind = "feed.page"
    counts: dict[Any, int] = {}

    async def ended() -> bool:
        nonlocal counts
        counts = await run.queue.counts()
        return not (counts.get((kind, JobState.QUEUED)) or counts.get((kind, JobState.RUNNING)))

    async with running(setup) as run:
        run.window.open()
        started = datetime.now(UTC)
        try:
            await run.queue.submit(kind, params)
            await run.until(ended)
        finally:
            figures = run.window.close()
        pages = await run.queue.find(kind=kind, limit=int(params["pages"]) + 10)
        last = pages[0]  # newest first: the last page
    figures["seconds"] = ((last.finished_at or started) - started).total_seconds()
    figures["page_phases_ms"] = page_phases(sorted(pages, key=lambda job: job.created_at))
    figures["pages"] = counts.get((kind, JobState.SUCCEEDED), 0)
    figures["outcomes"] = {state.value: n for (k, state), n in counts.items() if k == kind}
    figures["outcomes"]["last_page"] = (last.result or {}).get("page")
    figures["worker_log"] = worker_log(setup.log)
    return figures


def page_phases(pages: Sequence[Any]) -> dict[str, float | None]:
    """Medians over a chain's pages, in ms: a page's run (its claim to its end: the fetch, the
    next page's submit, the end's write); from its claim to the next page's submit (the
    fetch); from a page's submit to its claim (its insert, event and dispatch); and the hop
    from a page's end to the next page's start (negative: the next started before this one's
    end was stored)."""
    runs = [p.finished_at - p.started_at for p in pages if p.finished_at and p.started_at]
    waits = [p.started_at - p.created_at for p in pages[1:] if p.started_at]
    fetches = [b.created_at - a.started_at for a, b in itertools.pairwise(pages) if a.started_at]
    hops = [
        b.started_at - a.finished_at
        for a, b in itertools.pairwise(pages)
        if a.finished_at and b.started_at
    ]

    def median(values: list[timedelta]) -> float | None:
        return (
            round(statistics.median(v.total_seconds() for v in values) * 1000, 1)
            if values
            else None
        )

    return {
        "run": median(runs),
        "to_next_submit": median(fetches),
        "queued_to_started": median(waits),
        "hop": median(hops),
    }


# --- the tables ---------------------------------------------------------------------------------


def fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def print_workload(title: str, part: dict[str, Any], cores: int) -> None:
    runs, unit = part["runs"], part["unit"]
    print(f"\n{title}: {part['settings']}")
    parties = sorted({p for run in runs.values() for p in run["cpu_seconds"]})
    parties.sort(key=lambda p: (p != "workers", p == "other", p))
    print(
        f"  {'':10}{'wall':>9}{unit + 's/s':>11}"
        + "".join(f"{p[:12]:>13}" for p in parties)
        + f"{'busy':>7}{'PG conns':>10}"
    )
    for setup, run in runs.items():
        cells = "".join(f"{fmt(run['cpu_ms_per_unit'][p], digits=3):>13}" for p in parties)
        print(
            f"  {setup:10}{fmt(run['seconds'], ' s', 1):>9}{fmt(run['per_second'], '', 1):>11}"
            f"{cells}{run['machine_busy']:>7.0%}{run['pg_backends_peak']:>10}"
        )
    print(
        f"  (CPU milliseconds per {unit} of each party; busy: the machine's {cores} cores; "
        "PG conns: most backends on the run's database at once)"
    )
    for setup, run in runs.items():
        shares = ", ".join(f"{p} {s:.2f}" for p, s in run["cpu_share"].items() if s is not None)
        print(f"  {setup}: outcomes {run['outcomes']}; cores used: {shares}")
        if "job_seconds" in run:
            print(f"  {setup}: seconds (p50/max) {run['job_seconds']}")
        for what in saturated(run, cores):
            print(f"  {setup}: saturated: {what}")
        for what, times in run["worker_log"].items():
            print(f"  {setup}: workers logged x{times}: {what}")
    ratios = part["ratios"]
    for setup in ("1 worker", "2 workers"):
        value = ratios.get(f"worker_cpu_{setup.replace(' ', '_')}_vs_embedded")
        if value is not None:
            print(
                f"  worker CPU per {unit}, {setup} / embedded: {value:.3f} "
                f"(goal <= {GOALS['cpu_ratio']})"
            )
    if "speedup_2_vs_1_worker" in ratios:
        goal = f" (goal >= {GOALS['speedup']})" if unit == "access" else ""
        print(f"  wall time, 1 worker / 2 workers: {ratios['speedup_2_vs_1_worker']:.3f}{goal}")
    if "wall_1_worker_vs_embedded" in ratios:
        print(f"  wall time, 1 worker / embedded: {ratios['wall_1_worker_vs_embedded']:.3f}")


def print_failover(part: dict[str, Any]) -> None:
    print(
        f"\nSIGKILL -> done: a fetch job of {part['urls']:,} URLs at {part['latency_ms']:g} ms "
        f"({part['in_flight']} in flight), its worker killed at {part['stored_at_kill']:,} done"
    )
    print(
        f"  the other worker holds it after {fmt(part['kill_to_taken_over_s'], ' s')}; "
        f"{part['final_state']} after {fmt(part['kill_to_succeeded_s'], ' s')} (goal < "
        f"{GOALS['failover_s']:g} s: x{part['vs_goal']}; Crawlee's lease {CRAWLEE_LEASE_S:g} s: "
        f"x{part['vs_crawlee_lease']}); attempts {part['attempts']}"
    )
    print(f"  bounded by {part['bounded_by']}; result {part['result']}")


def print_chain(part: dict[str, Any]) -> None:
    if "skipped" in part:
        print(f"\ncursor chain: {part['skipped']}")
        return
    st = part["settings"]
    print(
        f"\ncursor chain: {st['pages']:,} pages of {st['first']} posts ({st['profile']}, "
        f"{st['profile_posts']:,} posts) at {st['latency_ms']:g} ms, a feed.page job a page"
    )
    loop = part["plain_loop"]
    print(
        f"  a plain loop in one process (no jobs, {loop['pages']} pages): "
        f"{loop['ms_per_page']} ms a page, CPU {loop['cpu_ms_per_page']} ms a page"
    )
    for setup, run in part["runs"].items():
        per_page = run["cpu_ms_per_unit"]
        print(
            f"  {setup:10} {fmt(run['seconds'], ' s', 1)}, floor "
            f"{fmt(run['floor_seconds'], ' s', 1)}: x{fmt(run['vs_floor'], '', 3)} (goal <= "
            f"{part['goal_vs_floor']}); Aerocene's {part['aerocene_seconds']:g} s: "
            f"x{run['vs_aerocene']}; {run['ms_per_page']} ms a page, "
            f"{run['job_overhead_ms_per_page']} ms more than the loop; CPU per page: workers "
            f"{fmt(per_page['workers'], ' ms')}, "
            f"PostgreSQL {fmt(per_page['postgresql'], ' ms')}; {run['outcomes']}"
        )
        phases = run.get("page_phases_ms") or {}
        print(
            f"  {setup:10} a page's run (claim to end) {fmt(phases.get('run'), ' ms')}, "
            f"claim to the next page's submit {fmt(phases.get('to_next_submit'), ' ms')}, "
            f"submit to claim {fmt(phases.get('queued_to_started'), ' ms')}, "
            f"end to the next page's claim {fmt(phases.get('hop'), ' ms')} (medians)"
        )
        for what, times in run["worker_log"].items():
            print(f"  {setup}: workers logged x{times}: {what}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="20 customers, 4,000 URLs, 50 pages")
    parser.add_argument("--customers", type=int, help="bank batch customers (default 200)")
    parser.add_argument("--urls", type=int, help="URLs fetched (default 20,000)")
    parser.add_argument("--pages", type=int, help="cursor pages of the chain (default 1,000)")
    parser.add_argument("--kill-urls", type=int, help="URLs of the killed job (default 2,000)")
    parser.add_argument("--proxies", type=int, default=8, help="tinyproxy exit IPs (8)")
    parser.add_argument("--bank-concurrency", type=int, default=20, help="bank jobs/process")
    parser.add_argument("--fetch-concurrency", type=int, default=2, help="fetch jobs/process")
    parser.add_argument("--timeout", type=float, default=600.0, help="bound of each run, s")
    parser.add_argument("--outage-customers", type=int, help="outage batch (default 200)")
    parser.add_argument("--only", default="bank,fetch,failover,chain,outage", help="phases to run")
    parser.add_argument("--setups", default=",".join(SETUPS), help="bank and fetch setups")
    parser.add_argument("--chain-setups", default="embedded,2 workers", help="chain setups")
    parser.add_argument("--keep-logs", type=Path, help="copy the workers' stderr here")
    parser.add_argument("--embedded-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.embedded_worker:
        embedded_worker()
        return
    args.customers = args.customers or (20 if args.quick else 200)
    args.urls = args.urls or (4_000 if args.quick else 20_000)
    args.pages = args.pages or (50 if args.quick else 1_000)
    args.kill_urls = args.kill_urls or (600 if args.quick else 2_000)
    args.outage_customers = args.outage_customers or (40 if args.quick else 200)
    args.setups = [s for s in SETUPS if s in args.setups.split(",")]
    args.chain_setups = [s for s in SETUPS if s in args.chain_setups.split(",")]
    phases = {
        "bank": bank_workload,
        "fetch": fetch_workload,
        "failover": failover,
        "chain": chain_phase,
        "outage": outage_phase,
    }
    wanted = args.only.split(",")
    unknown = sorted(set(wanted) - set(phases))
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; known: {', '.join(phases)}")
    # SIGTERM as Ctrl-C: the same clean-up (processes stopped, databases dropped).
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    cores = os.cpu_count() or 1
    out: dict[str, Any] = {"machine": machine_info(), "goals": GOALS, "results": {}}
    results = out["results"]
    kept = _recorded_phases(set(phases) - set(wanted))
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    logs = workdir / "worker-logs"
    logs.mkdir()
    try:
        for name, phase in phases.items():
            if name in wanted:
                try:
                    results[name] = phase(args, workdir)
                except Exception as exc:  # the others' figures still count: say what failed
                    print(f"  {name} failed: {exc!r}", flush=True)
                    results[name] = {"failed": repr(exc)[:500]}
                results[name]["recorded"] = {
                    k: out["machine"][k] for k in ("date", "git_commit") if k in out["machine"]
                }
                write_results(out, started, kept)  # after each phase: a later one may fail
    except BaseException:
        for log in sorted(logs.iterdir()):
            tail = log.read_text(errors="replace")[-1500:].strip()
            if tail:
                print(f"--- {log.name}:\n{tail}", file=sys.stderr)
        raise
    finally:
        if args.keep_logs:
            shutil.copytree(logs, args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    write_results(out, started, kept)
    results = {k: v for k, v in results.items() if "failed" not in v}
    if "bank" in results:
        print_workload("bank batch", results["bank"], cores)
    if "fetch" in results:
        print_workload("fetch", results["fetch"], cores)
    if "failover" in results:
        print_failover(results["failover"])
    if "chain" in results:
        print_chain(results["chain"])
    if "outage" in results:
        print_outage(results["outage"])
    print(f"\nbench took {out['bench_seconds']} s; results in {RESULTS}")


def _recorded_phases(names: set[str]) -> dict[str, Any]:
    """The record's figures of the phases ``names`` (not run this time): kept as they are,
    each with its own ``recorded`` date and commit."""
    try:
        old = json.loads(RESULTS.read_text())
        record, machine = old["results"], old.get("machine", {})
    except (OSError, ValueError, KeyError):
        return {}
    stamp = {k: machine[k] for k in ("date", "git_commit") if k in machine}
    kept = {name: record[name] for name in names if name in record}
    for figures in kept.values():
        figures.setdefault("recorded", stamp)
    return kept


def write_results(out: dict[str, Any], started: float, kept: dict[str, Any]) -> None:
    """The record: this run's phases, and the figures of those it did not run."""
    out["bench_seconds"] = round(time.monotonic() - started, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    whole = {**out, "results": {**kept, **out["results"]}}
    RESULTS.write_text(json.dumps(whole, indent=2) + "\n")


if __name__ == "__main__":
    main()
