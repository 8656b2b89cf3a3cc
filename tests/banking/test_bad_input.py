"""The bad-input corpus of ``scrapeflow bank …``: every case exits 2 with one line on stderr
naming what is wrong, and changes nothing stored.

Each case runs the real command, in a process of its own (``tests/_cli.py``), on a copy of one
database where customer ``ana`` has an access at the sandbox's apibank whose last refresh
succeeded: a refusal must leave that result, its counts and its times as they were, and write no
launch log. A command added to ``scrapeflow bank`` gets its cases here (a row of :data:`CASES`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scrapeflow.banking import (
    CredentialVault,
    Launcher,
    add_access,
    add_customer,
    migrate,
)
from scrapeflow.db import create_engine, session_factory
from scrapeflow.sandbox import Sandbox, SandboxAdmin, SandboxConfig
from tests._cli import run_cli

KEY = CredentialVault.generate_key()
NOT_UTF8 = b"ana\xff"


@dataclass
class World:
    """One case's files: the database copy, a good sandbox manifest, the log directory."""

    tmp: Path
    db: Path
    manifest: Path
    logs: Path
    env: dict[str, str]

    def db_url(self, path: Path | None = None) -> str:
        return f"sqlite+aiosqlite:///{path or self.db}"

    def sql(self, statement: str) -> None:
        with sqlite3.connect(self.db) as connection:
            connection.execute(statement)
        connection.close()


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str | bytes, ...]
    """The arguments after ``scrapeflow bank``; ``{manifest}`` and ``{tmp}`` are filled in."""
    message: str
    """A part of the one line on stderr."""
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    prepare: Callable[[World], None] | None = None
    """Sets the scene first (a bad file, a changed row); what it leaves is what must not change."""
    as_root: bool = True
    """False: the case needs permissions, which root ignores."""


def _manifest(world: World, **changes: object) -> None:
    data = json.loads(world.manifest.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    (world.tmp / "bad.json").write_text(json.dumps(data))


def _closed_url() -> str:
    """A loopback URL nothing listens on (a port just freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def _key_file(mode: int) -> Callable[[World], None]:
    def prepare(world: World) -> None:
        path = world.tmp / "vault.keys"
        path.write_text(KEY + "\n")
        path.chmod(mode)
        _use_key_file(world, path)

    return prepare


def _use_key_file(world: World, path: Path) -> None:
    world.env.pop("SCRAPEFLOW_VAULT_KEYS")
    world.env["SCRAPEFLOW_VAULT_KEY_FILE"] = str(path)


def _other_db(world: World) -> None:
    with sqlite3.connect(world.tmp / "other.db") as connection:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        connection.execute("INSERT INTO notes (text) VALUES ('mine')")
    connection.close()
    world.env["SCRAPEFLOW_DB_URL"] = world.db_url(world.tmp / "other.db")


def _corrupt_middle(world: World) -> None:
    with world.db.open("r+b") as file:  # the header stays: SQLite opens it, then reads garbage
        file.seek(4096 * 2)
        file.write(os.urandom(4096 * 6))


def _read_only_file(world: World) -> None:
    world.db.chmod(0o444)


def _readonly_uri(world: World) -> None:
    world.env["SCRAPEFLOW_DB_URL"] = f"sqlite+aiosqlite:///file:{world.db}?mode=ro&uri=true"


SANDBOX = ("--sandbox", "{manifest}")
REFRESH = (*SANDBOX, "refresh", "ana", "--quiet")

CASES = [
    # -- refusals before anything is claimed (a refresh must not store "unknown" over a success)
    Case("refresh-no-bank-url", ("refresh", "ana", "--quiet"), "no URL for bank 'apibank'"),
    Case("scrape-no-bank-url", ("scrape", "1"), "no URL for bank 'apibank'"),
    Case(
        "refresh-wrong-vault-key",
        REFRESH,
        "SCRAPEFLOW_VAULT_KEYS",
        env={"SCRAPEFLOW_VAULT_KEYS": CredentialVault.generate_key()},
    ),
    Case(
        "otp-wrong-vault-key",
        (*SANDBOX, "otp", "1", "--code-stdin"),
        "cannot decrypt",
        stdin=b"123456\n",
        env={"SCRAPEFLOW_VAULT_KEYS": CredentialVault.generate_key()},
    ),
    Case(
        "refresh-scraper-gone",
        REFRESH,
        "no scraper for bank 'gonebank'",
        prepare=lambda w: w.sql("UPDATE financial_entities SET code = 'gonebank'"),
    ),
    Case(
        "manifest-without-admin-token",
        ("--sandbox", "{tmp}/bad.json", "refresh", "ana"),
        "admin_token",
        prepare=lambda w: _manifest(w, admin_token=None),
    ),
    Case(
        "manifest-without-sites",
        ("--sandbox", "{tmp}/bad.json", "refresh", "ana"),
        "has no 'sites'",
        prepare=lambda w: _manifest(w, sites=None),
    ),
    Case(
        "manifest-non-http-url",
        ("--sandbox", "{tmp}/bad.json", "refresh", "ana"),
        "sites.apibank must be an http(s) URL",
        prepare=lambda w: _manifest(w, sites={"apibank": "ftp://127.0.0.1:1"}),
    ),
    Case(
        "manifest-not-json",
        ("--sandbox", "{tmp}/bad.json", "refresh", "ana"),
        "is not JSON",
        prepare=lambda w: (w.tmp / "bad.json").write_text("{"),
    ),
    Case(
        "manifest-sandbox-not-running",
        ("--sandbox", "{tmp}/bad.json", "refresh", "ana"),
        "got no answer",
        prepare=lambda w: _manifest(w, sites=dict.fromkeys(("apibank", "feed"), _closed_url())),
    ),
    Case(
        "log-dir-is-a-file",
        REFRESH,
        "is not a directory",
        prepare=lambda w: w.env.update(SCRAPEFLOW_LOG_DIR=str(w.db)),
    ),
    Case("unknown-customer", (*SANDBOX, "refresh", "ghost"), "no customer 'ghost'"),
    # -- limits: positive, finite
    Case("per-bank-0", (*REFRESH, "--per-bank", "0"), "--per-bank"),
    Case("overall-0", (*REFRESH, "--overall", "0"), "--overall"),
    Case("overall-negative", (*REFRESH, "--overall", "-3"), "--overall"),
    Case("access-timeout-0", (*REFRESH, "--access-timeout", "0"), "--access-timeout"),
    Case("access-timeout-nan", (*REFRESH, "--access-timeout", "nan"), "--access-timeout"),
    Case("access-timeout-inf", (*REFRESH, "--access-timeout", "inf"), "--access-timeout"),
    Case("initial-days-negative", (*REFRESH, "--initial-days", "-1"), "--initial-days"),
    Case("watchdog-limit-0", ("watchdog", "--limit", "0"), "--limit"),
    Case("watchdog-limit-negative", ("watchdog", "--limit", "-5"), "--limit"),
    Case("watchdog-limit-nan", ("watchdog", "--limit", "nan"), "--limit"),
    Case(
        "heartbeat-0",
        ("watchdog",),
        "SCRAPEFLOW_HEARTBEAT",
        env={"SCRAPEFLOW_HEARTBEAT": "0"},
    ),
    # -- the vault key file: the owner's only, a regular file
    Case("key-file-0644", REFRESH, "chmod 600", prepare=_key_file(0o644)),
    Case("key-file-0640", REFRESH, "chmod 600", prepare=_key_file(0o640)),
    Case(
        "key-file-a-directory",
        REFRESH,
        "vault key file",
        prepare=lambda w: _use_key_file(w, w.tmp),
    ),
    Case(
        "no-vault-key",
        ("add-access", "ana", "apibank", "u2", "--password-stdin"),
        "SCRAPEFLOW_VAULT_KEYS",
        stdin=b"pw\n",
        prepare=lambda w: w.env.pop("SCRAPEFLOW_VAULT_KEYS"),
    ),
    # -- the database: someone else's, corrupt, from the future, read-only, not a file
    Case(
        "unrelated-database",
        ("status", "ana"),
        "tables of another application (notes)",
        prepare=_other_db,
    ),
    Case("corrupt-in-the-middle", ("accounts", "ana"), "is corrupt", prepare=_corrupt_middle),
    Case("corrupt-in-the-middle-refresh", REFRESH, "is corrupt", prepare=_corrupt_middle),
    Case(
        "unknown-revision",
        ("status", "ana"),
        "at migration revision 'ffff'",
        prepare=lambda w: w.sql("UPDATE alembic_version SET version_num = 'ffff'"),
    ),
    Case("read-only-uri", ("add-customer", "bo"), "is read-only", prepare=_readonly_uri),
    Case("read-only-uri-refresh", REFRESH, "is read-only", prepare=_readonly_uri),
    Case(
        "read-only-file",
        ("add-customer", "bo"),
        "is read-only",
        prepare=_read_only_file,
        as_root=False,
    ),
    Case(
        "database-is-a-directory",
        ("status", "ana"),
        "is a directory",
        prepare=lambda w: w.env.update(SCRAPEFLOW_DB_URL=w.db_url(w.tmp)),
    ),
    Case(
        "no-such-directory",
        ("--db", "sqlite+aiosqlite:////nonexistent/x.db", "add-customer", "ana"),
        "cannot open the",
    ),
    # A typo in --db: refused, not created empty (only migrate and add-customer create one).
    Case(
        "no-such-database",
        ("--db", "sqlite+aiosqlite:///{tmp}/typo.db", "status", "ana"),
        "typo.db' (--db or SCRAPEFLOW_DB_URL): check the path, or create it",
    ),
    Case(
        "driver-not-installed",
        ("--db", "mysql://bank@127.0.0.1/bank", "status", "ana"),
        "its driver MySQLdb is not installed, and scrapeflow runs on SQLite",
    ),
    Case(
        "driver-of-an-extra",
        ("--db", "postgresql+psycopg2://bank@127.0.0.1/bank", "status", "ana"),
        "its driver psycopg2 is not installed",
    ),
    # -- names: no control characters, nothing cut, valid UTF-8
    Case("customer-id-not-utf8", ("add-customer", NOT_UTF8), "customer id is not valid UTF-8"),
    Case("status-id-not-utf8", ("status", NOT_UTF8), "customer id is not valid UTF-8"),
    Case("refresh-id-not-utf8", (*SANDBOX, "refresh", NOT_UTF8), "not valid UTF-8"),
    Case("customer-id-newline", ("add-customer", "bo\nb"), "control or invisible"),
    Case("customer-id-escape", ("add-customer", "bo\x1b[2J"), "control or invisible"),
    Case("customer-id-bidi", ("add-customer", "bo\u202eb"), "control or invisible"),
    Case("customer-id-65", ("add-customer", "b" * 65), "the maximum is 64"),
    Case("customer-id-blank", ("add-customer", "  "), "customer id is empty"),
    Case("customer-id-slash", ("add-customer", "a/b"), "customer id holds a '/'"),
    Case("customer-name-201", ("add-customer", "bo", "--name", "n" * 201), "the maximum is 200"),
    Case("customer-name-newline", ("add-customer", "bo", "--name", "B\nO"), "control"),
    Case("customer-exists", ("add-customer", "ana"), "already exists"),
    Case(
        "login-escape",
        ("add-access", "ana", "apibank", "u\x1b]0;x\x07", "--password-stdin"),
        "bank login holds a control",
        stdin=b"pw\n",
    ),
    Case(
        "login-201",
        ("add-access", "ana", "apibank", "u" * 201, "--password-stdin"),
        "the maximum is 200",
        stdin=b"pw\n",
    ),
    Case(
        "login-not-utf8",
        ("add-access", "ana", "apibank", b"u\xfe", "--password-stdin"),
        "bank login is not valid UTF-8",
        stdin=b"pw\n",
    ),
    Case(
        "password-not-utf8",
        ("add-access", "ana", "apibank", "u2", "--password-stdin"),
        "password on standard input is not valid UTF-8",
        stdin=b"p\xffw\n",
    ),
    Case(
        "password-1025",
        ("add-access", "ana", "apibank", "u2", "--password-stdin"),
        "the maximum is 1024",
        stdin=b"p" * 1025 + b"\n",
    ),
    Case(
        "password-huge",
        ("add-access", "ana", "apibank", "u2", "--password-stdin"),
        "longer than 1024",
        stdin=b"p" * 5_000_000,
    ),
    Case(
        "password-empty",
        ("add-access", "ana", "apibank", "u2", "--password-stdin"),
        "password is empty",
        stdin=b"\n",
    ),
    Case(
        "access-unknown-customer",
        ("add-access", "nobody", "apibank", "u1", "--password-stdin"),
        "no customer",
        stdin=b"pw\n",
    ),
    Case(
        "access-unknown-bank",
        ("add-access", "ana", "nobank", "u1", "--password-stdin"),
        "no scraper for bank",
        stdin=b"pw\n",
    ),
    Case("account-not-utf8", ("movements", "ana", "--account", b"ES\xff"), "--account"),
    Case("since-not-a-date", ("movements", "ana", "--since", "yesterday"), "--since 'yesterday'"),
    Case("scrape-id-huge", ("scrape", "99999999999999999999"), "2147483647"),
    Case("scrape-id-1e20", ("scrape", "1e20"), "Invalid value for 'ACCESS_ID'"),
    Case("scrape-id-0", ("scrape", "0"), "greater than or equal to 1"),
    Case("scrape-no-such-access", (*SANDBOX, "scrape", "99"), "no access with id 99"),
    Case("otp-not-digits", ("otp", "1", "--code-stdin"), "one-time code", stdin=b"12ab\n"),
    Case("otp-not-utf8", ("otp", "1", "--code-stdin"), "one-time code", stdin=b"12\xff34\n"),
    Case("bank-url-not-a-pair", ("--bank-url", "formbank", "status", "ana"), "is not NAME=URL"),
]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """A database where ana's apibank access was refreshed with success; the sandbox's
    manifest. One sandbox and one refresh for the whole corpus."""
    config = SandboxConfig(hostility="none", latency_ms=(0, 2), customers=5)
    with Sandbox.in_thread(config) as sandbox:
        path = tmp_path_factory.mktemp("corpus") / "bank.db"
        asyncio.run(_refreshed(sandbox, f"sqlite+aiosqlite:///{path}"))
        yield path, sandbox.manifest()


async def _refreshed(sandbox: Sandbox, url: str) -> None:
    vault = CredentialVault([KEY])
    async with SandboxAdmin.from_sandbox(sandbox) as admin:
        login = await admin.customer("apibank", 1)
    await migrate(url)
    engine = create_engine(url)
    try:
        sessions = session_factory(engine)
        await add_customer(sessions, "ana", "Ana")
        await add_access(sessions, vault, "ana", "apibank", login["username"], login["password"])
    finally:
        await engine.dispose()  # the last close folds the WAL into the file
    async with Launcher(
        url, vault=vault, bank_urls=sandbox.urls, today=lambda: sandbox.clock.now().date()
    ) as launcher:
        report = await launcher.refresh("ana")
    assert report.ok, report


def _stored(path: Path) -> object:
    """What the database holds, row by row (its bytes when SQLite cannot read it)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            tables = [r[0] for r in connection.execute("SELECT name FROM sqlite_master")]
            return {
                t: sorted(map(repr, connection.execute(f'SELECT * FROM "{t}"'))) for t in tables
            }
    except sqlite3.DatabaseError:
        return path.read_bytes()
    finally:
        connection.close()


def _fill(arg: str | bytes, world: World) -> str | bytes:
    if isinstance(arg, bytes):
        return arg
    return arg.format(manifest=world.manifest, tmp=world.tmp)


# A case that needs permissions to bite cannot run as root (root ignores them): as root it is
# left out, not skipped; the read-only database is still refused through a mode=ro URL.
RUNNABLE = [c for c in CASES if c.as_root or os.geteuid() != 0]


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.id for c in RUNNABLE])
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    case: Case, template: tuple[Path, dict], tmp_path: Path
) -> None:
    path, manifest = template
    world = World(
        tmp_path,
        tmp_path / "bank.db",
        tmp_path / "sandbox.json",
        tmp_path / "logs",
        env={},
    )
    shutil.copyfile(path, world.db)
    world.manifest.write_text(json.dumps(manifest))
    world.env = {
        **os.environ,
        "SCRAPEFLOW_VAULT_KEYS": KEY,
        "SCRAPEFLOW_DB_URL": world.db_url(),
        "SCRAPEFLOW_LOG_DIR": str(world.logs),
        "COLUMNS": "200",
        **case.env,
    }
    if case.prepare is not None:
        case.prepare(world)
    files = [world.db, tmp_path / "other.db"]
    before = {p: _stored(p) for p in files if p.exists()}

    done = run_cli(
        ["bank", *(_fill(a, world) for a in case.args)],
        input=case.stdin,
        env=world.env,
        text=False,
        timeout=60,
    )
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, (done.stdout.decode("utf-8", "replace"), stderr)
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("error: ") and case.message in stderr, stderr
    assert {p: _stored(p) for p in before} == before  # the last success, its counts and times
    assert not world.logs.exists() or not any(world.logs.iterdir())  # no launch began
