"""The bank author's commands: ``bank new`` (a package for a new bank's scraper, its test
passing at once), ``bank try`` (one live scrape, no database, each request shown
as it goes) and ``bank record`` (the same, kept as a redacted HAR recording and checked by
replaying it at once, its golden file written beside it). Registered on ``scrapeflow bank`` by
:mod:`scrapeflow.cli.bank`. docs/writing-a-bank.md walks through them.

Passwords are prompted for (hidden) or read with ``--password-stdin``, never arguments; every
URL printed has the login, password and code, and the query's secret-named values, masked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from scrapeflow.cli._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    ask,
    err,
    fail,
    input_errors,
    out,
    password_from_stdin,
    settings,
)

if TYPE_CHECKING:
    from scrapeflow.banking import BasicScraper, IncrementalPolicy
    from scrapeflow.banking.testing import OfflineScrape, Recording, Redactor
    from scrapeflow.config import Settings
    from scrapeflow.http import Exchange

__all__ = ["new", "record", "try_bank"]

Login = Annotated[str | None, typer.Option("--login", help="The login at the bank.")]
PasswordStdin = Annotated[
    bool,
    typer.Option("--password-stdin", help="Read the password from standard input's first line."),
]
Interactive = Annotated[
    bool,
    typer.Option(
        "--interactive",
        help="When the bank asks for a one-time code, ask for it here and go on.",
    ),
]
BankUrl = Annotated[
    str | None, typer.Option("--bank-url", help="The bank's site (default: as configured).")
]


def new(
    name: Annotated[str, typer.Argument(help="The bank's code: lower case, digits, '_'.")],
    kind: Annotated[
        str,
        typer.Option(help="What the bank is: 'html' (pages and forms) or 'api' (JSON)."),
    ] = "html",
    directory: Annotated[
        Path | None,
        typer.Option(help="Where to make it.", show_default="./scrapeflow-bank-NAME"),
    ] = None,
) -> None:
    """Make a package for a new bank's scraper: the scraper, its test, a recorded session
    and its golden file, a pyproject.toml registering it, a README."""
    from scrapeflow.banking import new_bank

    with input_errors():
        made = new_bank(name, kind=kind, directory=directory)
    out.print(f"made {escape(str(made))}: the {kind} scraper of bank {name!r}")
    out.print(f"  cd {escape(str(made))} && pip install -e . && pytest", soft_wrap=True)


def try_bank(
    ctx: typer.Context,
    bank: Annotated[str, typer.Argument(help="The bank's code (see: scrapeflow bank scrapers).")],
    login: Login = None,
    bank_url: BankUrl = None,
    password_stdin: PasswordStdin = False,
    interactive: Interactive = False,
) -> None:
    """One scrape against the live bank, without a database: each request as it goes
    (method, URL, status, ms, redirects; secrets masked), then what was read."""
    scraper, url, today = _target(ctx, bank, bank_url)
    if not login:
        fail("--login is needed: the login to try at the bank")
    password = _password(password_stdin)
    scrape, _ = _scrape(scraper, url, today, login, password, interactive=interactive)
    _print_read(scrape)
    if not scrape.ok:
        err.print(f"{scrape.result.value}: {escape(scrape.detail)}")
        raise typer.Exit(EXIT_FAILED)


def record(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="An access id (its bank, login and stored password), or a bank's code with "
            "--login."
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HAR file to write.")],
    login: Login = None,
    bank_url: BankUrl = None,
    golden: Annotated[
        Path | None,
        typer.Option(help="The golden file to write (default: the output's name, .json)."),
    ] = None,
    password_stdin: PasswordStdin = False,
    interactive: Interactive = False,
) -> None:
    """Record one live scrape as HAR, redacted (passwords, codes, tokens, cookies, IBANs),
    replay it offline at once and write what it read as the golden file beside it."""
    from scrapeflow.banking import IncrementalPolicy
    from scrapeflow.banking.testing import check_golden

    config = settings(ctx)
    if output.suffix.lower() != ".har":
        fail(f"--output {output}: a recording is a .har file")
    golden_path = golden or output.with_suffix(".json")
    _writable("--output", output)  # found before the scrape, not after it
    _writable("--golden", golden_path)
    if target.isascii() and target.isdigit():
        bank, login, password = _stored_access(config, int(target))
    else:
        bank = target
        if not login:
            fail("--login is needed with a bank's code (or give an access id)")
        password = _password(password_stdin)
    scraper, url, today = _target(ctx, bank, bank_url)
    scrape, recording = _scrape(
        scraper,
        url,
        today,
        login,
        password,
        interactive=interactive,
        policy=IncrementalPolicy(config.initial_days, config.overlap_days),
    )
    again = _check_replay(scrape, recording)  # in memory: nothing is written for a refusal
    try:
        recording.save(output)
        check_golden(again, golden_path, update=True)
    except OSError as exc:
        fail(f"cannot write the recording: {exc.strerror or exc} ({exc.filename or output})")
    _print_read(scrape)
    err.print(
        f"recorded {len(recording)} requests to {escape(str(output))}; replayed offline: "
        f"{scrape.result.value}, golden file {escape(str(golden_path))}"
    )
    if not scrape.ok:
        err.print(f"{scrape.result.value}: {escape(scrape.detail)}")
        raise typer.Exit(EXIT_FAILED)


# -- shared ---------------------------------------------------------------------------------


def _target(
    ctx: typer.Context, bank: str, bank_url: str | None
) -> tuple[type[BasicScraper], str, date]:
    """The scraper, the bank's URL and the day it is for it (the sandbox's clock with
    ``--sandbox``)."""
    from scrapeflow.banking import bank_sites, get_scraper
    from scrapeflow.errors import UnknownScraper

    config = settings(ctx)
    try:
        scraper = get_scraper(bank)
    except UnknownScraper as exc:
        fail(str(exc))
    with input_errors():
        urls, today = bank_sites(config)
    url = bank_url or urls.get(bank) or scraper.default_url
    if not url:
        fail(f"no URL for bank {bank!r}: give --bank-url (or --sandbox, SCRAPEFLOW_BANK_URLS)")

    async def day() -> date:
        return await today()

    return scraper, url, asyncio.run(day())


def _password(from_stdin: bool) -> str:
    return password_from_stdin() if from_stdin else ask("Password", what="password", hide=True)


def _stored_access(config: Settings, access_id: int) -> tuple[str, str, str]:
    """The bank, login and password of a stored access (opened with the vault)."""
    from sqlalchemy import select

    from scrapeflow.banking import Access, CredentialVault, FinancialEntity
    from scrapeflow.cli._bankdb import on_bank_db, with_db

    with input_errors():
        vault = CredentialVault.from_settings(config)

    async def read(sessions: Any) -> tuple[str, str, bytes] | None:
        async with sessions() as session:
            row = (
                await session.execute(
                    select(FinancialEntity.code, Access.login, Access.secret)
                    .join(Access, Access.entity_id == FinancialEntity.id)
                    .where(Access.id == access_id)
                )
            ).first()
        return None if row is None else (row[0], row[1], row[2])

    found = on_bank_db(config, with_db(config, read))
    if found is None:
        fail(f"no access {access_id}")
    bank, login, secret = found
    with input_errors():
        return bank, login, vault.decrypt(secret)


def _scrape(
    scraper: type[BasicScraper],
    url: str,
    today: date,
    login: str,
    password: str,
    *,
    interactive: bool,
    policy: IncrementalPolicy | None = None,
) -> tuple[OfflineScrape, Recording]:
    """Scrape once, each request printed as it goes, and keep the session (redacted): with
    ``interactive``, a code the bank asks for is read from the terminal and sent in a second
    run, with the session the bank asked in."""
    from scrapeflow.banking.testing import Redactor, record

    masks = Redactor(known={"LOGIN": login, "PASSWORD": password})

    async def code(asked: OfflineScrape) -> str:
        err.print(f"the bank asks for a one-time code: {escape(asked.detail)}")
        typed = (await asyncio.to_thread(ask, "One-time code", what="code")).strip()
        masks.add("OTP", typed)
        return typed

    try:
        return asyncio.run(
            record(
                scraper,
                login=login,
                password=password,
                base_url=url,
                otp=code if interactive else None,
                today=today,
                policy=policy,
                observers=[_printer(masks)],
            )
        )
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _printer(masks: Redactor) -> Callable[[Exchange], None]:
    from scrapeflow._util.redact import redact_url

    def shown(url: str) -> str:
        return escape(redact_url(masks.apply(url)))

    def show(exchange: Exchange) -> None:
        response = exchange.response
        hops = "".join(f" → {hop.status} {shown(hop.url)}" for hop in exchange.redirects)
        final = f" → {shown(response.url)}" if exchange.redirects else ""
        err.print(
            f"{exchange.method} {shown(exchange.url)}{hops}{final}  "
            f"{response.status}  {response.elapsed * 1000:.0f} ms  {len(response.body)} B",
            soft_wrap=True,
        )

    return show


def _check_replay(live: OfflineScrape, recording: Recording) -> OfflineScrape:
    """Replay the recording offline; what it reads must be what the live scrape read, secrets
    as the recording spells them. What the replay read (for the golden file)."""
    from scrapeflow.banking.testing import golden_of, replay
    from scrapeflow.errors import NotRecorded

    try:
        again = asyncio.run(replay(recording))
    except NotRecorded as exc:
        fail(f"the recording does not replay: {exc}", EXIT_FAILED)
    if comparable(recording.as_recorded(golden_of(live))) != comparable(golden_of(again)):
        fail(
            "the replay read otherwise than the live scrape (a value the scraper parses was "
            "taken out by the redaction, or it reads differently each run): nothing written",
            EXIT_FAILED,
        )
    return again


def comparable(golden: dict[str, Any]) -> dict[str, Any]:
    """A golden file's data as a live read and its replay must agree on it. A hashed movement
    key (``h:…``, no bank reference) is made from what the movement says; where that held a
    secret (an IBAN in a description), the recording holds its fake and the replay's key
    differs from the live one by design. Such keys are left out of the comparison (every other
    field still compared, the movements in a fixed order); the golden file keeps the replay's,
    which every later replay makes again."""
    data: dict[str, Any] = json.loads(json.dumps(golden))
    for movements in data.get("movements", {}).values():
        for movement in movements:
            if str(movement.get("key", "")).startswith("h:"):
                movement["key"] = "h:*"
        movements.sort(key=lambda m: json.dumps(m, sort_keys=True))
    return data


def _writable(option: str, path: Path) -> None:
    """Refuse, before any scrape, a file that could not be written: a directory, or one in a
    folder that cannot be made or written."""
    import os

    if path.is_dir():
        fail(f"{option} {path}: is a directory")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        fail(f"{option} {path}: cannot write in {folder}")


def _print_read(scrape: OfflineScrape) -> None:
    accounts = Table("account", "iban / number", "alias", "type", "currency", "balance")
    for account in scrape.accounts:
        accounts.add_row(
            escape(account.bank_ref),
            escape(account.iban or account.number or ""),
            escape(account.alias),
            account.type.value,
            account.currency,
            str(account.balance),
        )
    out.print(accounts)
    moves = Table("account", "date", "value", "amount", "description", "pending")
    for ref, movements in scrape.movements.items():
        for movement in movements:
            moves.add_row(
                escape(ref),
                movement.operation_date.isoformat(),
                movement.value_date.isoformat(),
                str(movement.amount),
                escape(movement.description),
                "yes" if movement.pending else "",
            )
    out.print(moves)
    total = sum(len(m) for m in scrape.movements.values())
    out.print(
        f"{scrape.bank}: {scrape.result.value}, {len(scrape.accounts)} accounts, {total} movements"
    )
