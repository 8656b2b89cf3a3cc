"""The bank launcher against the sandbox: time to balances and movements, 200 customers at once.

Method (the issue's, against the sandbox at its **default** latency — banks answer in 80-250 ms —
and hostility ``realistic``: the legacy bank 1 % maintenance pages and sessions ended after 300
requests, the API bank's own limit of 10 requests/s per client IP, burst 20):

* the sandbox (``scrapeflow sandbox --seed 7``) runs in a process of its own, so it shares
  neither event loop nor GIL with the launcher being measured; its CPU seconds are taken around
  each phase;
* each phase's launcher runs in a fresh child process (this script with ``--child``), on a new
  SQLite database in a temporary directory (PostgreSQL too with ``--postgres``), so its peak RSS
  is its own. Setup (schema, customers, accesses, credentials read from the sandbox's admin API)
  happens before the clock starts;
* **one customer, cold**: each run takes a new customer number (one access at each of the four
  banks, nothing stored for it yet, so the full 14 days are read) and a new ``Launcher`` (new
  HTTP client: new connections, new logins). Time to all balances is
  ``LaunchReport.balances_seconds`` (the last accounts batch of the four landing), time to all
  movements ``LaunchReport.seconds``. One unmeasured refresh of another customer comes first in
  the process (module imports, first scraper load), reported apart. p50 and p95 (nearest rank:
  with 10 runs the p95 is the slowest) are printed beside the seed's 10 s / 30 s and the goals
  2 s / 5 s as ratios (figure / target; below 1 meets it);
* **200 customers at once**: 800 accesses, ``Launcher.refresh_many``. First as the product
  ships (the launcher's own ``HttpConfig(max_connections=400)``, ``LaunchLimits()``, no proxy),
  then with several exit IPs — tinyproxy processes bound to 127.0.0.2, .3, ... given to the
  launcher as a ``ProxyProviderFromList`` (the product's proxy rotation: the API bank limits
  each IP apart) and wider launch limits. Each prints total time (goal 60 s), p50/p95 of the
  per-customer seconds, every result code, HTTP traffic per bank (requests, 429s, retries),
  the launcher's peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` just before the
  launch) and memory per access: (peak RSS - RSS before the launch) / 800. The seed's browsers
  took ~300 MB a page;
* against the floor: the banks' own rate limits set the shortest batch possible — the API bank
  allows 10 requests/s per client IP (burst 20), so ``needed`` requests over ``N`` exit IPs take
  at least ``(needed - 20 N) / 10 N`` seconds, ``needed`` being the requests it answered with
  anything but a 429 in that very run. The bench prints batch / floor (goal <= 1.3) and the
  launcher's CPU seconds (all its threads: V8, SQLite, the parsing pool) per access (goal
  <= 25 ms), each with PASS/FAIL, and stores them in the results.

Customers with ``n % 4 == 2`` (two-factor at the legacy bank) and ``n % 97 == 13`` (locked)
are skipped; every phase uses customer numbers no other phase used.

    .venv/bin/python bench/banking.py              # 10 cold runs, 200 customers (x2 configs)
    .venv/bin/python bench/banking.py --quick      # 3 cold runs, 40 customers
    .venv/bin/python bench/banking.py --postgres   # also on PostgreSQL (127.0.0.1:5432)
    .venv/bin/python bench/banking.py --loop uvloop  # the launcher on uvloop, not asyncio's loop

Exit IPs come two ways (``--proxy-kind``, default both): tinyproxy
(``scripts/install-system-deps``; skipped when missing) and ``PipeProxies``, a byte pipe per
client connection in a thread of the bench process. The second was written when tinyproxy
1.11 — which closes a client connection after each answer while aiohttp keeps it pooled —
made the legacy bank's login POST fail as ``bank_unavailable``; the HTTP layer now resends a
request that provably never reached the server and starts a cut login over, so tinyproxy
works and the pipe proxy stays as a second, independent exit-IP setup. The pipe proxy's CPU is
this process's, not the launcher's. The full run with ``--proxy-kind tinyproxy`` takes about
3.5 minutes.
Results go to ``bench/results/banking.json``. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from _loopback import (
    cpu_seconds_of,
    cpu_seconds_self,
    current_rss_mb,
    machine_info,
    peak_rss_mb,
)

BANKS = ("formbank", "apibank", "legacybank", "neobank")
SEED = 7
RESULTS = Path(__file__).resolve().parent / "results" / "banking.json"
SEED_TARGETS = {"balances": 10.0, "movements": 30.0}
GOALS = {
    "balances": 2.0,
    "movements": 5.0,
    "many_total": 60.0,
    "cpu_ms_per_access": 25.0,  # the launcher's CPU for one access, all its threads
    "batch_vs_floor": 1.3,  # the batch through exit IPs against the banks' own rate limits
}
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


# --- helpers --------------------------------------------------------------------------------


def usable_customers(count: int, start: int = 1) -> list[int]:
    """``count`` customer numbers from ``start`` on, without 2FA (n % 4 == 2) or locked ones."""
    found: list[int] = []
    n = start
    while len(found) < count:
        if n % 4 != 2 and n % 97 != 13:
            found.append(n)
        n += 1
    return found


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile ``q`` (0-1): the smallest value with ``q`` of them at or below."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def r3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def ratio(value: float | None, target: float) -> float | None:
    return None if value is None else round(value / target, 3)


def rate_limits() -> dict[str, tuple[float, float]]:
    """The banks' own per-IP limits, ``{bank: (requests per second, burst)}``.

    Read from the sandbox's code (its process runs the same defaults): only the API bank has one.
    """
    from scrapeflow.sandbox.banks import ApiBank

    return {"apibank": (ApiBank.client_rate_per_second, float(ApiBank.client_rate_burst))}


def rate_floor(traffic: dict[str, Any], exit_ips: int) -> dict[str, Any]:
    """The shortest batch the banks' own rate limits allow, from the requests each needed.

    A bank that allows ``rate`` requests a second per client IP, ``burst`` at once, needs at
    least ``(needed - burst x IPs) / (rate x IPs)`` seconds for ``needed`` requests spread evenly
    over ``IPs`` exit IPs. ``needed`` counts the requests the bank answered with anything but a
    429 (the refused ones were not needed: they are the cost of pacing them). The floor is the
    largest over the banks; a bank without a limit sets none.
    """
    ips = max(1, exit_ips)
    by_bank: dict[str, Any] = {}
    for bank, (rate, burst) in rate_limits().items():
        needed = traffic.get(bank, {}).get("ok", 0)
        if rate <= 0 or not needed:
            continue
        seconds = max(0.0, needed - burst * ips) / (rate * ips)
        by_bank[bank] = {
            "needed_requests": needed,
            "rate_per_ip": rate,
            "burst_per_ip": burst,
            "seconds": round(seconds, 2),
        }
    floor = max((b["seconds"] for b in by_bank.values()), default=None)
    return {"seconds": floor, "exit_ips": ips, "by_bank": by_bank}


def verdict(value: float | None, goal: float) -> str:
    return "-" if value is None else ("PASS" if value <= goal else "FAIL")


def reset_peak_rss() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS (Linux >= 4.0); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- the sandbox process --------------------------------------------------------------------


class SandboxProcess:
    """``scrapeflow sandbox`` in a subprocess; its manifest once it serves."""

    def __init__(self, workdir: Path) -> None:
        self.manifest_path = workdir / "sandbox.json"
        self.token = secrets.token_hex(16)
        self.manifest: dict[str, Any] = {}
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> SandboxProcess:
        command = [sys.executable, "-m", "scrapeflow", "sandbox", "--seed", str(SEED)]
        command += ["--manifest", str(self.manifest_path)]
        env = {**os.environ, "SCRAPEFLOW_SANDBOX_ADMIN_TOKEN": self.token}
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self._process.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while not line.startswith("{"):
            remaining = deadline - time.monotonic()
            ready = remaining > 0 and select.select([self._process.stdout], [], [], remaining)[0]
            line = self._process.stdout.readline() if ready else ""
            if not line:
                self.__exit__()
                raise RuntimeError("the sandbox did not start (no manifest on its stdout)")
        self.manifest = json.loads(line)
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def today(self) -> date:
        """The sandbox date (its clock stands still unless moved through the admin API)."""
        from scrapeflow.sandbox import SandboxAdmin

        async def now() -> datetime:
            async with SandboxAdmin.from_manifest(self.manifest) as admin:
                return await admin.now()

        return asyncio.run(now()).date()


# --- tinyproxy: one exit IP each ------------------------------------------------------------


@contextlib.contextmanager
def tinyproxies(count: int, max_clients: int) -> Iterator[list[str]]:
    """``count`` tinyproxy processes on 127.0.0.1, going out from 127.0.0.2, .3, ...; URLs."""
    binary = shutil.which("tinyproxy") or next(
        (p for p in ("/usr/bin/tinyproxy", "/usr/sbin/tinyproxy") if os.access(p, os.X_OK)), None
    )
    if binary is None:
        raise FileNotFoundError("tinyproxy is not installed (scripts/install-system-deps)")
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="bench-tinyproxy-") as tmp:
        try:
            urls = []
            for i in range(count):
                port, workdir = free_port(), Path(tmp) / str(i)
                workdir.mkdir()
                config = workdir / "tinyproxy.conf"
                config.write_text(
                    f"Port {port}\nListen 127.0.0.1\nBind 127.0.0.{i + 2}\nTimeout 60\n"
                    f"MaxClients {max_clients}\nAllow 127.0.0.0/8\n"
                    f'LogFile "{workdir / "log"}"\nLogLevel Warning\nSyslog Off\n'
                    f'PidFile "{workdir / "pid"}"\n'
                )
                processes.append(
                    subprocess.Popen(
                        [binary, "-d", "-c", str(config)],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                urls.append(f"http://127.0.0.1:{port}")
            for url in urls:
                port = int(url.rsplit(":", 1)[1])
                deadline = time.monotonic() + 10
                while True:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"tinyproxy on port {port} did not start") from None
                        time.sleep(0.02)
            yield urls
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


class PipeProxies:
    """A minimal forward proxy per exit IP, in a thread of this (otherwise idle) process.

    aiohttp pools a proxy connection per target host, so each client connection is piped, byte
    for byte and keep-alive intact, to the host named in its first request line, connecting
    from 127.0.0.N. The workaround for tinyproxy, which closes kept-alive connections (see the
    module's documentation).
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.urls: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: Any = None

    def __enter__(self) -> list[str]:
        import threading

        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            servers = []
            for i in range(self.count):
                bind = f"127.0.0.{i + 2}"
                server = loop.run_until_complete(
                    asyncio.start_server(
                        lambda r, w, b=bind: self._client(r, w, b), "127.0.0.1", 0, backlog=1024
                    )
                )
                servers.append(server)
                self.urls.append(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
            ready.set()
            loop.run_forever()
            for server in servers:
                server.close()
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.urls

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    @staticmethod
    async def _client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bind: str):
        upstream_writer = None
        try:
            first = await reader.readline()
            target = first.split()[1].decode().split("://", 1)[1].split("/", 1)[0]
            host, _, port = target.partition(":")
            up_reader, upstream_writer = await asyncio.open_connection(
                host, int(port or 80), local_addr=(bind, 0)
            )
            upstream_writer.write(first)

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                dst.close()

            await asyncio.gather(pipe(reader, upstream_writer), pipe(up_reader, writer))
        except (OSError, IndexError, ValueError):
            pass
        finally:
            writer.close()
            if upstream_writer is not None:
                upstream_writer.close()


# --- the child: the launcher being measured -------------------------------------------------


async def _credentials(manifest: dict[str, Any], customers: Sequence[int]) -> dict[tuple, Any]:
    from scrapeflow.sandbox import SandboxAdmin

    limit = asyncio.Semaphore(20)
    found: dict[tuple, Any] = {}
    async with SandboxAdmin.from_manifest(manifest) as admin:

        async def one(bank: str, n: int) -> None:
            async with limit:
                found[bank, n] = await admin.customer(bank, n)

        await asyncio.gather(*(one(b, n) for n in customers for b in BANKS))
    return found


async def _setup(db_url: str, manifest: dict[str, Any], customers: Sequence[int], vault: Any):
    from scrapeflow.banking import add_access, add_customer, migrate
    from scrapeflow.db import create_engine, session_factory

    await migrate(db_url)
    creds = await _credentials(manifest, customers)
    engine = create_engine(db_url)
    try:
        sessions = session_factory(engine)
        for n in customers:
            await add_customer(sessions, f"cust-{n}", f"Customer {n}")
            for bank in BANKS:
                cred = creds[bank, n]
                await add_access(
                    sessions, vault, f"cust-{n}", bank, cred["username"], cred["password"]
                )
    finally:
        await engine.dispose()


def _http_config(spec: dict[str, Any]) -> Any:
    from scrapeflow.http import HostPolicy, HttpConfig

    return HttpConfig(
        max_connections=spec["max_connections"],
        host=HostPolicy(concurrency=spec["host_concurrency"]),
        proxy_concurrency=spec["proxy_concurrency"],
    )


def _access_row(n: int, access: Any) -> dict[str, Any]:
    return {
        "customer": n,
        "bank": access.bank,
        "code": access.code.value,
        "detail": access.detail,
        "accounts": access.accounts,
        "movements": access.movements,
        "seconds": r3(access.seconds),
        "balances_seconds": r3(access.balances_seconds),
    }


def _traffic_by_bank(http: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    names = {url.split("://", 1)[1]: bank for bank, url in manifest["sites"].items()}
    traffic: dict[str, Any] = {}
    for key, stats in http.stats.hosts.items():
        bank = names.get(key.partition("@")[0], key)
        row = traffic.setdefault(bank, Counter())
        row.update(
            requests=stats.requests, throttled=stats.throttled, retries=stats.retries, ok=stats.ok
        )
        row.update({f"error:{k}": v for k, v in stats.errors.items()})
    return {bank: dict(row) for bank, row in sorted(traffic.items())}


def _machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _requests_per_ip(http: Any, manifest: dict[str, Any]) -> dict[str, list[int]]:
    """Per bank, the requests each exit IP sent it, fewest first: a bank's limit is per IP,
    so the busiest IP's share bounds its time."""
    names = {url.split("://", 1)[1]: bank for bank, url in manifest["sites"].items()}
    spread: dict[str, list[int]] = {}
    for key, slot in http.hosts.slots.items():
        host, _, proxy = key.partition("@")
        if proxy and host in names:
            spread.setdefault(names[host], []).append(slot.taken)
    return {bank: sorted(counts) for bank, counts in sorted(spread.items())}


async def _child(spec: dict[str, Any]) -> dict[str, Any]:
    from scrapeflow.banking import CredentialVault, Launcher, LaunchLimits
    from scrapeflow.http import HttpClient
    from scrapeflow.proxies import ProxyProviderFromList

    manifest = spec["manifest"]
    today = date.fromisoformat(spec["today"])
    vault = CredentialVault([CredentialVault.generate_key()])
    workdir = Path(spec["workdir"])
    db_url = spec["db_url"]
    customers: list[int] = spec["customers"]
    warmup: list[int] = spec.get("warmup", [])
    await _setup(db_url, manifest, warmup + customers, vault)
    limits = LaunchLimits(**spec["limits"])
    http_config = _http_config(spec["http"])

    def launcher(http: Any) -> Any:
        return Launcher(
            db_url,
            vault=vault,
            bank_urls=manifest["sites"],
            today=lambda: today,
            limits=limits,
            http=http,
            log_dir=workdir / "logs",
        )

    def new_http() -> Any:
        proxies = spec.get("proxies") or []
        provider = ProxyProviderFromList(proxies) if proxies else None
        return HttpClient(http_config, proxy_provider=provider)

    if spec["mode"] == "single":
        runs = []
        for n in warmup + customers:
            gc.collect()
            async with new_http() as http, launcher(http) as bank_launcher:
                report = await bank_launcher.refresh(f"cust-{n}")
                traffic = _traffic_by_bank(http, manifest)
            runs.append(
                {
                    "customer": n,
                    "warmup": n in warmup,
                    "balances_seconds": r3(report.balances_seconds),
                    "seconds": r3(report.seconds),
                    "accesses": [_access_row(n, a) for a in report.accesses],
                    "requests": {bank: t["requests"] for bank, t in traffic.items()},
                }
            )
        return {"runs": runs, "peak_rss_mb": round(peak_rss_mb(), 1)}

    # many customers at once
    async with new_http() as http, launcher(http) as bank_launcher:
        gc.collect()
        rss_before = current_rss_mb()
        peak_reset = reset_peak_rss()
        cpu_before = cpu_seconds_self()
        sampled_peak = rss_before
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal sampled_peak
            while not stop.is_set():
                sampled_peak = max(sampled_peak, current_rss_mb())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.1)

        lags: list[float] = []

        async def lag() -> None:
            # How late a 50 ms sleep wakes: what every callback waits for the loop.
            loop = asyncio.get_running_loop()
            while not stop.is_set():
                asked = loop.time()
                await asyncio.sleep(0.05)
                lags.append(loop.time() - asked - 0.05)

        sampler = asyncio.create_task(sample())
        lagger = asyncio.create_task(lag())
        started, machine_before = time.monotonic(), _machine_busy_seconds()
        reports = await bank_launcher.refresh_many([f"cust-{n}" for n in customers])
        total = time.monotonic() - started
        machine = _machine_busy_seconds() - machine_before
        stop.set()
        await sampler
        await lagger
        cpu = cpu_seconds_self() - cpu_before
        traffic = _traffic_by_bank(http, manifest)
        per_ip = _requests_per_ip(http, manifest)
    peak = peak_rss_mb() if peak_reset else sampled_peak
    accesses = [
        _access_row(n, a) for n, rep in zip(customers, reports, strict=True) for a in rep.accesses
    ]
    return {
        "seconds": r3(total),
        "cpu_seconds": round(cpu, 2),
        "customer_seconds": [r3(rep.seconds) for rep in reports],
        "customer_balances_seconds": [r3(rep.balances_seconds) for rep in reports],
        "accesses": accesses,
        "traffic": traffic,
        "requests_per_ip": per_ip,
        "machine_cores_busy": round(machine / total, 2),
        "loop_lag_ms": {
            "p50": r3(1000 * (percentile(lags, 0.5) or 0)),
            "p95": r3(1000 * (percentile(lags, 0.95) or 0)),
            "max": r3(1000 * max(lags, default=0)),
        },
        "rss_before_mb": round(rss_before, 1),
        "peak_rss_mb": round(max(peak, sampled_peak), 1),
        "peak_rss_source": "VmHWM reset before the launch" if peak_reset else "sampled every 0.1 s",
        "sampled_peak_rss_mb": round(sampled_peak, 1),
    }


def child_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    if spec.get("loop") == "uvloop":
        import uvloop

        result = uvloop.run(_child(spec))
    else:
        result = asyncio.run(_child(spec))
    print(json.dumps(result), flush=True)


# --- the bench: phases, summaries, table ----------------------------------------------------


@dataclass
class Phase:
    name: str
    spec: dict[str, Any]
    result: dict[str, Any]
    wall_seconds: float
    sandbox_cpu_seconds: float


def run_phase(name: str, spec: dict[str, Any], sandbox: SandboxProcess) -> Phase:
    print(f"  {name} ...", flush=True)
    cpu_before = cpu_seconds_of(sandbox.pid)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    sandbox_cpu = cpu_seconds_of(sandbox.pid) - cpu_before
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"phase {name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return Phase(name, spec, json.loads(lines[-1]), wall, sandbox_cpu)


def summarize_single(phase: Phase) -> dict[str, Any]:
    runs = [r for r in phase.result["runs"] if not r["warmup"]]
    warm = [r for r in phase.result["runs"] if r["warmup"]]
    balances = [r["balances_seconds"] for r in runs if r["balances_seconds"] is not None]
    movements = [r["seconds"] for r in runs]
    codes = Counter(a["code"] for r in runs for a in r["accesses"])
    out: dict[str, Any] = {
        "runs": len(runs),
        "balances_p50": r3(percentile(balances, 0.5)),
        "balances_p95": r3(percentile(balances, 0.95)),
        "movements_p50": r3(percentile(movements, 0.5)),
        "movements_p95": r3(percentile(movements, 0.95)),
        "codes": dict(codes),
        "failures": [a for r in runs for a in r["accesses"] if a["code"] != "success"],
        "first_in_process": warm[0] if warm else None,
        "sandbox_cpu_seconds": round(phase.sandbox_cpu_seconds, 2),
        "peak_rss_mb": phase.result["peak_rss_mb"],
    }
    out["vs_seed"] = {
        "balances_p95": ratio(out["balances_p95"], SEED_TARGETS["balances"]),
        "movements_p95": ratio(out["movements_p95"], SEED_TARGETS["movements"]),
    }
    out["vs_goal"] = {
        "balances_p95": ratio(out["balances_p95"], GOALS["balances"]),
        "movements_p95": ratio(out["movements_p95"], GOALS["movements"]),
    }
    slowest = {}
    for bank in BANKS:
        times = [a["seconds"] for r in runs for a in r["accesses"] if a["bank"] == bank]
        slowest[bank] = {"p50": r3(percentile(times, 0.5)), "p95": r3(percentile(times, 0.95))}
    out["access_seconds_by_bank"] = slowest
    out["requests_by_bank_median"] = {
        bank: sorted(r["requests"].get(bank, 0) for r in runs)[len(runs) // 2] for bank in BANKS
    }
    out["per_run"] = [
        {"customer": r["customer"], "balances": r["balances_seconds"], "movements": r["seconds"]}
        for r in runs
    ]
    return out


def summarize_many(phase: Phase) -> dict[str, Any]:
    res = phase.result
    accesses = res["accesses"]
    codes = Counter(a["code"] for a in accesses)
    per_customer = res["customer_seconds"]
    delta = res["peak_rss_mb"] - res["rss_before_mb"]
    limits = phase.spec["limits"]
    cap = min(len(accesses), limits["overall"], len(BANKS) * limits["per_bank"])
    by_bank = {}
    for bank in BANKS:
        times = [a["seconds"] for a in accesses if a["bank"] == bank]
        by_bank[bank] = {"p50": r3(percentile(times, 0.5)), "max": r3(max(times, default=None))}
    floor = rate_floor(res["traffic"], len(phase.spec.get("proxies") or []))
    batch_vs_floor = ratio(res["seconds"], floor["seconds"]) if floor["seconds"] else None
    cpu_ms = round(1000 * res["cpu_seconds"] / len(accesses), 1)
    return {
        "customers": len(per_customer),
        "accesses": len(accesses),
        "total_seconds": res["seconds"],
        "vs_goal_total": ratio(res["seconds"], GOALS["many_total"]),
        "rate_floor": floor,
        "batch_vs_floor": batch_vs_floor,
        "batch_vs_floor_goal": GOALS["batch_vs_floor"],
        # A batch that lost accesses read less than the banks hold: it passes nothing.
        "batch_vs_floor_verdict": (
            verdict(batch_vs_floor, GOALS["batch_vs_floor"])
            if codes.get("success", 0) == len(accesses)
            else "FAIL (not every access succeeded)"
        ),
        "launcher_cpu_ms_per_access": cpu_ms,
        "launcher_cpu_ms_per_access_goal": GOALS["cpu_ms_per_access"],
        "launcher_cpu_verdict": verdict(cpu_ms, GOALS["cpu_ms_per_access"]),
        "customer_p50": r3(percentile(per_customer, 0.5)),
        "customer_p95": r3(percentile(per_customer, 0.95)),
        "customer_balances_p95": r3(
            percentile([b for b in res["customer_balances_seconds"] if b is not None], 0.95)
        ),
        "access_seconds_by_bank": by_bank,
        "codes": dict(codes),
        "failures": [a for a in accesses if a["code"] != "success"][:30],
        "accounts": sum(a["accounts"] for a in accesses),
        "movements": sum(a["movements"] for a in accesses),
        "traffic": res["traffic"],
        "requests_per_ip": res.get("requests_per_ip", {}),
        "loop_lag_ms": res.get("loop_lag_ms"),
        "machine_cores_busy": res.get("machine_cores_busy"),
        "launcher_cpu_seconds": res["cpu_seconds"],
        "launcher_cpu_share": round(res["cpu_seconds"] / res["seconds"], 2),
        "sandbox_cpu_seconds": round(phase.sandbox_cpu_seconds, 2),
        "sandbox_cpu_share": round(phase.sandbox_cpu_seconds / res["seconds"], 2),
        "rss_before_mb": res["rss_before_mb"],
        "peak_rss_mb": res["peak_rss_mb"],
        "peak_rss_source": res["peak_rss_source"],
        "mem_per_access_mb": round(delta / len(accesses), 3),
        "concurrency_cap": cap,
        "mem_per_access_at_cap_mb": round(delta / cap, 3),
        "settings": {
            "limits": limits,
            "http": phase.spec["http"],
            "proxies": len(phase.spec.get("proxies") or []),
            "proxy_kind": phase.spec.get("proxy_kind"),
            "db": phase.spec["db_kind"],
        },
    }


def fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def print_single(title: str, s: dict[str, Any]) -> None:
    print(f"\n{title}: one customer, {len(BANKS)} accesses, cold, {s['runs']} runs")
    print(f"  {'':24}{'p50':>9}{'p95':>9}   {'p95/seed':>9}{'p95/goal':>9}")
    for key, label in (
        ("balances", "time to all balances"),
        ("movements", "time to all movements"),
    ):
        print(
            f"  {label:24}{fmt(s[f'{key}_p50'], ' s'):>9}{fmt(s[f'{key}_p95'], ' s'):>9}   "
            f"{fmt(s['vs_seed'][f'{key}_p95']):>9}{fmt(s['vs_goal'][f'{key}_p95']):>9}"
            f"   (seed {SEED_TARGETS[key]:g} s, goal {GOALS[key]:g} s)"
        )
    banks = ", ".join(
        f"{b} p50 {fmt(v['p50'], ' s')} p95 {fmt(v['p95'], ' s')}"
        for b, v in s["access_seconds_by_bank"].items()
    )
    print(f"  per access: {banks}")
    print(f"  requests per access (median): {s['requests_by_bank_median']}")
    first = s["first_in_process"]
    if first:
        print(
            f"  first refresh in the process (not counted): balances "
            f"{fmt(first['balances_seconds'], ' s')}, movements {fmt(first['seconds'], ' s')}"
        )
    print(f"  result codes: {s['codes']}; launcher peak RSS {s['peak_rss_mb']} MB")
    for failure in s["failures"]:
        print(f"  FAILED: {failure}")


def print_many(title: str, s: dict[str, Any]) -> None:
    st = s["settings"]
    print(f"\n{title}: {s['customers']} customers at once ({s['accesses']} accesses)")
    print(
        f"  settings: {st['proxies']} exit IPs ({st['proxy_kind']}), limits {st['limits']}, "
        f"http {st['http']}, db {st['db']}"
    )
    print(
        f"  total {fmt(s['total_seconds'], ' s')} (goal 60 s: x{fmt(s['vs_goal_total'])}); "
        f"per customer p50 {fmt(s['customer_p50'], ' s')} p95 {fmt(s['customer_p95'], ' s')}; "
        f"balances p95 {fmt(s['customer_balances_p95'], ' s')}"
    )
    banks = ", ".join(
        f"{b} p50 {fmt(v['p50'], ' s')} max {fmt(v['max'], ' s')}"
        for b, v in s["access_seconds_by_bank"].items()
    )
    print(f"  per access: {banks}")
    print(f"  result codes: {s['codes']} ({s['accounts']} accounts, {s['movements']} movements)")
    for bank, t in s["traffic"].items():
        print(f"  traffic {bank}: {t}")
    for bank, counts in s["requests_per_ip"].items():
        print(f"  {bank} requests per exit IP: {counts}")
    if s["loop_lag_ms"]:
        print(f"  launcher's event loop: a 50 ms sleep woke late by {s['loop_lag_ms']} ms")
    print(
        f"  CPU: launcher {s['launcher_cpu_seconds']} s ({s['launcher_cpu_share']} of a core), "
        f"sandbox {s['sandbox_cpu_seconds']} s ({s['sandbox_cpu_share']} of a core); the "
        f"machine, all processes (proxies too): {s['machine_cores_busy']} of {os.cpu_count()} "
        "cores busy"
    )
    floor = s["rate_floor"]
    limits = ", ".join(
        f"{bank} {b['needed_requests']} requests at {b['rate_per_ip']:g}/s per IP "
        f"(burst {b['burst_per_ip']:g}): {b['seconds']} s"
        for bank, b in floor["by_bank"].items()
    )
    print(
        f"  rate-limit floor over {floor['exit_ips']} exit IP(s): {fmt(floor['seconds'], ' s')} "
        f"({limits or 'no limited bank'}); batch / floor {fmt(s['batch_vs_floor'])} "
        f"(goal <= {s['batch_vs_floor_goal']:g}): {s['batch_vs_floor_verdict']}"
    )
    print(
        f"  launcher CPU per access {s['launcher_cpu_ms_per_access']:.1f} ms "
        f"(goal <= {s['launcher_cpu_ms_per_access_goal']:g} ms): {s['launcher_cpu_verdict']}"
    )
    print(
        f"  memory: RSS before {s['rss_before_mb']} MB, peak {s['peak_rss_mb']} MB "
        f"({s['peak_rss_source']}); per access {s['mem_per_access_mb'] * 1024:.0f} KB over "
        f"{s['accesses']}, {s['mem_per_access_at_cap_mb'] * 1024:.0f} KB over the "
        f"{s['concurrency_cap']} the limits let run at once (seed: ~300 MB a page)"
    )
    for failure in s["failures"]:
        print(f"  FAILED: {failure}")


async def _pg(statement: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(PG_ADMIN)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextlib.contextmanager
def postgres_db(name: str) -> Iterator[str]:
    asyncio.run(_pg(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(_pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="3 cold runs, 40 customers")
    parser.add_argument("--runs", type=int, help="cold one-customer runs (default 10)")
    parser.add_argument("--customers", type=int, help="customers at once (default 200)")
    parser.add_argument("--proxies", type=int, default=8, help="exit IPs (tinyproxy), 0: none")
    parser.add_argument(
        "--proxy-kind",
        choices=["tinyproxy", "pipe", "both"],
        default="both",
        help="exit IPs through tinyproxy, through this script's own pipe proxy, or both",
    )
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL")
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="the launcher's event loop (asyncio: as scrapeflow bank refresh runs it)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child)
        return
    runs = args.runs or (3 if args.quick else 10)
    many = args.customers or (40 if args.quick else 200)

    shipped_http = {"max_connections": 400, "host_concurrency": 16, "proxy_concurrency": 16}
    shipped_limits = {"per_bank": 50, "overall": 200, "access_timeout": 300.0}
    tuned_http = {"max_connections": 600, "host_concurrency": 16, "proxy_concurrency": 64}
    tuned_limits = {"per_bank": 200, "overall": 600, "access_timeout": 300.0}

    numbers = iter(usable_customers(1 + runs + 4 * many + 8))
    take = lambda k: [next(numbers) for _ in range(k)]  # noqa: E731
    out: dict[str, Any] = {"machine": machine_info(), "settings": {}, "results": {}}
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-banking-") as tmp,
        SandboxProcess(Path(tmp)) as sandbox,
    ):
        today = sandbox.today()
        manifest = sandbox.manifest
        out["settings"] = {
            "sandbox": {
                "seed": SEED,
                "hostility": manifest["hostility"],
                "latency_ms": "bank defaults (80-250)",
                "customers": manifest["customers"],
                "today": today.isoformat(),
            },
            "loop": args.loop,
            "cold_runs": runs,
            "customers_at_once": many,
            "initial_days": 14,
            "shipped": {"http": shipped_http, "limits": shipped_limits},
            "tuned": {"http": tuned_http, "limits": tuned_limits, "proxies": args.proxies},
        }
        print(f"sandbox at {manifest['sites']} (today {today}); launcher runs in child processes")

        def spec(mode: str, db_url: str, customers: list[int], **extra: Any) -> dict[str, Any]:
            workdir = Path(tempfile.mkdtemp(dir=tmp))
            return {
                "mode": mode,
                "manifest": manifest,
                "today": today.isoformat(),
                "workdir": str(workdir),
                "db_url": db_url.replace("{dir}", str(workdir)),
                "db_kind": "sqlite" if db_url.startswith("sqlite") else "postgresql",
                "customers": customers,
                "loop": args.loop,
                "http": shipped_http,
                "limits": shipped_limits,
                **extra,
            }

        sqlite = "sqlite+aiosqlite:///{dir}/bench.db"
        warm, single = take(1), take(runs)
        phase = run_phase(
            "one customer, cold (SQLite)", spec("single", sqlite, single, warmup=warm), sandbox
        )
        out["results"]["single_sqlite"] = summarize_single(phase)

        phase = run_phase(
            f"{many} customers, as shipped (SQLite)", spec("many", sqlite, take(many)), sandbox
        )
        out["results"]["many_shipped_sqlite"] = summarize_many(phase)

        proxy_keys: list[str] = []
        kinds = {"both": ["tinyproxy", "pipe"]}.get(args.proxy_kind, [args.proxy_kind])
        for kind in kinds if args.proxies else []:
            key = f"many_{kind}_sqlite"
            exits: Any = (
                tinyproxies(args.proxies, max_clients=256)
                if kind == "tinyproxy"
                else PipeProxies(args.proxies)
            )
            try:
                with exits as proxies:
                    extra = {"http": tuned_http, "limits": tuned_limits, "proxies": proxies}
                    extra["proxy_kind"] = kind
                    phase = run_phase(
                        f"{many} customers, {args.proxies} exit IPs via {kind} (SQLite)",
                        spec("many", sqlite, take(many), **extra),
                        sandbox,
                    )
                    out["results"][key] = summarize_many(phase)
                    proxy_keys.append(key)
                    if args.postgres and kind == kinds[-1]:
                        name = f"bench_banking_{os.getpid()}"
                        with postgres_db(name) as pg:
                            phase = run_phase(
                                f"{many} customers, {args.proxies} exit IPs via {kind} (PG)",
                                spec("many", pg, take(many), **extra),
                                sandbox,
                            )
                        key = f"many_{kind}_postgres"
                        out["results"][key] = summarize_many(phase)
                        proxy_keys.append(key)
            except FileNotFoundError as exc:
                print(f"  skipped the {kind} phase: {exc}")
                out["results"][key] = {"skipped": str(exc)}
        if args.postgres:
            name = f"bench_banking_single_{os.getpid()}"
            with postgres_db(name) as pg:
                phase = run_phase(
                    "one customer, cold (PostgreSQL)",
                    spec("single", pg, take(runs), warmup=take(1)),
                    sandbox,
                )
            out["results"]["single_postgres"] = summarize_single(phase)

    out["bench_seconds"] = round(time.monotonic() - started, 1)
    print_single("SQLite", out["results"]["single_sqlite"])
    if "single_postgres" in out["results"]:
        print_single("PostgreSQL", out["results"]["single_postgres"])
    print_many("As shipped, SQLite", out["results"]["many_shipped_sqlite"])
    for key in proxy_keys:
        print_many(key.replace("_", " "), out["results"][key])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nbench took {out['bench_seconds']} s; results in {RESULTS}")


if __name__ == "__main__":
    main()
