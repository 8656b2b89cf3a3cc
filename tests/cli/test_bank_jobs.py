"""``scrapeflow bank refresh`` on the job machinery: a refresh is a ``bank.refresh`` job in the
database's jobs table, deduplicated per customer with the service's, run by the command itself.

The "service" here is a job queue in the test process with the bank job kinds, on the CLI's
database: what ``scrapeflow serve`` runs, without its HTTP half. Where the command meets the
service's jobs, the service is on each job backend (``job_backend``): embedded over SQLite, or
procrastinate over PostgreSQL (its worker in the test process), the command's own queue then
sharing the jobs table with procrastinate's workers. What only the command's own queue does
(the service's queued jobs left alone, Ctrl-C, kill -9) is tested once, over SQLite.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from scrapeflow.banking import BANK_REFRESH, bank_job_kinds, refresh_key
from scrapeflow.config import Settings
from scrapeflow.db import create_engine
from scrapeflow.jobs import (
    EmbeddedJobQueue,
    JobContext,
    JobHandler,
    JobState,
    ProcrastinateJobQueue,
    SqlJobStore,
)
from scrapeflow.sandbox import Sandbox
from tests.banking import _harness as h
from tests.banking.test_bank_cli import BANKS, Cli, add_customer_with_accesses, jobs_in

JOB_BACKENDS = ("embedded", "procrastinate")
# Seconds: short, so that the service's queue wastes little of a test on its schedules.
PROCRASTINATE_TIMINGS: dict[str, Any] = {"sweep_every": 1, "poll": 0.5, "grace": 2.0}


@pytest.fixture(params=JOB_BACKENDS)
def job_backend(request: pytest.FixtureRequest) -> str:
    """The service's job backend: ``embedded`` (over SQLite) or ``procrastinate`` (over
    PostgreSQL: the command's database then is that PostgreSQL database too)."""
    backend: str = request.param
    return backend


@pytest.fixture
def cli(request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, job_backend: str) -> Cli:
    """The command line, on the database of a service on ``job_backend``: its own SQLite file,
    or a fresh PostgreSQL database, with the service's setting ``jobs_backend`` (the command
    embeds its own queue either way)."""
    cli = Cli(tmp_path, sandbox)
    if job_backend == "procrastinate":
        cli.env["SCRAPEFLOW_DB_URL"] = request.getfixturevalue("pg_url")
        cli.env["SCRAPEFLOW_JOBS_BACKEND"] = job_backend
    return cli


def service_settings(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings the CLI's environment gives (its database, vault key, sandbox, logs, job
    backend)."""
    for name in ("SCRAPEFLOW_VAULT_KEYS", "SCRAPEFLOW_DB_URL", "SCRAPEFLOW_LOG_DIR"):
        monkeypatch.setenv(name, cli.env[name])
    if "SCRAPEFLOW_JOBS_BACKEND" in cli.env:
        monkeypatch.setenv("SCRAPEFLOW_JOBS_BACKEND", cli.env["SCRAPEFLOW_JOBS_BACKEND"])
    return Settings.load(flags={"sandbox_manifest": cli.manifest})


def service_queue(
    settings: Settings, kinds: Mapping[str, JobHandler], **options: Any
) -> EmbeddedJobQueue | ProcrastinateJobQueue:
    """The service's queue on its settings' database and job backend (its jobs run here)."""
    if settings.jobs_backend == "procrastinate":
        return ProcrastinateJobQueue(settings.db_url, kinds, **{**PROCRASTINATE_TIMINGS, **options})
    return EmbeddedJobQueue(SqlJobStore(settings.db_url), kinds, **options)


async def jobs_of(cli: Cli) -> list[dict[str, Any]]:
    """The jobs table of the CLI's database, oldest first (``jobs_in``, on either database)."""
    db_url = cli.env["SCRAPEFLOW_DB_URL"]
    if db_url.startswith("sqlite"):
        return jobs_in(cli)
    engine = create_engine(db_url)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(text("SELECT * FROM scrapeflow_jobs ORDER BY id"))
            found = [dict(row) for row in rows.mappings()]
    finally:
        await engine.dispose()
    for row in found:
        if isinstance(row["params"], str):
            row["params"] = json.loads(row["params"])
    return found


def slow_banks(sandbox: Sandbox, latency: tuple[float, float]) -> None:
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = latency


async def read_until(stream: asyncio.StreamReader, text: str, seconds: float = 60) -> str:
    """The output up to the first line holding ``text``."""
    seen = ""
    async with asyncio.timeout(seconds):
        while True:
            line = (await stream.readline()).decode()
            seen += line
            if text in line:
                return seen
            if not line:
                raise AssertionError(f"{text!r} never came: {seen!r}")


async def until_running(queue: EmbeddedJobQueue | ProcrastinateJobQueue, job_id: str) -> None:
    """Until the job runs and the balances of some account have landed."""
    async with asyncio.timeout(60):
        while True:
            job = await queue.get(job_id)
            if job.state is JobState.RUNNING and job.progress.get("accounts"):
                return
            assert not job.state.final, job
            await asyncio.sleep(0.05)


async def test_a_refresh_the_service_runs_is_joined_not_run_twice(
    cli: Cli, tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Customer 7 has 32 accounts at each bank: slowed down, the service's refresh of it lasts
    # well beyond the command's start, until the command has joined it.
    await asyncio.to_thread(add_customer_with_accesses, cli, 7)  # it runs a loop of its own
    settings = service_settings(cli, monkeypatch)
    slow_banks(sandbox, (150.0, 250.0))
    async with service_queue(settings, bank_job_kinds(settings), heartbeat=0.5) as service:
        job = await service.submit(
            BANK_REFRESH, {"customer": "cust-7"}, dedupe_key=refresh_key("cust-7")
        )
        await until_running(service, job.id)
        # From here every request takes over a second: the launch outlasts the command's
        # start-up even on a loaded machine (it finished first once, at 150-250 ms).
        slow_banks(sandbox, (1_000.0, 1_500.0))
        command = await asyncio.create_subprocess_exec(
            *cli.argv("refresh", "cust-7"),
            env=cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert command.stdout is not None
        head = await read_until(command.stdout, "already under way")
        slow_banks(sandbox, (0.0, 2.0))
        async with asyncio.timeout(90):
            rest = (await command.stdout.read()).decode()
            await command.wait()
        output = head + rest
        assert command.returncode == 0, output
        assert f"cust-7: a refresh is already under way (job {job.id}, running)" in output
        assert output.count("success") == 3  # the service's launch, as it ended
        ended = await service.get(job.id)
    assert ended.state is JobState.SUCCEEDED
    assert [j["id"] for j in await jobs_of(cli)] == [job.id]  # one job
    assert len(list((tmp_path / "logs").iterdir())) == 1  # one launch


async def test_a_service_refresh_asked_while_the_command_runs_joins_it(
    cli: Cli, tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(add_customer_with_accesses, cli, 1)  # it runs a loop of its own
    settings = service_settings(cli, monkeypatch)
    slow_banks(sandbox, (150.0, 250.0))
    command = await asyncio.create_subprocess_exec(
        *cli.argv("refresh", "cust-1"),
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert command.stdout is not None
        head = await read_until(command.stdout, "account(s)")  # the command's launch is on
        kinds = bank_job_kinds(settings)
        async with service_queue(settings, kinds, heartbeat=0.5) as service:
            job = await service.submit(
                BANK_REFRESH, {"customer": "cust-1"}, dedupe_key=refresh_key("cust-1")
            )
            assert job.state is JobState.RUNNING
            assert not service.submitted_here(job.id)  # the command's job, not a second one
            slow_banks(sandbox, (0.0, 2.0))
            async with asyncio.timeout(60):
                ended = await service.wait(job.id)
        async with asyncio.timeout(60):
            rest = (await command.stdout.read()).decode()
            await command.wait()
    finally:
        if command.returncode is None:
            command.kill()
            await command.wait()
    assert command.returncode == 0, head + rest
    assert ended.state is JobState.SUCCEEDED
    assert ended.result is not None and ended.result["ok"] is True
    assert [j["id"] for j in await jobs_of(cli)] == [job.id]
    assert len(list((tmp_path / "logs").iterdir())) == 1


async def _never_run(context: JobContext) -> None:
    raise AssertionError("the command ran a job it did not submit")


def test_the_command_runs_its_own_jobs_and_leaves_the_services_queued_ones(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    cli = Cli(tmp_path, sandbox)
    add_customer_with_accesses(cli, 1)
    add_customer_with_accesses(cli, 2)

    async def queue_the_services_work() -> list[str]:
        kinds = dict.fromkeys((BANK_REFRESH, "fetch"), _never_run)
        store = SqlJobStore(cli.env["SCRAPEFLOW_DB_URL"])
        async with EmbeddedJobQueue(store, kinds, run_jobs=False) as service:
            other = await service.submit(
                BANK_REFRESH, {"customer": "cust-2"}, dedupe_key=refresh_key("cust-2")
            )
            fetch = await service.submit("fetch", {"urls": "urls.txt"})
            return [other.id, fetch.id]

    queued = asyncio.run(queue_the_services_work())
    done = cli("refresh", "cust-1", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {j["id"]: j for j in jobs_in(cli)}
    assert len(jobs) == 3
    for job_id in queued:
        assert (jobs[job_id]["state"], jobs[job_id]["attempts"]) == ("queued", 0)
    [mine] = [j for j in jobs.values() if j["id"] not in queued]
    assert (mine["params"], mine["state"]) == ({"customer": "cust-1"}, "succeeded")
    assert "success" not in cli("status", "cust-2").stdout  # never refreshed


def test_ctrl_c_cancels_the_commands_refresh_and_leaves_nothing_in_progress(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    cli = Cli(tmp_path, sandbox)
    add_customer_with_accesses(cli, 7)
    slow_banks(sandbox, (150.0, 250.0))
    process = cli.start("refresh", "cust-7")
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while "account(s)" not in process.stdout.readline():
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("no batch landed within 60 s")
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    assert process.returncode == 130, output
    assert "interrupted: this command's refreshes were cancelled" in output
    [job] = jobs_in(cli)
    assert (job["state"], job["error"]) == ("cancelled", "cancelled")
    status = cli("status", "cust-7").stdout
    assert "in_progress" not in status  # each access's end stored, the customer's too
    assert status.count("timeout") >= 1  # the accesses cut short say so

    slow_banks(sandbox, (0.0, 2.0))
    again = cli("refresh", "cust-7", "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already under way" not in again.stdout  # a new job: the cancelled one has ended
    assert [j["state"] for j in jobs_in(cli)] == ["cancelled", "succeeded"]


def test_kill_9_mid_refresh_then_the_next_refresh_runs_the_job_again(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """No watchdog, the default heartbeats: the next refresh of the customer joins the killed
    one's job, finds its heartbeat stopped (three of the jobs' 5 s), takes the dead launch's
    rows over at once (they name the job) and runs it again, to exact data, within 60 s."""
    cli = Cli(tmp_path, sandbox)
    creds = add_customer_with_accesses(cli, 7)
    slow_banks(sandbox, (150.0, 250.0))
    beats = cli.env
    for setting in ("SCRAPEFLOW_HEARTBEAT", "SCRAPEFLOW_JOB_HEARTBEAT"):  # the defaults
        assert setting not in beats
    process = cli.start("refresh", "cust-7", env=beats)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while "account(s)" not in process.stdout.readline():
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("no batch landed within 60 s")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    slow_banks(sandbox, (0.0, 2.0))
    [killed] = jobs_in(cli)
    assert killed["state"] == "running"
    assert "in_progress" in cli("status", "cust-7").stdout

    again = cli("refresh", "cust-7", "--quiet", env=beats, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"a refresh is already under way (job {killed['id']}, running)" in again.stdout
    assert cli("status", "cust-7").stdout.count("success") == 3
    [done] = jobs_in(cli)
    assert (done["id"], done["state"], done["attempts"]) == (killed["id"], "succeeded", 2)
    assert len(list((tmp_path / "logs").iterdir())) == 2  # the killed launch, the re-run

    async def check() -> int:
        since = sandbox.clock.now().date() - timedelta(days=14)
        compared = 0
        for access_id, bank in enumerate(BANKS, start=1):
            accounts, movements = await h.stored(cli.env["SCRAPEFLOW_DB_URL"], access_id)
            expected = await h.truth(sandbox, bank, creds[bank]["username"], since=since)
            compared += h.assert_exact(accounts, movements, expected, since=since)
        return compared

    assert asyncio.run(check()) > 0  # exact, nothing doubled
