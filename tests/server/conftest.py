"""A real ``scrapeflow serve`` process on port 0, with the sandbox's banks, and customers whose
accesses hold the sandbox's credentials.

* ``service``: the service on the embedded job backend (it runs its jobs itself), over SQLite;
* ``job_service``: the same on each job backend, for the tests of what jobs do: ``embedded``
  as above, and ``procrastinate``, over a fresh PostgreSQL database, where the service only
  submits and a ``scrapeflow worker`` process with the same settings runs the jobs (what it
  does reaches the service through the database: rows, and events by LISTEN/NOTIFY).

Every process is stopped at teardown (SIGTERM, a bounded wait, then SIGKILL); a worker that
did not end cleanly (exit 0) fails the test that ran it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from scrapeflow.banking import CredentialVault, migrate
from scrapeflow.db import create_engine
from scrapeflow.sandbox import Sandbox
from scrapeflow.server import create_key
from tests._servers import add_sandbox_customers

BANKS = ("formbank", "apibank", "legacybank")
JOB_BACKENDS = ("embedded", "procrastinate")
"""Who runs the jobs: the service itself, or ``scrapeflow worker`` processes."""

# Seconds: a worker given SIGTERM lets running jobs finish within its grace (10 s), then hands
# them back; the bound leaves room for a loaded machine before it is killed.
_WORKER_STOP_BOUND = 30.0


@dataclass
class Service:
    url: str
    env: dict[str, str]
    db_url: str
    process: subprocess.Popen[str]
    keys: dict[str, str] = field(default_factory=dict)
    backend: str = "embedded"
    """The job backend: ``embedded`` or ``procrastinate`` (then ``workers`` run the jobs)."""
    workers: list[subprocess.Popen[str]] = field(default_factory=list)

    def key(self, *scopes: str, customer: str | None = None) -> str:
        """An API key with these scopes (made once per test and scope set)."""
        name = ",".join(sorted(scopes)) + (f"@{customer}" if customer else "")
        if name not in self.keys:
            self.keys[name] = asyncio.run(self._make_key(scopes, customer))
        return self.keys[name]

    async def _make_key(self, scopes: tuple[str, ...], customer: str | None) -> str:
        engine = create_engine(self.db_url)
        try:
            token, _ = await create_key(
                engine, scopes=scopes, customers=[customer] if customer else []
            )
            return token
        finally:
            await engine.dispose()

    def client(self, *scopes: str, customer: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key(*scopes, customer=customer)}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def start_service(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "scrapeflow", "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        process.kill()
        said = process.stderr.read()[-2000:] if process.stderr is not None else ""
        stop_service(process)  # reaped, its pipes closed
        raise AssertionError(f"serve did not start: {line!r} {said!r}")
    return process, line.split()[-1]


def stop_service(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def start_worker(
    env: Mapping[str, str], *, concurrency: int = 2, log: Path | None = None
) -> subprocess.Popen[str]:
    """A ``scrapeflow worker`` process, once it says it takes jobs (a failure with its output
    if it never does). ``log``: where its stderr goes (a file nobody has to drain), else a
    pipe."""
    with contextlib.ExitStack() as files:  # a log file closes here: the child has its copy
        worker = subprocess.Popen(
            [sys.executable, "-m", "scrapeflow", "worker", "--concurrency", str(concurrency)],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if log is None else files.enter_context(log.open("a")),
            text=True,
        )
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if not line.startswith("worker taking jobs"):
        worker.kill()
        if log is not None:
            said = log.read_text(errors="replace")
        else:
            said = worker.stderr.read() if worker.stderr is not None else ""
        stop_worker(worker)  # reaped, its pipes closed
        raise AssertionError(f"worker did not start: {line!r} {said[-2000:]!r}")
    return worker


def stop_worker(worker: subprocess.Popen[str]) -> int:
    """SIGTERM, a bounded wait, SIGKILL after; the worker's exit code (-9 when killed)."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=_WORKER_STOP_BOUND)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)
    for stream in (worker.stdout, worker.stderr):
        if stream is not None:
            stream.close()
    return worker.returncode


async def add_customers(sandbox: Sandbox, db_url: str, key: str, numbers: list[int]) -> None:
    """Customers ``cust-N`` with an access at every bank, holding the sandbox's credentials."""
    await migrate(db_url)
    await add_sandbox_customers(sandbox, db_url, key, numbers, BANKS)


def service_database(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> str:
    """The service's database for ``backend``: a SQLite file in ``tmp_path`` (embedded), a
    fresh PostgreSQL database (procrastinate: it runs on PostgreSQL only)."""
    if backend == "procrastinate":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"


def service_env(
    tmp_path: Path, sandbox: Sandbox, db_url: str, *, customers: list[int], backend: str
) -> dict[str, str]:
    """The settings of a service (and its workers) on ``db_url`` against the sandbox, with
    customers ``cust-N`` for ``customers`` added first (the database migrated)."""
    manifest = tmp_path / "sandbox.json"
    manifest.write_text(json.dumps(sandbox.manifest()))
    vault_key = CredentialVault.generate_key()
    asyncio.run(add_customers(sandbox, db_url, vault_key, customers))
    return {
        **os.environ,
        "SCRAPEFLOW_DB_URL": db_url,
        "SCRAPEFLOW_JOBS_BACKEND": backend,
        "SCRAPEFLOW_VAULT_KEYS": vault_key,
        "SCRAPEFLOW_SANDBOX_MANIFEST": str(manifest),
        "SCRAPEFLOW_LOG_DIR": str(tmp_path / "logs"),
        "SCRAPEFLOW_JOBS_DIR": str(tmp_path / "jobs"),  # never the checkout's own jobs/
        "PYTHONUNBUFFERED": "1",
        "SCRAPEFLOW_SCHEDULE": "off",  # no daily run in the middle of a test
        # One process (the default is one per core): the limits kept in memory a test counts
        # are one process's; tests/server/test_processes.py runs several, and the default. Set
        # here too for module-scoped services, made before the per-test environment.
        "SCRAPEFLOW_API_PROCESSES": "1",
        # The sandbox and the tests' receivers listen on 127.0.0.1: allowed explicitly, as an
        # operator allows an on-premises receiver (the egress tests narrow it).
        "SCRAPEFLOW_EGRESS_ALLOW": "127.0.0.1",
    }


@contextlib.contextmanager
def running_service(
    tmp_path: Path,
    sandbox: Sandbox,
    db_url: str,
    *,
    customers: list[int],
    backend: str = "embedded",
    env: Mapping[str, str] | None = None,
) -> Iterator[Service]:
    """The service on ``db_url`` with customers ``cust-N`` for ``customers``; on
    ``procrastinate``, with a worker process of the same settings, which runs the jobs.

    ``env``: more settings, for the service and its workers alike. Everything started is
    stopped at exit; a worker that did not end with 0 is a failure, with its log's end."""
    if backend not in JOB_BACKENDS:
        raise ValueError(f"unknown job backend {backend!r}: one of {', '.join(JOB_BACKENDS)}")
    settings = service_env(tmp_path, sandbox, db_url, customers=customers, backend=backend)
    settings |= env or {}
    log = tmp_path / "worker.log"
    workers: list[subprocess.Popen[str]] = []
    running: Service | None = None
    try:
        process, url = start_service(settings)
        running = Service(url, settings, db_url, process, backend=backend, workers=workers)
        if backend == "procrastinate":
            # Once the service is up, not alongside it: both create the tables they miss at
            # start, and two processes doing so at once on a fresh database may collide
            # ("relation scrapeflow_jobs already exists"). Four at once: more than any test
            # here needs.
            workers.append(start_worker(settings, concurrency=4, log=log))
        yield running
    finally:
        codes = [stop_worker(worker) for worker in workers]
        if running is not None:
            stop_service(running.process)  # a test may have restarted it
    if any(code != 0 for code in codes):
        said = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"a worker ended with {codes}, not 0, at SIGTERM: {said}")


@pytest.fixture
def service(request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox) -> Iterator[Service]:
    """The service, with customers cust-1, cust-2 (a one-time code at legacybank) and cust-3;
    it runs its jobs itself (the embedded backend), over SQLite."""
    db_url = service_database(request, tmp_path, "embedded")
    with running_service(tmp_path, sandbox, db_url, customers=[1, 2, 3]) as running:
        yield running


@pytest.fixture(params=JOB_BACKENDS)
def job_backend(request: pytest.FixtureRequest) -> str:
    """Each job backend in turn: ``embedded`` (the service runs its jobs, over SQLite) and
    ``procrastinate`` (a worker process runs them, over PostgreSQL)."""
    backend: str = request.param
    return backend


@pytest.fixture
def job_service(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, job_backend: str
) -> Iterator[Service]:
    """The ``service`` (customers cust-1, cust-2, cust-3) on each job backend."""
    db_url = service_database(request, tmp_path, job_backend)
    with running_service(
        tmp_path, sandbox, db_url, customers=[1, 2, 3], backend=job_backend
    ) as running:
        yield running
