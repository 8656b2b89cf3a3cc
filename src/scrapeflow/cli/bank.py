"""``scrapeflow bank …``: customers, accesses, refreshes and what they found.

Passwords are prompted for (hidden) or read from standard input with ``--password-stdin``;
never taken as arguments, where ``ps`` and shell history would keep them. The database is
``--db`` / ``SCRAPEFLOW_DB_URL`` (SQLite ``scrapeflow.db`` by default) and is migrated on use;
the vault key comes from ``SCRAPEFLOW_VAULT_KEYS`` or ``SCRAPEFLOW_VAULT_KEY_FILE``.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import aiohttp
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from scrapeflow._console import run_async
from scrapeflow.banking import (
    AccessReport,
    CredentialVault,
    EventKind,
    Launcher,
    LaunchEvent,
    LaunchLimits,
    LaunchReport,
    accesses_of,
    accounts_of,
    add_access,
    add_customer,
    migrate,
    movements_of,
    reset_stuck,
    scrapers,
    to_csv,
    to_json,
    to_ofx,
)
from scrapeflow.db import DEFAULT_URL, create_engine, session_factory
from scrapeflow.errors import ConfigError, InputError

__all__ = ["bank_app"]

T = TypeVar("T")
EXIT_SOME_FAILED = 1
EXIT_BAD_INPUT = 2

bank_app = typer.Typer(
    help="Bank aggregation: customers, accesses, refreshes, accounts and movements.",
    no_args_is_help=True,
)
out = Console()
err = Console(stderr=True)


class Format(enum.StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"
    OFX = "ofx"


@dataclass
class _Settings:
    db: str = DEFAULT_URL
    bank_urls: dict[str, str] = field(default_factory=dict)
    sandbox: dict[str, Any] | None = None
    log_dir: Path = Path("logs")


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _bank_urls(items: list[str]) -> dict[str, str]:
    urls: dict[str, str] = {}
    for item in items:
        for part in (p.strip() for p in item.split(",")):
            if not part:
                continue
            name, sep, url = part.partition("=")
            if not sep or not name.strip() or "://" not in url:
                raise ConfigError(f"bank URL {part!r} is not NAME=URL (formbank=https://…)")
            urls[name.strip()] = url.strip().rstrip("/")
    return urls


@bank_app.callback()
def _bank_options(
    ctx: typer.Context,
    db: Annotated[
        str, typer.Option(envvar="SCRAPEFLOW_DB_URL", help="Database URL (async driver).")
    ] = DEFAULT_URL,
    bank_url: Annotated[
        list[str] | None,
        typer.Option(
            envvar="SCRAPEFLOW_BANK_URLS",
            help="NAME=URL of a bank's site (repeat, or comma-separate in the variable).",
        ),
    ] = None,
    sandbox: Annotated[
        Path | None,
        typer.Option(
            help="A sandbox manifest (scrapeflow sandbox --manifest): its banks' URLs and clock."
        ),
    ] = None,
    log_dir: Annotated[
        Path, typer.Option(envvar="SCRAPEFLOW_LOG_DIR", help="Where launch logs go.")
    ] = Path("logs"),
) -> None:
    settings = _Settings(db=db, log_dir=log_dir)
    if sandbox is not None:
        try:
            manifest = json.loads(sandbox.read_text())
            settings.bank_urls.update(
                {k: v for k, v in manifest["sites"].items() if k in scrapers()}
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _fail(f"cannot read sandbox manifest {sandbox}: {type(exc).__name__}")
        settings.sandbox = manifest
    settings.bank_urls.update(_bank_urls(bank_url or []))
    ctx.obj = settings


def _settings(ctx: typer.Context) -> _Settings:
    obj = ctx.find_object(_Settings)
    return obj if obj is not None else _Settings()


async def _with_db(settings: _Settings, work: Callable[[Any], Awaitable[T]]) -> T:
    await migrate(settings.db)
    engine = create_engine(settings.db)
    try:
        return await work(session_factory(engine))
    finally:
        await engine.dispose()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return run_async(coro)
    except KeyboardInterrupt:
        err.print("interrupted: the watchdog frees what was in progress")
        raise typer.Exit(130) from None


# -- customers and accesses ------------------------------------------------------------------


@bank_app.command("add-customer")
def _add_customer(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id in your system.")],
    name: Annotated[str, typer.Option(help="A display name.")] = "",
) -> None:
    """Add a customer."""
    settings = _settings(ctx)
    new_id = _run(_with_db(settings, lambda s: add_customer(s, customer, name)))
    out.print(f"customer {escape(customer)} added (id {new_id})")


@bank_app.command("add-access")
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
    settings = _settings(ctx)
    vault = CredentialVault.from_env()
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = typer.prompt(f"Password for {login} at {bank}", hide_input=True)
    if not password:
        _fail("the password is empty")
    access_id = _run(
        _with_db(settings, lambda s: add_access(s, vault, customer, bank, login, password))
    )
    out.print(f"access {access_id} ready: {escape(login)} at {escape(bank)}")


@bank_app.command("scrapers")
def _scrapers() -> None:
    """List the bank scrapers installed (entry points 'scrapeflow.banks')."""
    table = Table("bank", "name", "country", "class")
    for code, cls in scrapers().items():
        table.add_row(code, cls.title, cls.country or "", f"{cls.__module__}.{cls.__qualname__}")
    out.print(table)


# -- refreshing -----------------------------------------------------------------------------


def _launcher(settings: _Settings, limits: LaunchLimits, *, quiet: bool) -> Launcher:
    today: Callable[[], Awaitable[date]] | None = None
    if settings.sandbox is not None:
        manifest = settings.sandbox

        async def sandbox_today() -> date:
            site = next(iter(manifest["sites"][k] for k in ("formbank", "apibank", "legacybank")))
            headers = {"Authorization": f"Bearer {manifest['admin_token']}"}
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{site}/__admin/clock", headers=headers) as response,
            ):
                return datetime.fromisoformat((await response.json())["now"]).date()

        today = sandbox_today
    return Launcher(
        settings.db,
        vault=CredentialVault.from_env(),
        bank_urls=settings.bank_urls,
        limits=limits,
        today=today,
        log_dir=settings.log_dir,
        on_event=None if quiet else _print_event,
    )


def _print_event(event: LaunchEvent) -> None:
    if event.kind is EventKind.ACCOUNTS:
        out.print(f"  {event.bank:<11} access {event.access_id}: {event.count} account(s)")
    elif event.kind is EventKind.ACCESS_FINISHED:
        out.print(f"  {event.bank:<11} access {event.access_id}: {event.result_code}")


def _report_table(reports: list[LaunchReport]) -> Table:
    table = Table(
        "customer",
        "access",
        "bank",
        "result",
        "accounts",
        "movements",
        "balances s",
        "total s",
        "detail",
    )
    for report in reports:
        if report.refused:
            table.add_row(
                escape(report.external_id),
                "",
                "",
                Text("refused", style="red"),
                "",
                "",
                "",
                "",
                escape(report.refused),
            )
        for a in report.accesses:
            style = "green" if a.code.ok else "red"
            table.add_row(
                escape(report.external_id),
                str(a.access_id),
                a.bank,
                Text(a.code.value, style=style),
                str(a.accounts),
                str(a.movements),
                "" if a.balances_seconds is None else f"{a.balances_seconds:.2f}",
                f"{a.seconds:.2f}",
                escape(a.detail or a.message if not a.code.ok else ""),
            )
    return table


@bank_app.command("refresh")
def _refresh(
    ctx: typer.Context,
    customers: Annotated[list[str], typer.Argument(help="Customer ids to refresh, at once.")],
    per_bank: Annotated[int, typer.Option(help="Accesses at once per bank.")] = 50,
    overall: Annotated[int, typer.Option(help="Accesses at once in all.")] = 200,
    access_timeout: Annotated[float, typer.Option(help="Seconds per access.")] = 300.0,
    quiet: Annotated[bool, typer.Option(help="No live progress.")] = False,
) -> None:
    """Refresh customers: every access at once; exit 1 when an access did not succeed."""
    settings = _settings(ctx)
    limits = LaunchLimits(per_bank=per_bank, overall=overall, access_timeout=access_timeout)

    async def work() -> list[LaunchReport]:
        await migrate(settings.db)
        async with _launcher(settings, limits, quiet=quiet) as launcher:
            return await launcher.refresh_many(customers)

    reports = _run(work())
    out.print(_report_table(reports))
    for report in reports:
        if report.refused:
            out.print(f"{escape(report.external_id)}: not refreshed: {escape(report.refused)}")
        else:
            out.print(
                f"{escape(report.external_id)}: {report.seconds:.2f} s, log {report.log_file}"
            )
    if not all(r.ok for r in reports):
        raise typer.Exit(EXIT_SOME_FAILED)


def _scrape_one(ctx: typer.Context, access_id: int, otp: str | None) -> None:
    settings = _settings(ctx)

    async def work() -> AccessReport:
        await migrate(settings.db)
        async with _launcher(settings, LaunchLimits(), quiet=False) as launcher:
            return await launcher.scrape_access(access_id, otp=otp)

    report = _run(work())
    out.print(_report_table([LaunchReport("-", 0, "-", [report])]))
    if not report.code.ok:
        err.print(report.message)
        raise typer.Exit(EXIT_SOME_FAILED)


@bank_app.command("scrape")
def _scrape(
    ctx: typer.Context,
    access_id: Annotated[int, typer.Argument(help="The access to scrape.")],
) -> None:
    """Run one scraper for one access (debugging: scrapeflow --log-level DEBUG bank scrape N)."""
    _scrape_one(ctx, access_id, None)


@bank_app.command("otp")
def _otp(
    ctx: typer.Context,
    access_id: Annotated[int, typer.Argument(help="The access waiting for a one-time code.")],
    code_stdin: Annotated[
        bool, typer.Option("--code-stdin", help="Read the code from standard input.")
    ] = False,
) -> None:
    """Supply the one-time code a bank sent, and resume that access's scrape."""
    code = sys.stdin.readline().strip() if code_stdin else typer.prompt("One-time code").strip()
    if not code.isdigit() or not 4 <= len(code) <= 10:
        _fail("a one-time code is 4-10 digits")
    _scrape_one(ctx, access_id, code)


@bank_app.command("watchdog")
def _watchdog(
    ctx: typer.Context,
    limit: Annotated[float, typer.Option(help="Minutes in progress before a reset.")] = 15.0,
) -> None:
    """Reset accesses and customers stuck in progress (a killed launch) with the timeout code."""
    settings = _settings(ctx)
    found = _run(_with_db(settings, lambda s: reset_stuck(s, limit=timedelta(minutes=limit))))
    out.print(f"reset {len(found.accesses)} access(es) and {len(found.customers)} customer(s)")


# -- reading back ---------------------------------------------------------------------------


@bank_app.command("status")
def _status(
    ctx: typer.Context, customer: Annotated[str, typer.Argument(help="The customer's id.")]
) -> None:
    """The customer's accesses: state, last result, counts."""
    rows = _run(_with_db(_settings(ctx), lambda s: accesses_of(s, customer)))
    table = Table(
        "access", "bank", "login", "state", "result", "accounts", "movements", "finished", "detail"
    )
    for a in rows:
        table.add_row(
            str(a.access_id),
            a.bank,
            escape(a.login),
            a.state.value,
            a.result.value if a.result else "",
            str(a.accounts),
            str(a.movements),
            a.finished_at.isoformat(timespec="seconds") if a.finished_at else "",
            escape(a.detail or ""),
        )
    out.print(table)


@bank_app.command("accounts")
def _accounts(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.TABLE,
) -> None:
    """The customer's accounts and balances."""
    settings = _settings(ctx)
    rows = _run(_with_db(settings, lambda s: accounts_of(s, customer)))
    if format is Format.CSV:
        sys.stdout.write(to_csv(rows, movements=False))
    elif format is Format.JSON:
        sys.stdout.write(to_json(rows) + "\n")
    elif format is Format.OFX:
        sys.stdout.write(to_ofx(rows, []))
    else:
        table = Table("bank", "account", "alias", "type", "currency", "balance", "updated")
        for a in rows:
            table.add_row(
                a.bank,
                a.label,
                escape(a.alias),
                a.type.value,
                a.currency,
                f"{a.balance:,.2f}",
                a.updated_at.isoformat(timespec="seconds"),
            )
        out.print(table)


@bank_app.command("movements")
def _movements(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    account: Annotated[
        list[str] | None, typer.Option(help="Only this account (bank ref or IBAN; repeat).")
    ] = None,
    since: Annotated[str | None, typer.Option(help="Operated on or after YYYY-MM-DD.")] = None,
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.TABLE,
) -> None:
    """The customer's movements, newest first."""
    settings = _settings(ctx)
    try:
        since_date = date.fromisoformat(since) if since else None
    except ValueError:
        raise InputError(f"--since {since!r} is not a YYYY-MM-DD date") from None

    async def work(sessions: Any) -> tuple[list[Any], list[Any]]:
        moves = await movements_of(sessions, customer, accounts=account or (), since=since_date)
        accounts = await accounts_of(sessions, customer) if format is Format.OFX else []
        return moves, accounts

    moves, accounts = _run(_with_db(settings, work))
    if format is Format.CSV:
        sys.stdout.write(to_csv(moves, movements=True))
    elif format is Format.JSON:
        sys.stdout.write(to_json(moves) + "\n")
    elif format is Format.OFX:
        wanted = {m.account_ref for m in moves} if account else None
        chosen = [a for a in accounts if wanted is None or a.bank_ref in wanted]
        sys.stdout.write(to_ofx(chosen, moves))
    else:
        table = Table("date", "value", "account", "amount", "description", "pending", "balance")
        for m in moves:
            table.add_row(
                m.operation_date.isoformat(),
                m.value_date.isoformat(),
                m.account,
                f"{m.amount:,.2f} {m.currency}",
                escape(m.description),
                "yes" if m.pending else "",
                "" if m.balance_after is None else f"{m.balance_after:,.2f}",
            )
        out.print(table)
        out.print(f"{len(moves)} movement(s)")


@bank_app.command("new-key")
def _new_key() -> None:
    """Print a new vault key (put it in SCRAPEFLOW_VAULT_KEYS or a key file)."""
    sys.stdout.write(CredentialVault.generate_key() + "\n")
