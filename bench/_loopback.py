"""Shared pieces of the benchmarks: a loopback server process, client processes, measurements.

Every bench follows one pattern, so its figures mean the same thing:

* the site runs in a process of its own (``LoopbackServer``), so the client being measured does
  not share its event loop or its GIL with the server;
* each contender runs in a fresh process (``run_client``) that prints one JSON line; its peak RSS
  is then its own, not the bench's nor the previous contender's;
* the CPU time of both processes is taken around each run, so a run whose server was saturated
  is shown as such instead of being mistaken for a slow client.

Run as a script, this module is the server process::

    python bench/_loopback.py --pages 100000 --warm 20000 [--latency-ms 100]
    # prints http://127.0.0.1:PORT on stdout once ready; serves until stdin closes or SIGTERM
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import json
import os
import platform
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REPO = Path(__file__).resolve().parent.parent


# --- measurements ---------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set size, in MB: ``VmHWM``, the high-water mark of its own
    memory map.

    Not ``getrusage().ru_maxrss``: Linux carries it across ``exec``, and ``subprocess`` starts
    children with ``vfork``, so a child's ``ru_maxrss`` is at least its parent's RSS at the
    time it was started (the bench's own ~40 MB here, 300 MB under a parent holding 300 MB).
    """
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def current_rss_mb() -> float:
    """This process's resident set size now, in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_SIZE / 2**20


def cpu_seconds_self() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_seconds_of(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (from ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces; the fields after its ')' are fixed.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def child_pids(name: str) -> list[int]:
    """The pids of this process's children whose command is ``name``."""
    found = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
            for pid in f.read().split():
                with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as comm:
                    if comm.read().strip() == name:
                        found.append(int(pid))
    return found


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 on)."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces; the fields after its ')' are fixed.
        return f.read().rsplit(")", 1)[1].split()


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``, of its children that ended (``cutime + cstime``) and of its live
    descendants; 0 for a process gone."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError, IndexError):
            fields = _stat_fields(current)
            total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLOCK_TICKS
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(child) for child in f.read().split())
    return total


def own_cpu_seconds(pid: int) -> float | None:
    """``utime + stime`` of ``pid``; None once it is gone."""
    try:
        fields = _stat_fields(pid)
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class PostgresCpu(threading.Thread):
    """The CPU seconds of the PostgreSQL backends serving database ``name``, from its start
    (a local server: its processes' ``/proc`` entries are read).

    Every ``every`` seconds the backends' pids are read from ``pg_stat_activity`` and each
    one's CPU from ``/proc``: a backend there at the start counts from its CPU then, one seen
    later from zero (it was born in the window). Also the most backends seen at once.
    """

    def __init__(self, name: str, *, every: float = 0.2, admin_url: str = PG_ADMIN) -> None:
        super().__init__(daemon=True)
        import psycopg

        self.name = name
        self.every = every
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.peak_backends = 0
        self._halt = threading.Event()
        self._connection = psycopg.connect(admin_url, autocommit=True)
        self._sample(starting=True)

    def _sample(self, *, starting: bool = False) -> None:
        rows = self._connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.name,)
        ).fetchall()
        self.peak_backends = max(self.peak_backends, len(rows))
        for (pid,) in rows:
            used = own_cpu_seconds(pid)
            if used is None:
                continue
            self.first.setdefault(pid, used if starting else 0.0)
            self.last[pid] = used

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self._sample()

    def halt(self) -> float:
        """Stop sampling (after one last sample); the CPU seconds counted."""
        self._halt.set()
        if self.is_alive():
            self.join(5)
        self._sample()
        self._connection.close()
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


def url_key(url: str) -> str:
    """The task key of ``url`` as the CLI makes it: the MD5 of the URL, hex."""
    return hashlib.md5(url.encode(), usedforsecurity=False).hexdigest()


def page_urls(base_url: str, count: int) -> Iterator[str]:
    """``count`` distinct page URLs of the plain site, made lazily."""
    return (f"{base_url}/page/{n}" for n in range(count))


def filesystem_of(path: Path) -> str:
    """The type of the filesystem holding ``path`` (``ext4``, ``tmpfs``...), from the mounts."""
    path = path.resolve()
    best, fstype = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 3:
                continue
            mount = fields[1].replace("\\040", " ")
            inside = path == Path(mount) or Path(mount) in path.parents
            if inside and len(mount) > len(best):
                best, fstype = mount, fields[2]
    return fstype


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine_info() -> dict[str, Any]:
    """What the figures were measured on, for the README to cite."""
    cpu_model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "aiohttp": aiohttp.__version__,
        "event_loop": "asyncio (default)",
        "git_commit": commit + ("-dirty" if dirty and commit else ""),
    }


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


# --- the server process ---------------------------------------------------------------------


class LoopbackServer:
    """The sandbox plain site, served by a subprocess on 127.0.0.1 (port chosen by the OS).

    ``warm`` pages are rendered once at startup so that serving them costs the server only
    aiohttp's own work: the site makes each page from random draws (~170 µs), more than a
    whole request costs the client, and a server that slow would be what the bench measures.
    ``latency_ms`` delays every response by that many milliseconds (the site's own
    ``SiteConfig.latency_ms``, an ``asyncio.sleep`` before the handler), as a distant server.

    >>> with LoopbackServer(pages=100_000, warm=20_000) as server:  # doctest: +SKIP
    ...     server.url, server.cpu_seconds()
    """

    def __init__(
        self,
        *,
        pages: int,
        warm: int = 0,
        latency_ms: float = 0.0,
        startup_timeout: float = 300.0,
    ) -> None:
        self.pages = pages
        self.warm = min(warm, pages)
        self.latency_ms = latency_ms
        self.startup_timeout = startup_timeout
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> LoopbackServer:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            f"--pages={self.pages}",
            f"--warm={self.warm}",
            f"--latency-ms={self.latency_ms}",
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if self._process.stdout is None:  # pragma: no cover - stdout=PIPE gives one
            raise RuntimeError("no stdout pipe to the server")
        deadline = time.monotonic() + self.startup_timeout
        line = ""
        while not line.startswith("http://"):
            remaining = deadline - time.monotonic()
            ready = remaining > 0 and select.select([self._process.stdout], [], [], remaining)[0]
            line = self._process.stdout.readline() if ready else ""
            if not line:
                self.__exit__(None, None, None)
                raise RuntimeError("the loopback server did not start (no URL on its stdout)")
        self.url = line.strip()
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()  # the server's cue to stop
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the server is not running")
        return self._process.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds_of(self.pid)


DOCS_ROOT = Path("/usr/share/doc/python3-doc/html")
"""A real site to serve: the Python documentation (Debian's ``python3-doc``, ~530 pages)."""


def docs_pages(root: Path = DOCS_ROOT) -> list[str]:
    """The HTML pages under ``root``, as paths relative to it, sorted (the same every run)."""
    root = root.resolve()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.html"))


def docs_urls(base_url: str, count: int, pages: Sequence[str]) -> Iterator[str]:
    """``count`` distinct URLs over ``pages``: each page again and again, as ``?i=N``."""
    return (f"{base_url}/{pages[n % len(pages)]}?i={n}" for n in range(count))


class NginxServer:
    """nginx serving a static directory on 127.0.0.1 (one worker process, no access log).

    The bench's clients are Python; a Python server as fast as they are would be half of what
    is measured, so the client benches fetch a real site from nginx: its CPU per page is a
    small fraction of any client's. ``latency_ms`` is not offered: nginx cannot delay answers.

    >>> with NginxServer(DOCS_ROOT) as server:  # doctest: +SKIP
    ...     server.url, server.cpu_seconds()
    """

    def __init__(self, root: Path, *, executable: str = "/usr/sbin/nginx") -> None:
        self.root = root.resolve()
        self.executable = executable
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._prefix: tempfile.TemporaryDirectory[str] | None = None

    @staticmethod
    def available(root: Path = DOCS_ROOT, executable: str = "/usr/sbin/nginx") -> bool:
        return Path(executable).exists() and root.is_dir()

    def __enter__(self) -> NginxServer:
        self._prefix = tempfile.TemporaryDirectory(prefix="bench-nginx-")
        prefix = Path(self._prefix.name)
        port = _free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(
            f"""daemon off; master_process off; worker_processes 1;
pid {prefix}/nginx.pid; error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  client_body_temp_path {prefix}; proxy_temp_path {prefix}; fastcgi_temp_path {prefix};
  uwsgi_temp_path {prefix}; scgi_temp_path {prefix};
  types {{ text/html html; }} default_type application/octet-stream;
  server {{ listen 127.0.0.1:{port} backlog=4096; root {self.root}; }}
}}
"""
        )
        self._process = subprocess.Popen([self.executable, "-p", str(prefix), "-c", str(conf)])
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = (prefix / "error.log").read_text() if (prefix / "error.log").exists() else ""
                self.__exit__(None, None, None)
                raise RuntimeError(f"nginx did not start on port {port}: {log[-2000:]}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._prefix is not None:
            self._prefix.cleanup()
            self._prefix = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("nginx is not running")
        return self._process.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds_of(self.pid)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the sandbox plain site on loopback.")
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--warm", type=int, default=0, help="pages rendered ahead, 0..N-1")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay of every response")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.pages, args.warm, args.latency_ms))


async def _serve(pages: int, warm: int, latency_ms: float = 0.0) -> None:
    from scrapeflow.sandbox import PlainSite, SiteConfig, serve

    class RenderedPlainSite(PlainSite):
        """The plain site, its pages rendered once and kept (same bytes, a dict lookup)."""

        def __init__(self, config: SiteConfig) -> None:
            super().__init__(config)
            self.rendered: dict[int, str] = {}

        def page_html(self, n: int) -> str:
            html = self.rendered.get(n)
            if html is None:
                html = self.rendered[n] = super().page_html(n)
            return html

    site = RenderedPlainSite(SiteConfig(pages=pages, latency_ms=(latency_ms, latency_ms)))
    for n in range(warm):
        site.page_html(n)
    gc.collect()
    gc.freeze()  # the rendered pages never die: keep the collector from rescanning them
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # stdin closing (the bench exiting, even by a crash) stops the server too.
    loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.buffer.read1() or stop.set())
    async with serve(site.app()) as base_url:
        print(base_url, flush=True)
        await stop.wait()


# --- client processes -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientRun:
    """One contender's run in its own process: the JSON report it printed.

    The report holds ``seconds`` (the measured window, imports and setup excluded) and the CPU
    seconds the client (``cpu_seconds``) and the server (``server_cpu_seconds``) used in it.
    """

    report: dict[str, Any]
    wall_seconds: float  # as seen by the bench: process start and imports included

    @property
    def seconds(self) -> float:
        return float(self.report["seconds"])

    @property
    def pages_per_second(self) -> float:
        return self.report["tasks"] / self.seconds if self.seconds > 0 else 0.0

    @property
    def client_cpu_share(self) -> float:
        """The client's CPU time over its measured time: 1.0 is one core kept busy."""
        return self.report.get("cpu_seconds", 0.0) / self.seconds if self.seconds > 0 else 0.0

    @property
    def server_cpu_share(self) -> float:
        """The server's CPU time over the same window."""
        used = self.report.get("server_cpu_seconds", 0.0)
        return used / self.seconds if self.seconds > 0 else 0.0


def run_client(command: Sequence[str]) -> ClientRun:
    """Run a client process that prints its report as the last line of stdout (JSON)."""
    started = time.monotonic()
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"client {' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"client {' '.join(command)} printed nothing:\n{done.stderr[-4000:]}")
    return ClientRun(json.loads(lines[-1]), wall)


def client_report(**fields: Any) -> None:
    """Print a client's report (its peak RSS added) as the last line of stdout."""
    fields.setdefault("peak_rss_mb", round(peak_rss_mb(), 1))
    print(json.dumps(fields), flush=True)


# --- the bare aiohttp loop: the baseline every client bench compares to ---------------------


async def bare_fetch_all(urls: Iterator[str], directory: Path, concurrency: int) -> int:
    """GET each URL with one session and ``concurrency`` workers, writing each body to
    ``<directory>/<md5(url)>.scrape`` and taking its MD5 (the digest a ``scrape`` status
    records, cheaper than the SHA-384 a fetcher takes). No status, no retry, no atomic write.
    Returns errors.

    The connector is configured as ``execute_async`` configures its own, so both sides open
    the same number of connections.
    """
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:

        async def worker() -> None:
            nonlocal errors
            for url in urls:
                try:
                    async with session.get(url) as response:
                        body = await response.read()
                        ok = response.status == 200
                except aiohttp.ClientError:
                    ok = False
                if not ok:
                    errors += 1
                    continue
                hashlib.md5(body, usedforsecurity=False).hexdigest()
                with open(directory / f"{url_key(url)}.scrape", "wb") as f:
                    f.write(body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors


if __name__ == "__main__":
    _serve_main()
