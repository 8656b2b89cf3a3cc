"""``scrapeflow bank …``: customers, accesses, refreshes and what they found.

Passwords are prompted for (hidden) or read from standard input with ``--password-stdin``;
never taken as arguments, where ``ps`` and shell history would keep them. The database is
``--db`` / ``SCRAPEFLOW_DB_URL`` (SQLite ``scrapeflow.db`` by default) and is migrated on use —
when it is empty or scrapeflow's already: one holding another application's tables is refused
(``bank migrate --adopt`` takes it on). The vault key comes from ``SCRAPEFLOW_VAULT_KEYS`` or
``SCRAPEFLOW_VAULT_KEY_FILE`` (a file only its owner may read). Every other setting is in
``docs/configuration.md``.

Arguments are checked before the database is opened; a database that cannot be used (corrupt,
read-only, not a database) is a one-line exit 2 naming it, like any other bad input.

``refresh`` queues one ``bank.refresh`` job per customer in the database's jobs table — the
service's, under the same dedupe key — and runs them in this process: a customer the service
(or another command) is already refreshing is not refreshed twice, this command waits for that
refresh and reports it. ``watchdog`` is the job queue's stalled-job sweep plus the reset of
bank rows stuck in progress.
"""

from __future__ import annotations

import enum
import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from scrapeflow.cli import _bankbook, _bankkit
from scrapeflow.cli._bankdb import customer_ids as _customer_ids
from scrapeflow.cli._bankdb import on_bank_db as _run
from scrapeflow.cli._bankdb import with_db as _with_db
from scrapeflow.cli._banktables import (
    print_accesses,
    print_accounts,
    print_event,
    print_movements,
    report_table,
)
from scrapeflow.cli._common import (
    EXIT_FAILED,
    HELP_OPTION,
    ask,
    err,
    fail,
    input_errors,
    out,
    password_from_stdin,
    remember_options,
    settings,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from scrapeflow.banking import AccessReport, BankJobEvent, Launcher, LaunchReport
    from scrapeflow.config import Settings
    from scrapeflow.jobs import EmbeddedJobQueue, Job

__all__ = ["app"]

T = TypeVar("T")
_MAX_ID = 2**31 - 1
"""The largest id an INTEGER column holds on every database (PostgreSQL's is 32 bits)."""

app = typer.Typer(
    help="Bank aggregation: customers, accesses, refreshes, accounts and movements.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings=HELP_OPTION,
)


class _Format(enum.StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"
    OFX = "ofx"


@app.callback()
def _bank_options(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            help="Database URL, async driver (SCRAPEFLOW_DB_URL).",
            show_default="sqlite+aiosqlite:///scrapeflow.db",
        ),
    ] = None,
    bank_url: Annotated[
        list[str] | None,
        typer.Option(help="NAME=URL of a bank's site (repeat; SCRAPEFLOW_BANK_URLS)."),
    ] = None,
    sandbox: Annotated[
        Path | None,
        typer.Option(
            help="A sandbox manifest (scrapeflow sandbox --manifest): its banks' URLs and clock."
        ),
    ] = None,
    log_dir: Annotated[
        Path | None,
        typer.Option(help="Where launch logs go (SCRAPEFLOW_LOG_DIR).", show_default="logs"),
    ] = None,
) -> None:
    remember_options(
        ctx, None, db_url=db, bank_urls=bank_url, sandbox_manifest=sandbox, log_dir=log_dir
    )


# -- customers and accesses ------------------------------------------------------------------


@app.command("add-customer")
def _add_customer(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id in your system.")],
    name: Annotated[str, typer.Option(help="A display name.")] = "",
) -> None:
    """Add a customer."""
    from scrapeflow.banking import add_customer, validate_customer_name

    config = settings(ctx)
    (customer,) = _customer_ids([customer])
    with input_errors():
        name = validate_customer_name(name)
    new_id = _run(config, _with_db(config, lambda s: add_customer(s, customer, name)), creates=True)
    out.print(f"customer {escape(customer)} added (id {new_id})")


@app.command("add-access")
def _add_access(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    bank: Annotated[str, typer.Argument(help="The bank's code (scrapeflow bank scrapers).")],
    login: Annotated[str, typer.Argument(help="The customer's user name at the bank.")],
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from standard input.")
    ] = False,
) -> None:
    """Add a customer's login at a bank (or change its password). The password is prompted."""
    from scrapeflow.banking import (
        CredentialVault,
        add_access,
        get_scraper,
        validate_login,
        validate_password,
    )

    config = settings(ctx)
    (customer,) = _customer_ids([customer])
    with input_errors():
        vault = CredentialVault.from_settings(config)
        get_scraper(bank)
        login = validate_login(login)
    if password_stdin:
        password = password_from_stdin()
    else:
        password = ask(f"Password for {login} at {bank}", hide=True, what="password")
    if not password:
        fail("the password is empty")
    with input_errors():
        validate_password(password)
    access_id = _run(
        config, _with_db(config, lambda s: add_access(s, vault, customer, bank, login, password))
    )
    out.print(f"access {access_id} ready: {escape(login)} at {escape(bank)}")


@app.command("scrapers")
def _scrapers() -> None:
    """List the bank scrapers installed (entry points 'scrapeflow.banks')."""
    from scrapeflow.banking import scrapers

    table = Table("bank", "name", "country", "class")
    for code, cls in scrapers().items():
        table.add_row(code, cls.title, cls.country or "", f"{cls.__module__}.{cls.__qualname__}")
    out.print(table)


# -- refreshing -----------------------------------------------------------------------------


def _launcher(config: Settings, *, quiet: bool) -> Launcher:
    """A launcher on ``config`` (``launcher_from_settings``: the banks' URLs from flags, then
    the sandbox manifest; limits; window; log directory; the sandbox's clock)."""
    from scrapeflow.banking import launcher_from_settings

    with input_errors():
        return launcher_from_settings(config, on_event=None if quiet else print_event)


@app.command("refresh")
def _refresh(
    ctx: typer.Context,
    customers: Annotated[list[str], typer.Argument(help="Customer ids to refresh, at once.")],
    per_bank: Annotated[
        int | None, typer.Option(help="Accesses at once per bank.", show_default="50")
    ] = None,
    overall: Annotated[
        int | None, typer.Option(help="Accesses at once in all.", show_default="200")
    ] = None,
    access_timeout: Annotated[
        float | None, typer.Option(help="Seconds per access.", show_default="300")
    ] = None,
    initial_days: Annotated[
        int | None,
        typer.Option(help="Days of movements read for an account seen first.", show_default="14"),
    ] = None,
    overlap_days: Annotated[
        int | None,
        typer.Option(help="Days re-read before the newest stored movement.", show_default="3"),
    ] = None,
    quiet: Annotated[bool, typer.Option(help="No live progress.")] = False,
) -> None:
    """Refresh customers: every access at once; exit 1 when an access did not succeed.

    Each customer's refresh is a job in the database's jobs table, run here: a customer that
    the service (or another command) is refreshing already is not refreshed twice — this waits
    for that refresh and reports it. Ctrl-C cancels this command's refreshes."""
    config = settings(
        ctx,
        per_bank=per_bank,
        overall=overall,
        access_timeout=access_timeout,
        initial_days=initial_days,
        overlap_days=overlap_days,
    )
    wanted = list(dict.fromkeys(_customer_ids(customers)))  # a customer named twice: one job
    reports = _run(
        config,
        _refresh_jobs(config, wanted, quiet=quiet),
        interrupted="interrupted: this command's refreshes were cancelled; what they stored stays",
    )
    out.print(report_table(reports))
    for report in reports:
        if report.refused:
            out.print(f"{escape(report.external_id)}: not refreshed: {escape(report.refused)}")
        elif report.log_file is None:
            out.print(f"{escape(report.external_id)}: {report.seconds:.2f} s")
        else:
            out.print(
                f"{escape(report.external_id)}: {report.seconds:.2f} s, log {report.log_file}"
            )
    if not all(r.ok for r in reports):
        raise typer.Exit(EXIT_FAILED)


async def _refresh_jobs(config: Settings, wanted: list[str], *, quiet: bool) -> list[LaunchReport]:
    """Check every customer, then queue a ``bank.refresh`` job for each (or join the one under
    way) and run them here, to their end. Cancelled (Ctrl-C, SIGTERM), it cancels the jobs it
    queued; one it joined goes on (run here, it is put back in the queue)."""
    import asyncio

    from scrapeflow.banking import (
        BANK_REFRESH,
        BankJobs,
        migrate,
        refresh_key,
        refresh_reports,
    )
    from scrapeflow.jobs import EmbeddedJobQueue, SqlJobStore

    # Entered first: a bad manifest or vault key is refused before the database is opened.
    async with BankJobs(config, on_event=None if quiet else _print_bank_event) as bank:
        await migrate(config.db_url)
        await bank.check_refresh(wanted)  # every customer first: a refusal queues nothing
        queue = EmbeddedJobQueue(
            SqlJobStore(config.db_url),
            bank.kinds,
            concurrency=len(wanted),
            heartbeat=config.job_heartbeat,
            only_submitted=True,  # never the service's other jobs
        )
        async with queue:
            jobs: list[Job] = []
            try:
                for customer in wanted:
                    job = await queue.submit(
                        BANK_REFRESH, {"customer": customer}, dedupe_key=refresh_key(customer)
                    )
                    jobs.append(job)
                    if not queue.submitted_here(job.id):
                        out.print(
                            f"{escape(customer)}: a refresh is already under way (job {job.id},"
                            f" {job.state.value}): waiting for it"
                        )
                done = await asyncio.gather(*(queue.wait(job.id) for job in jobs))
            except asyncio.CancelledError:
                ours = [job.id for job in jobs if queue.submitted_here(job.id)]
                await asyncio.shield(_cancel_jobs(queue, ours))
                raise
    return [report for job in done for report in refresh_reports(job)]


async def _cancel_jobs(queue: EmbeddedJobQueue, job_ids: list[str]) -> None:
    for job_id in job_ids:
        await queue.cancel(job_id)


def _print_bank_event(event: BankJobEvent) -> None:
    print_event(event.event)


def _scrape_one(ctx: typer.Context, access_id: int, otp: str | None) -> None:
    from scrapeflow.banking import LaunchReport, migrate

    config = settings(ctx)
    launcher = _launcher(config, quiet=False)

    async def work() -> tuple[str, AccessReport]:
        from sqlalchemy import select

        from scrapeflow.banking import Access, Customer

        await migrate(config.db_url)
        async with launcher:
            report = await launcher.scrape_access(access_id, otp=otp)
            async with launcher.sessions() as session:
                owner = await session.scalar(
                    select(Customer.external_id).join(Access).where(Access.id == access_id)
                )
        return owner or "", report

    customer, report = _run(config, work())
    out.print(report_table([LaunchReport("-", 0, customer, [report])]))
    if not report.code.ok:
        err.print(report.message)
        raise typer.Exit(EXIT_FAILED)


@app.command("scrape")
def _scrape(
    ctx: typer.Context,
    access_id: Annotated[int, typer.Argument(help="The access to scrape.", min=1, max=_MAX_ID)],
) -> None:
    """Run one scraper for one access, stored as a refresh stores it (to see each request
    without a database: scrapeflow bank try)."""
    _scrape_one(ctx, access_id, None)


@app.command("otp")
def _otp(
    ctx: typer.Context,
    access_id: Annotated[
        int,
        typer.Argument(help="The access waiting for a one-time code.", min=1, max=_MAX_ID),
    ],
    code_stdin: Annotated[
        bool, typer.Option("--code-stdin", help="Read the code from standard input.")
    ] = False,
) -> None:
    """Supply the one-time code a bank sent, and resume that access's scrape."""
    if code_stdin:  # bytes, bounded: a code is short, and anything but digits is refused
        code = sys.stdin.buffer.readline(64).decode("utf-8", "replace").strip()
    else:
        code = ask("One-time code", what="code").strip()
    if not code.isdigit() or not 4 <= len(code) <= 10:
        fail("a one-time code is 4-10 digits")
    _scrape_one(ctx, access_id, code)


@app.command("watchdog")
def _watchdog(
    ctx: typer.Context,
    limit: Annotated[
        float | None,
        typer.Option(help="Minutes without a heartbeat before a reset.", show_default="15"),
    ] = None,
) -> None:
    """Put back in the queue the jobs whose process died, and reset accesses and customers
    stuck in progress (a killed launch) with the timeout code.

    A job is put back after LIMIT minutes and three job heartbeats (SCRAPEFLOW_JOB_HEARTBEAT)
    without a beat, or failed once it has had its attempts; the service, or the next command
    asking for the same refresh, runs it again. A row is reset after LIMIT minutes and three of
    its launcher's heartbeat intervals without a beat, never while a live job holds its
    customer."""
    from datetime import timedelta

    from scrapeflow.banking import WatchdogReport, run_watchdog
    from scrapeflow.jobs import EmbeddedJobQueue, SqlJobStore

    config = settings(ctx, watchdog_minutes=limit, flag_names={"watchdog_minutes": "--limit"})
    window = timedelta(minutes=config.watchdog_minutes)

    async def sweep(sessions: async_sessionmaker[AsyncSession]) -> WatchdogReport:
        jobs = EmbeddedJobQueue(
            SqlJobStore(config.db_url), {}, heartbeat=config.job_heartbeat, run_jobs=False
        )
        async with jobs:
            return await run_watchdog(jobs, sessions, limit=window, heartbeat=config.heartbeat)

    found = _run(config, _with_db(config, sweep))
    out.print(
        f"reset {len(found.accesses)} access(es) and {len(found.customers)} customer(s); "
        f"{len(found.requeued)} stalled job(s) requeued, {len(found.failed)} failed"
    )


# -- reading back ---------------------------------------------------------------------------


@app.command("status")
def _status(
    ctx: typer.Context, customer: Annotated[str, typer.Argument(help="The customer's id.")]
) -> None:
    """The customer's accesses: state, last result, counts."""
    from scrapeflow.banking import accesses_of

    config = settings(ctx)
    (customer,) = _customer_ids([customer])
    print_accesses(_run(config, _with_db(config, lambda s: accesses_of(s, customer))))


app.command("new")(_bankkit.new)
app.command("try")(_bankkit.try_bank)
app.command("record")(_bankkit.record)
app.command("customers")(_bankbook.customers)
app.command("rename")(_bankbook.rename)
app.command("disable")(_bankbook.disable)
app.command("enable")(_bankbook.enable)


@app.command("erase")
def _erase(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    access: Annotated[
        int | None, typer.Option(help="Erase only this access of the customer.", min=1)
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Erase: nothing is asked, nothing kept.")
    ] = False,
) -> None:
    """Erase a customer (or one access) with everything read through it: accesses and their
    credentials, accounts, movements, events, ended jobs, launch logs. Needs --yes."""
    from scrapeflow.db import create_engine
    from scrapeflow.server._erasure import erase_access, erase_customer

    config = settings(ctx)
    (customer,) = _customer_ids([customer])
    what = f"access {access} of {customer}" if access else f"customer {customer}"
    if not yes:
        fail(f"erasing {what} deletes it and everything read through it for good: add --yes")

    async def erase(_: async_sessionmaker[AsyncSession]) -> Any:
        engine = create_engine(config.db_url)
        try:
            if access:
                return await erase_access(engine, customer, access, by="cli")
            return await erase_customer(engine, customer, by="cli", log_dir=config.log_dir)
        finally:
            await engine.dispose()

    done = _run(config, _with_db(config, erase))
    counts = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in done.counts.items())
    out.print(f"erased {escape(what)}: {counts}")


@app.command("accounts")
def _accounts(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    format: Annotated[_Format, typer.Option("--format", "-f")] = _Format.TABLE,
) -> None:
    """The customer's accounts and balances."""
    from scrapeflow.banking import accounts_of

    config = settings(ctx)
    (customer,) = _customer_ids([customer])
    print_accounts(_run(config, _with_db(config, lambda s: accounts_of(s, customer))), format)


@app.command("movements")
def _movements(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    account: Annotated[
        list[str] | None, typer.Option(help="Only this account (bank ref or IBAN; repeat).")
    ] = None,
    since: Annotated[str | None, typer.Option(help="Operated on or after YYYY-MM-DD.")] = None,
    format: Annotated[_Format, typer.Option("--format", "-f")] = _Format.TABLE,
) -> None:
    """The customer's movements, newest first."""
    from scrapeflow.banking import accounts_of, movements_of

    config = settings(ctx)
    (customer,) = _customer_ids([customer])
    if any(not _is_text(a) for a in account or ()):
        fail("--account is not valid UTF-8 text")
    try:
        since_date = date.fromisoformat(since) if since else None
    except ValueError:
        fail(f"--since {since!r} is not a YYYY-MM-DD date")

    async def work(sessions: Any) -> tuple[list[Any], list[Any]]:
        moves = await movements_of(sessions, customer, accounts=account or (), since=since_date)
        accounts = await accounts_of(sessions, customer) if format is _Format.OFX else []
        return moves, accounts

    moves, accounts = _run(config, _with_db(config, work))
    wanted = {m.account_ref for m in moves} if account else None
    chosen = [a for a in accounts if wanted is None or a.bank_ref in wanted]
    print_movements(moves, chosen, format)


def _is_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (a non-UTF-8 argument arrives with lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@app.command("migrate")
def _migrate(
    ctx: typer.Context,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt", help="Add the bank tables to a database holding another application's."
        ),
    ] = False,
) -> None:
    """Create or upgrade the bank schema (every command does it first; only this one adopts a
    database that already holds other tables)."""
    from scrapeflow.banking import migrate

    config = settings(ctx)
    _run(config, migrate(config.db_url, adopt=adopt), creates=True)
    out.print("the bank schema is up to date")


@app.command("new-key")
def _new_key() -> None:
    """Print a new vault key (put it in SCRAPEFLOW_VAULT_KEYS or a key file)."""
    from scrapeflow.banking import CredentialVault

    sys.stdout.write(CredentialVault.generate_key() + "\n")
