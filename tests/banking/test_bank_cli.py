"""``scrapeflow bank …`` run as a user runs it (a subprocess), against the sandbox's banks."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from xml.etree import ElementTree

import pytest

from scrapeflow.banking import CredentialVault, add_access, add_customer, migrate
from scrapeflow.db import create_engine, session_factory
from scrapeflow.sandbox import BankTruth, CustomerLogin, Sandbox, SandboxAdmin
from tests._cli import run_cli

from . import _harness as h

BANKS = ("formbank", "apibank", "legacybank")


class Cli:
    def __init__(self, tmp_path: Path, sandbox: Sandbox) -> None:
        self.tmp = tmp_path
        self.manifest = tmp_path / "sandbox.json"
        self.manifest.write_text(json.dumps(sandbox.manifest()))
        self.db = tmp_path / "bank.db"
        self.env = {
            **os.environ,
            "SCRAPEFLOW_VAULT_KEYS": CredentialVault.generate_key(),
            "SCRAPEFLOW_DB_URL": f"sqlite+aiosqlite:///{self.db}",
            "SCRAPEFLOW_LOG_DIR": str(tmp_path / "logs"),
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "200",
        }
        self.outputs: list[str] = []

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "scrapeflow", "bank", "--sandbox", str(self.manifest), *args]

    def __call__(
        self, *args: str, stdin: str = "", env: dict | None = None, timeout: float = 90
    ) -> subprocess.CompletedProcess[str]:
        command = ["bank", "--sandbox", str(self.manifest), *args]
        done = run_cli(command, input=stdin, env=env or self.env, timeout=timeout)
        self.outputs += [done.stdout, done.stderr]
        return done

    def start(self, *args: str, env: dict | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env or self.env,
        )


def jobs_in(cli: Cli) -> list[dict[str, object]]:
    """The jobs table of the CLI's database, oldest first."""
    connection = sqlite3.connect(cli.db)
    try:
        connection.row_factory = sqlite3.Row
        rows = connection.execute("SELECT * FROM scrapeflow_jobs ORDER BY id").fetchall()
        return [{**dict(row), "params": json.loads(row["params"])} for row in rows]
    finally:
        connection.close()


def credentials(cli: Cli, bank: str, n: int) -> CustomerLogin:
    """Customer ``n``'s login at ``bank``, from the admin API of the manifest the CLI reads."""

    async def call() -> CustomerLogin:
        async with SandboxAdmin.from_manifest_file(cli.manifest) as admin:
            return await admin.customer(bank, n)

    return asyncio.run(call())


def truth(cli: Cli, bank: str, username: str, since: date | None = None) -> BankTruth:
    async def call() -> BankTruth:
        async with SandboxAdmin.from_manifest_file(cli.manifest) as admin:
            return await admin.truth(bank, username, since=since)

    return asyncio.run(call())


def add_customer_with_accesses_by_cli(cli: Cli, n: int) -> dict[str, CustomerLogin]:
    """Customer ``cust-n`` and a login at each bank, added by ``add-customer`` and ``add-access``
    (four commands)."""
    assert cli("add-customer", f"cust-{n}", "--name", f"Customer {n}").returncode == 0
    creds = {}
    for bank in BANKS:
        cred = credentials(cli, bank, n)
        done = cli(
            "add-access",
            f"cust-{n}",
            bank,
            cred["username"],
            "--password-stdin",
            stdin=cred["password"] + "\n",
        )
        assert done.returncode == 0, done.stderr
        assert "ready" in done.stdout
        creds[bank] = cred
    return creds


def add_customer_with_accesses(cli: Cli, n: int) -> dict[str, CustomerLogin]:
    """Customer ``cust-n`` and a login at each bank, stored as ``add-customer`` and
    ``add-access`` store them: the library functions they call, on the database migrated as
    every command migrates it, with the CLI's vault key. For the tests whose subject comes
    after (a refresh, a listing, an erase): four commands' start-ups cost them four seconds of
    CPU each time. The commands themselves are tested by
    test_add_refresh_list_in_every_format_and_no_password_anywhere and the bad-input corpus."""

    async def add() -> dict[str, CustomerLogin]:
        db_url = cli.env["SCRAPEFLOW_DB_URL"]
        vault = CredentialVault([cli.env["SCRAPEFLOW_VAULT_KEYS"]])
        async with SandboxAdmin.from_manifest_file(cli.manifest) as admin:
            creds = {bank: await admin.customer(bank, n) for bank in BANKS}
        await migrate(db_url)
        engine = create_engine(db_url)
        try:
            sessions = session_factory(engine)
            await add_customer(sessions, f"cust-{n}", f"Customer {n}")
            for bank in BANKS:  # one after the other: access ids 1, 2, 3 in BANKS' order
                cred = creds[bank]
                await add_access(
                    sessions, vault, f"cust-{n}", bank, cred["username"], cred["password"]
                )
        finally:
            await engine.dispose()
        return creds

    return asyncio.run(add())


def test_add_refresh_list_in_every_format_and_no_password_anywhere(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    cli = Cli(tmp_path, sandbox)
    creds = add_customer_with_accesses_by_cli(cli, 1)

    refresh = cli("refresh", "cust-1")
    assert refresh.returncode == 0, refresh.stdout + refresh.stderr
    assert refresh.stdout.count("success") >= 3
    assert "account(s)" in refresh.stdout  # live progress, batch by batch

    accounts = json.loads(cli("accounts", "cust-1", "--format", "json").stdout)
    truths = {bank: truth(cli, bank, creds[bank]["username"]) for bank in BANKS}
    assert {(a["bank"], a["bank_ref"], Decimal(a["balance"])) for a in accounts} == {
        (bank, a["id"], Decimal(a["balance"])) for bank in BANKS for a in truths[bank]["accounts"]
    }

    since = (sandbox.clock.now() - timedelta(days=14)).date()
    rows = list(csv.DictReader(io.StringIO(cli("movements", "cust-1", "-f", "csv").stdout)))
    expected = {
        (bank, m["ref"], Decimal(m["amount"]))
        for bank in BANKS
        for ms in truth(cli, bank, creds[bank]["username"], since)["movements"].values()
        for m in ms
    }
    assert {(r["bank"], r["key"].removeprefix("ref:"), Decimal(r["amount"])) for r in rows} == (
        expected
    )

    iban = next(r["account"] for r in rows if r["account"].startswith("ES"))
    spaced = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))  # as a customer types it
    one = list(
        csv.DictReader(
            io.StringIO(cli("movements", "cust-1", "--account", spaced, "-f", "csv").stdout)
        )
    )
    assert one and {r["account"] for r in one} == {iban}

    ofx = cli("movements", "cust-1", "--format", "ofx").stdout
    root = ElementTree.fromstring(ofx.split("?>", 2)[2])
    amounts = sorted(Decimal(t.text) for t in root.iter("TRNAMT"))
    booked = [r for r in rows if r["pending"] == "False"]  # OFX carries booked movements only
    assert amounts == sorted(Decimal(r["amount"]) for r in booked)
    assert len(list(root.iter("STMTRS"))) + len(list(root.iter("CCSTMTRS"))) == len(accounts)

    table = cli("movements", "cust-1").stdout
    assert f"{len(rows)} movement(s)" in table
    status = cli("status", "cust-1").stdout
    assert status.count("success") == 3

    # the passwords are nowhere: outputs, launch logs, the database file itself
    db_bytes = cli.db.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("bank.db-*"))
    logs = "".join(p.read_text() for p in (tmp_path / "logs").iterdir())
    for cred in creds.values():
        assert cred["password"] not in "".join(cli.outputs) + logs
        assert cred["password"].encode() not in db_bytes


def test_the_password_prompt_hides_what_is_typed(tmp_path: Path, sandbox: Sandbox) -> None:
    cli = Cli(tmp_path, sandbox)
    assert cli("add-customer", "ana").returncode == 0
    done = cli("add-access", "ana", "apibank", "user00001", stdin="s3cret-Pa55\n")
    assert done.returncode == 0, done.stderr
    assert "Password for user00001 at apibank" in done.stdout + done.stderr
    assert "s3cret-Pa55" not in done.stdout + done.stderr


# Bad input (exit 2, one line, nothing changed): the corpus in test_bad_input.py.


def test_kill_9_mid_refresh_then_watchdog_then_a_clean_refresh(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """The killed refresh leaves its job running and its rows in progress, both without a
    heartbeat: the watchdog puts the job back in the queue and resets the rows; the next
    refresh of the customer joins that job and runs it to its end."""
    cli = Cli(tmp_path, sandbox)
    creds = add_customer_with_accesses(cli, 7)  # 32 accounts at each bank
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (150.0, 250.0)
    # Short heartbeats: the watchdog may reset a row only after three of its launcher's
    # intervals, and put a job back only after three of the queue's.
    beats = {**cli.env, "SCRAPEFLOW_HEARTBEAT": "0.3", "SCRAPEFLOW_JOB_HEARTBEAT": "0.3"}
    process = cli.start("refresh", "cust-7", env=beats)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until batches have landed
            line = process.stdout.readline()
            if "account(s)" in line:
                break
        else:
            pytest.fail("no batch landed within 60 s")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (0.0, 2.0)

    assert "in_progress" in cli("status", "cust-7").stdout
    [killed] = jobs_in(cli)
    assert (killed["kind"], killed["state"], killed["params"]) == (
        "bank.refresh",
        "running",
        {"customer": "cust-7"},
    )

    # The killed launch's heartbeats stopped; a live one's are never older than its interval.
    assert cli("watchdog", "--limit", "0").returncode == 2  # a limit must be positive
    untouched = cli("watchdog", "--limit", "1", env=beats)
    assert (
        "reset 0 access(es) and 0 customer(s); 0 stalled job(s) requeued, 0 failed"
        in untouched.stdout
    )  # not stale yet
    time.sleep(1.5)
    reset = cli("watchdog", "--limit", "0.02", env=beats)  # 1.2 s without a heartbeat
    assert reset.returncode == 0
    assert (
        "reset 3 access(es) and 1 customer(s); 1 stalled job(s) requeued, 0 failed" in reset.stdout
    )
    assert cli("status", "cust-7").stdout.count("timeout") == 3
    assert [(j["id"], j["state"]) for j in jobs_in(cli)] == [(killed["id"], "queued")]

    again = cli("refresh", "cust-7", "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"a refresh is already under way (job {killed['id']}, queued)" in again.stdout
    [done] = jobs_in(cli)
    assert (done["id"], done["state"], done["attempts"]) == (killed["id"], "succeeded", 2)

    # exact, without a duplicate, after the interrupted run and the complete one
    async def check() -> int:
        since = sandbox.clock.now().date() - timedelta(days=14)
        compared = 0
        for access_id, bank in enumerate(BANKS, start=1):
            accounts, movements = await h.stored(cli.env["SCRAPEFLOW_DB_URL"], access_id)
            expected = await h.truth(sandbox, bank, creds[bank]["username"], since=since)
            compared += h.assert_exact(accounts, movements, expected, since=since)
        return compared

    assert asyncio.run(check()) > 0


def test_the_watchdog_never_resets_a_live_refresh_whatever_the_limit(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """A limit shorter than the heartbeat interval would free live accesses between two beats;
    the watchdog waits three of the launcher's own intervals (stored with its claims), and
    three of the job queue's, so the refresh goes on; a second refresh of the customer joins
    it rather than running beside it."""
    cli = Cli(tmp_path, sandbox)
    assert cli("add-customer", "cust-7").returncode == 0
    cred = credentials(cli, "apibank", 7)
    added = cli(
        "add-access", "cust-7", "apibank", cred["username"], "--password-stdin",
        stdin=cred["password"] + "\n",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    sandbox.sites["apibank"].guard.latency_ms = (150.0, 250.0)  # a slow bank
    slow_beats = {**cli.env, "SCRAPEFLOW_HEARTBEAT": "10", "SCRAPEFLOW_JOB_HEARTBEAT": "10"}
    process = cli.start("refresh", "cust-7", env=slow_beats)
    second: subprocess.Popen[str] | None = None
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 30
        while "account(s)" not in process.stdout.readline():  # scraping: balances landed
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("no batch landed within 30 s")
        # Between two beats, for as long as the checks take: the launcher is paused, not dead.
        # Paused while it waits for the bank, not inside a write: SQLite has one writer, and a
        # process stopped in its transaction holds every other writer until it resumes.
        sandbox.sites["apibank"].guard.latency_ms = (5000.0, 5000.0)
        time.sleep(1.0)  # the requests under way (250 ms at most) answered, their rows written
        process.send_signal(signal.SIGSTOP)
        watchdog = cli("watchdog", "--limit", "0.005", env=slow_beats)  # 0.3 s, below 10 s
        assert watchdog.returncode == 0, watchdog.stderr
        assert "reset 0 access(es) and 0 customer(s); 0 stalled job(s) requeued" in watchdog.stdout
        second = cli.start("refresh", "cust-7", "--quiet", env=slow_beats)
        assert second.stdout is not None
        deadline = time.monotonic() + 30
        while "already under way" not in (line := second.stdout.readline()):
            if time.monotonic() > deadline or second.poll() is not None:
                pytest.fail(f"the second refresh did not join the first: {line!r}")
        [job] = jobs_in(cli)
        assert f"(job {job['id']}, running): waiting for it" in line
        process.send_signal(signal.SIGCONT)
        sandbox.sites["apibank"].guard.latency_ms = (0.0, 2.0)
        output, _ = process.communicate(timeout=60)
        assert process.returncode == 0, output  # the first refresh ran to its end, unharmed
        joined, _ = second.communicate(timeout=60)
        assert second.returncode == 0, joined  # and the second reports it
        assert "success" in joined
    finally:
        for running in (process, second):
            if running is None:
                continue
            if running.poll() is None:
                running.send_signal(signal.SIGCONT)
                running.kill()
                running.wait(timeout=10)
            if running.stdout is not None:
                running.stdout.close()
    assert [(j["id"], j["state"], j["attempts"]) for j in jobs_in(cli)] == [
        (job["id"], "succeeded", 1)
    ]
    assert len(list((tmp_path / "logs").iterdir())) == 1  # one launch, not two


def movements_read(launch_log: Path) -> int:
    """How many movements a launch read, from its log's batches."""
    records = map(json.loads, launch_log.read_text().splitlines())
    return sum(r["count"] for r in records if r.get("kind") == "movements")


def test_the_first_window_and_the_overlap_come_from_flags_and_settings(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """A first import through the CLI is not capped at 14 days: --initial-days reads further
    back, exactly; SCRAPEFLOW_INITIAL_DAYS does the same, and a bad value changes nothing."""
    cli = Cli(tmp_path, sandbox)
    creds = add_customer_with_accesses(cli, 4)
    today = sandbox.clock.now().date()

    before = cli("status", "cust-4").stdout
    bad = cli("refresh", "cust-4", "--initial-days", "-1")
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("error: --initial-days: ")
    assert cli("status", "cust-4").stdout == before  # nothing claimed, nothing stored

    done = cli("refresh", "cust-4", "--initial-days", "60", "--overlap-days", "5", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr

    async def check(since: date) -> tuple[int, int]:
        compared = beyond_14 = 0
        for access_id, bank in enumerate(BANKS, start=1):
            accounts, movements = await h.stored(cli.env["SCRAPEFLOW_DB_URL"], access_id)
            expected = await h.truth(sandbox, bank, creds[bank]["username"], since=since)
            compared += h.assert_exact(accounts, movements, expected, since=since)
            beyond_14 += sum(
                m.operation_date < today - timedelta(days=14)
                for moves in movements.values()
                for m in moves
            )
        return compared, beyond_14

    compared, beyond_14 = asyncio.run(check(today - timedelta(days=60)))
    assert compared > 0
    assert beyond_14 > 0  # the 14-day default would have stopped short of these

    # More history asked for after a first import: read back to it, exactly (it stayed at 60).
    further = cli("refresh", "cust-4", "--initial-days", "90", "--quiet")
    assert further.returncode == 0, further.stdout + further.stderr
    more, _ = asyncio.run(check(today - timedelta(days=90)))
    assert more > compared
    # ... and once read, asking 90 days again reads only the overlap, not the 90 days again.
    assert cli("refresh", "cust-4", "--initial-days", "90", "--quiet").returncode == 0
    launches = sorted((tmp_path / "logs").iterdir())  # named by start time
    reached, again = (movements_read(log) for log in launches[-2:])
    assert 0 < again < reached / 2, (reached, again)

    (tmp_path / "env").mkdir()
    other = Cli(tmp_path / "env", sandbox)
    add_customer_with_accesses(other, 5)
    env = {**other.env, "SCRAPEFLOW_INITIAL_DAYS": "0"}
    assert other("refresh", "cust-5", "--quiet", env=env).returncode == 0
    newest_first = json.loads(other("movements", "cust-5", "--format", "json").stdout)
    assert all(date.fromisoformat(m["operation_date"]) >= today for m in newest_first)


def test_the_database_and_launch_logs_are_the_owners_only(tmp_path: Path, sandbox: Sandbox) -> None:
    """Logins, balances and movements, encrypted passwords, launch logs: created 0600, in
    directories created 0700, whatever the umask lets others read."""
    old_umask = os.umask(0o022)
    try:
        cli = Cli(tmp_path, sandbox)
        logs = tmp_path / "var" / "log" / "bank"
        cli.env["SCRAPEFLOW_LOG_DIR"] = str(logs)
        assert cli("add-customer", "ana").returncode == 0
        cred = credentials(cli, "apibank", 1)
        added = cli(
            "add-access", "ana", "apibank", cred["username"], "--password-stdin",
            stdin=cred["password"] + "\n",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert cli("refresh", "ana", "--quiet").returncode == 0
    finally:
        os.umask(old_umask)

    def mode(path: Path) -> int:
        return path.stat().st_mode & 0o777

    assert mode(cli.db) == 0o600
    assert [mode(p) for p in (tmp_path / "var", tmp_path / "var" / "log", logs)] == [0o700] * 3
    files = list(logs.iterdir())
    assert files and {mode(p) for p in files} == {0o600}


async def test_sqlite_files_are_created_owner_only_wal_and_shm_too(tmp_path: Path) -> None:
    from sqlalchemy import text

    from scrapeflow.db import create_engine

    path = tmp_path / "new.db"
    old_umask = os.umask(0o022)
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TABLE t (x INTEGER)"))
            await connection.execute(text("INSERT INTO t VALUES (1)"))
        async with engine.connect() as connection:  # open: the -wal and -shm exist
            await connection.execute(text("SELECT * FROM t"))
            modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.glob("new.db*")}
    finally:
        await engine.dispose()
        os.umask(old_umask)
    assert modes == {"new.db": 0o600, "new.db-wal": 0o600, "new.db-shm": 0o600}


def test_erase_takes_a_customer_or_an_access_with_what_was_read(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    cli = Cli(tmp_path, sandbox)
    add_customer_with_accesses(cli, 1)
    add_customer_with_accesses(cli, 3)
    assert cli("refresh", "cust-1", "cust-3").returncode == 0
    logs = tmp_path / "logs"

    asked = cli("erase", "cust-1")
    assert asked.returncode == 2 and "add --yes" in asked.stderr
    assert json.loads(cli("accounts", "cust-1", "--format", "json").stdout)  # nothing erased

    erased = cli("erase", "cust-1", "--yes")
    assert erased.returncode == 0, erased.stderr
    assert erased.stdout.startswith("erased customer cust-1: 3 accesses,")
    assert not list(logs.glob("*_customer-cust-1_*.log"))
    gone = cli("status", "cust-1")
    assert gone.returncode == 2 and "no customer 'cust-1'" in gone.stderr

    accesses = json.loads(cli("accounts", "cust-3", "--format", "json").stdout)
    one = accesses[0]["access_id"]
    assert cli("erase", "cust-3", "--access", str(one), "--yes").returncode == 0
    left = json.loads(cli("accounts", "cust-3", "--format", "json").stdout)
    assert left and all(a["access_id"] != one for a in left)
    again = cli("erase", "cust-3", "--access", str(one), "--yes")
    assert again.returncode == 2 and f"no access {one}" in again.stderr


def test_scrape_names_the_customer_and_shows_each_request_at_debug(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """``bank scrape``'s table names the access's customer (it showed ``-``); with
    ``--log-level DEBUG`` each request is logged: method, URL, status, time, redirects; never
    the password."""
    cli = Cli(tmp_path, sandbox)
    creds = add_customer_with_accesses(cli, 1)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrapeflow",
            "--log-level",
            "DEBUG",
            "--log-json",
            *cli.argv("scrape", "1")[3:],
        ],
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "│" in line and "success" in line)
    assert row.split("│")[1].strip() == "cust-1"
    requests = [
        record
        for record in map(json.loads, done.stderr.splitlines())
        if record["event"] == "http.response"
    ]
    assert len(requests) >= 3  # the login, the accounts, their movements
    login = requests[0]
    assert login["method"] in ("GET", "POST") and login["status"] == 200
    assert login["url"].startswith("http://127.0.0.1:") and isinstance(login["ms"], int)
    # The form login answers with a redirect, which the scraper follows itself.
    assert any(r["status"] == 302 for r in requests)
    assert creds["formbank"]["password"] not in done.stderr + done.stdout


def test_the_customer_book_from_the_command_line(tmp_path: Path, sandbox: Sandbox) -> None:
    """Customers listed a page at a time, searched and filtered by outcome; renamed; an access
    disabled (left out of the next refresh, its last result kept) and enabled again."""
    cli = Cli(tmp_path, sandbox)
    add_customer_with_accesses(cli, 1)
    add_customer_with_accesses(cli, 2)  # legacybank asks for a one-time code

    async def add_customers() -> None:  # without accesses (add-customer's own call)
        engine = create_engine(cli.env["SCRAPEFLOW_DB_URL"])
        try:
            for n in range(3, 8):
                await add_customer(session_factory(engine), f"cust-{n}", f"Customer {n}")
        finally:
            await engine.dispose()

    asyncio.run(add_customers())
    assert cli("refresh", "cust-1", "cust-2", "--quiet").returncode == 1  # cust-2 waits
    first = cli("customers", "--limit", "3")
    assert first.returncode == 0, first.stderr
    assert [
        line.split("│")[1].strip() for line in first.stdout.splitlines() if "│ cust-" in line
    ] == [
        "cust-1",
        "cust-2",
        "cust-3",
    ]
    assert "3 of 7 customer(s); the next page: --after cust-3" in first.stdout
    rest = cli("customers", "--after", "cust-3")
    assert "4 of 7 customer(s)" in rest.stdout and "next page" not in rest.stdout
    waiting = cli("customers", "--outcome", "needs_action")
    assert "│ cust-2" in waiting.stdout and "│ cust-1" not in waiting.stdout
    assert "1 of 1 customer(s)" in waiting.stdout
    found = cli("customers", "--search", "CUSTOMER 5")
    assert "│ cust-5" in found.stdout and "1 of 1" in found.stdout
    bad = cli("customers", "--outcome", "green")
    assert bad.returncode == 2 and "--outcome: 'green' is not one of" in bad.stderr

    assert cli("rename", "cust-5", "Quinta").returncode == 0
    assert "Quinta" in cli("customers", "--search", "quinta").stdout

    legacy = next(
        line.split("│")[1].strip()
        for line in cli("status", "cust-2").stdout.splitlines()
        if "legacybank" in line
    )
    assert cli("disable", "cust-2", legacy).returncode == 0
    assert "(disabled)" in cli("status", "cust-2").stdout
    again = cli("refresh", "cust-2", "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr  # the waiting access left out
    assert "│ cust-2" in cli("customers", "--outcome", "succeeded").stdout
    assert cli("enable", "cust-2", legacy).returncode == 0
    assert "(disabled)" not in cli("status", "cust-2").stdout
    nobody = cli("disable", "cust-1", legacy)  # another customer's access
    assert nobody.returncode == 2 and f"has no access {legacy}" in nobody.stderr
