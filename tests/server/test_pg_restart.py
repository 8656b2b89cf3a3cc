"""PostgreSQL restarted mid-run: the service and its workers reconnect, the run completes, and
nothing is lost or doubled.

The database is a PostgreSQL server of the test's own (``tests/_pginstance.py``), so stopping
it disturbs no other test. The service runs on the procrastinate backend with two
``scrapeflow worker`` processes; while they run refreshes (slow banks keep them running), the
server is stopped, left down a moment, and started again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from scrapeflow.banking import CredentialVault, migrate
from scrapeflow.sandbox import Sandbox
from tests._pginstance import PgInstance, start_pg_instance
from tests._servers import add_sandbox_customers

from .conftest import BANKS, Service
from .test_refresh import truth

CUSTOMERS = [1, 3, 4, 5]  # none needs a one-time code (n % 4 == 2 does, at legacybank)
OUTAGE = 7.0  # seconds the database stays down: longer than a job heartbeat (5 s by default),
# so a worker's beat meets the outage (its job loop waits for the database, trying every second)
BOUND = 60.0  # seconds anything may take to come back or to finish (a bound, not a target)
RERUN_BOUND = 10.0  # a run the outage cut runs again within 10 s of the database's return


def _start(
    command: str, env: dict[str, str], log: Path, ready: str
) -> tuple[subprocess.Popen[str], str]:
    """``scrapeflow <command>`` until it prints ``ready``; its stderr (logs) goes to ``log``:
    an outage makes many log lines, and a pipe nobody reads would stall the process."""
    with log.open("a") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "scrapeflow", *command.split()],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    line = process.stdout.readline()  # bounded by the test's timeout
    if not line.startswith(ready):
        process.kill()
        process.wait(timeout=10)
        raise AssertionError(f"{command} did not start: {line!r} {log.read_text()[-2000:]}")
    return process, line.strip()


def _stop(process: subprocess.Popen[str]) -> int:
    """SIGTERM, then its exit code (killed if it does not stop within a minute)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()
    return code


@pytest.fixture
def pg_instance(tmp_path: Path) -> Iterator[PgInstance]:
    instance = start_pg_instance(tmp_path)
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture
def distributed_on_own_pg(
    tmp_path: Path, sandbox: Sandbox, pg_instance: PgInstance
) -> Iterator[Service]:
    """The service on the procrastinate backend, its database on ``pg_instance``."""
    db_url = pg_instance.url()
    manifest = tmp_path / "sandbox.json"
    manifest.write_text(json.dumps(sandbox.manifest()))
    vault_key = CredentialVault.generate_key()

    async def prepare() -> None:
        await migrate(db_url)
        await add_sandbox_customers(sandbox, db_url, vault_key, CUSTOMERS, BANKS)

    asyncio.run(prepare())
    env = {
        **os.environ,
        "SCRAPEFLOW_DB_URL": db_url,
        "SCRAPEFLOW_JOBS_BACKEND": "procrastinate",
        "SCRAPEFLOW_VAULT_KEYS": vault_key,
        "SCRAPEFLOW_SANDBOX_MANIFEST": str(manifest),
        "SCRAPEFLOW_LOG_DIR": str(tmp_path / "logs"),
        "SCRAPEFLOW_SCHEDULE": "off",
        # The default heartbeats: a run cut off by the outage is run again and takes its
        # holds over at once, not after three of the launcher's 30 s beats.
        "PYTHONUNBUFFERED": "1",
    }
    process, line = _start("serve --port 0", env, tmp_path / "service.log", ready="serving on ")
    try:
        yield Service(line.split()[-1], env, db_url, process)
    finally:
        _stop(process)


def _until(what: str, check: Any, *, also: Any = None, seconds: float = BOUND) -> Any:
    """Poll ``check()`` (after ``also()``, each time) until it returns something truthy; fail
    naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        if also is not None:
            also()
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {seconds} s (last seen: {last!r})")


class Workers:
    """``scrapeflow worker`` processes that must live through the outage: a worker whose job
    worker lost the database starts it again by itself once the database answers."""

    def __init__(self, env: dict[str, str], logs: Path, count: int) -> None:
        self.logs = logs
        self.workers = [
            _start(
                "worker --concurrency 2",
                env,
                logs / f"worker-{i}.log",
                ready="worker taking jobs",
            )[0]
            for i in range(count)
        ]

    def check(self) -> None:
        """Fail, with its log, if a worker has exited."""
        for i, worker in enumerate(self.workers):
            code = worker.poll()
            log = self.logs / f"worker-{i}.log"
            assert code is None, f"worker {i} exited {code}: {log.read_text()[-3000:]}"

    def said(self, text: str) -> int:
        """How many workers logged ``text``."""
        return sum(
            text in (self.logs / f"worker-{i}.log").read_text() for i in range(len(self.workers))
        )

    def stop(self) -> list[int]:
        """SIGTERM every worker; their exit codes."""
        return [_stop(worker) for worker in self.workers]


def _json(client: httpx.Client, path: str) -> Any:
    answer = client.get(path)
    assert answer.status_code == 200, (path, answer.status_code, answer.text)
    return answer.json()


def _job_ended(client: httpx.Client, job_id: str) -> dict[str, Any] | None:
    job = _json(client, f"/v1/jobs/{job_id}")
    return job if job["state"] in ("succeeded", "failed", "cancelled") else None


def _assert_rows_match_the_banks(client: httpx.Client, sandbox: Sandbox, n: int) -> None:
    """The customer's accounts and movements are the banks' truth: all there, none twice."""
    customer = f"cust-{n}"
    expected = asyncio.run(truth(sandbox, n))
    accounts = _json(client, f"/v1/customers/{customer}/accounts")
    assert len(accounts) == sum(len(t["accounts"]) for t in expected.values()), customer
    balances = {(a["bank"], a["bank_ref"]): Decimal(a["balance"]) for a in accounts}
    for bank, bank_truth in expected.items():
        for account in bank_truth["accounts"]:
            assert balances[bank, account["id"]] == Decimal(account["balance"]), customer
    page = _json(client, f"/v1/customers/{customer}/movements?limit=1000")
    assert page["next_cursor"] is None
    keys = [(m["account_ref"], m["key"]) for m in page["movements"]]
    assert len(set(keys)) == len(keys), f"{customer}: a movement stored twice"
    total = sum(len(m) for t in expected.values() for m in t["movements"].values())
    assert len(keys) == total, customer


def test_a_postgresql_restart_mid_run_loses_and_doubles_nothing(
    distributed_on_own_pg: Service, pg_instance: PgInstance, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Refreshes of four customers on two workers; PostgreSQL stops mid-run and starts 2 s
    later. Every refresh ends succeeded (run again if the outage cut it), every customer is
    all updated with the banks' data, once; the service answers; a new refresh works. No
    worker exits: each rides the outage (its job worker goes on, or starts again once the
    database answers)."""
    service = distributed_on_own_pg
    for bank in BANKS:  # slow banks: the refreshes are still running when the database stops
        sandbox.sites[bank].guard.latency_ms = (300.0, 500.0)
    workers = Workers(service.env, tmp_path, count=2)
    try:
        with service.client("read", "refresh") as client:
            jobs = {}
            for n in CUSTOMERS:
                answer = client.post(f"/v1/customers/cust-{n}/refresh")
                assert answer.status_code == 202, answer.text
                jobs[n] = answer.json()["id"]
            _until(
                "every refresh running",
                lambda: all(
                    _json(client, f"/v1/jobs/{job_id}")["state"] == "running"
                    for job_id in jobs.values()
                ),
            )
            assert not any(_job_ended(client, job_id) for job_id in jobs.values())

            pg_instance.stop()
            time.sleep(OUTAGE)  # the database is away for a while, not just a blink
            pg_instance.start()
            back = datetime.now(UTC)
            for bank in BANKS:
                sandbox.sites[bank].guard.latency_ms = (0.0, 2.0)

            # The first request after the restart is answered: no connection the restart
            # killed is handed to it.
            first = client.get("/v1/customers/cust-1/status")
            assert first.status_code == 200, first.text
            assert client.get("/readyz").status_code == 200
            for n, job_id in jobs.items():
                ended = _until(
                    f"the refresh of cust-{n} ended",
                    lambda j=job_id: _job_ended(client, j),
                    also=workers.check,
                )
                assert ended["state"] == "succeeded", {
                    key: ended.get(key)
                    for key in ("error", "attempts", "started_at", "finished_at")
                }
                if ended["attempts"] > 1:  # cut by the outage: run again once it was back
                    rerun = datetime.fromisoformat(ended["started_at"]) - back
                    assert rerun.total_seconds() < RERUN_BOUND, (n, rerun, ended)
            for n in CUSTOMERS:
                status = _json(client, f"/v1/customers/cust-{n}/status")
                assert status["all_updated"], status
                assert {a["result"] for a in status["accesses"]} == {"success"}, status
                _assert_rows_match_the_banks(client, sandbox, n)

            # Server and workers reconnected: a refresh asked for now runs and changes nothing.
            again = client.post("/v1/customers/cust-1/refresh")
            assert again.status_code == 202, again.text
            ended = _until(
                "the refresh after the restart ended",
                lambda: _job_ended(client, again.json()["id"]),
                also=workers.check,
            )
            assert ended["state"] == "succeeded", ended
            _assert_rows_match_the_banks(client, sandbox, 1)
    finally:
        cut = workers.said("the database went away under a job: it runs again")
        codes = workers.stop()
    assert codes == [0, 0]
    assert cut >= 1  # the outage did cut running jobs, and they ran again to their end


def test_the_first_requests_after_a_quick_restart_are_answered(
    distributed_on_own_pg: Service, pg_instance: PgInstance
) -> None:
    """``pg_ctl restart -m fast``: every pooled connection dies at once, and the service hands
    none of them to a request (each would have failed it once, a 500)."""
    service = distributed_on_own_pg
    with service.client("read") as client:
        for _ in range(3):  # connections in the pool, idle
            assert client.get("/v1/customers/cust-1/status").status_code == 200
            assert client.get("/v1/jobs").status_code == 200
        pg_instance.restart()
        answers = [client.get(path) for path in ("/v1/customers/cust-1/status", "/v1/jobs")]
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        assert client.get("/readyz").status_code == 200


def test_while_the_database_is_down_a_request_is_told_to_retry(
    distributed_on_own_pg: Service, pg_instance: PgInstance
) -> None:
    """What a client gets while PostgreSQL is away: 503 problem+json with Retry-After."""
    with distributed_on_own_pg.client("read") as client:
        assert client.get("/v1/customers/cust-1/status").status_code == 200
        pg_instance.stop()
        try:
            answers = [client.get(path) for path in ("/v1/customers/cust-1/status", "/v1/jobs")]
        finally:
            pg_instance.start()
        assert [a.status_code for a in answers] == [503, 503], [a.text for a in answers]
        for answer in answers:
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["type"] == "database-unavailable"
            assert answer.headers["retry-after"]
        assert client.get("/v1/customers/cust-1/status").status_code == 200


def test_what_counts_as_the_database_going_away() -> None:
    """A run cut off from its database runs again; the job's own failures do not."""
    from sqlalchemy.exc import DBAPIError, IntegrityError

    from scrapeflow.errors import ConnectionFailed
    from scrapeflow.jobs._dispatch import database_lost

    class ServerShutdown(Exception):  # asyncpg's and psycopg's errors carry a SQLSTATE
        sqlstate = "57P01"

    cut = DBAPIError("SELECT 1", {}, OSError("connection is closed"), connection_invalidated=True)
    wrapped = RuntimeError("could not store all it read")
    wrapped.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    assert database_lost(cut)
    assert database_lost(wrapped)
    assert database_lost(ServerShutdown())
    assert database_lost(ExceptionGroup("several", [ValueError("x"), cut]))

    bank = ConnectionFailed("the bank's server refused the connection")
    bank.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    assert not database_lost(bank)  # the bank's connection, not ours
    assert not database_lost(IntegrityError("INSERT …", {}, ValueError("duplicate key")))
    assert not database_lost(ValueError("a bug"))
