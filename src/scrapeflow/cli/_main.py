"""The root ``scrapeflow`` command: the command groups, global options, the entry point.

Global options come before the command (``scrapeflow --log-level DEBUG bank scrape 3``) and are
read here, not by typer, and so is the root's ``--help``: typer coerces every option of a group
a command passes through, with pydantic, which would double the start-up of ``scrapeflow bank
--help``. The commands and groups below the root have their own ``--help``.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from typer import _click as click

from scrapeflow.cli import bank, crawl, demo, fetch, run, sandbox, serve, status, worker
from scrapeflow.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_UNEXPECTED,
    HELP_OPTION,
    RootOptions,
    fail,
)
from scrapeflow.cli._help import plain_help

__all__ = ["app", "command", "main"]

_GLOBAL_OPTIONS = """\b
Global options, before the command:
  --version                  the version, and nothing else
  --config FILE              a scrapeflow.toml settings file (SCRAPEFLOW_CONFIG)
  --log-level LEVEL          DEBUG, INFO, WARNING (default) or ERROR: logs on stderr
  --log-json / --log-pretty  log format (default: pretty on a terminal, else JSON)

Every setting: docs/configuration.md. Exit codes: 0 done; 1 some tasks failed (recorded);
2 bad input (nothing stored changed); 3 unexpected; 130 interrupted (run again to resume)."""

app = typer.Typer(
    name="scrapeflow",
    help="Fast, parallel, resumable web scraping.",
    epilog=_GLOBAL_OPTIONS,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": []},
)
app.command("run", context_settings=HELP_OPTION)(run.run)
app.command("fetch", context_settings=HELP_OPTION)(fetch.fetch)
app.command("crawl", context_settings=HELP_OPTION)(crawl.crawl)
app.command("shell", context_settings=HELP_OPTION)(crawl.shell)
app.command("status", context_settings=HELP_OPTION)(status.status)
app.command("demo", context_settings=HELP_OPTION)(demo.demo)
app.command("sandbox", context_settings=HELP_OPTION)(sandbox.sandbox)
app.command("serve", context_settings=HELP_OPTION)(serve.serve)
app.command("worker", context_settings=HELP_OPTION)(worker.worker)
app.add_typer(bank.app, name="bank")
app.add_typer(serve.keys, name="keys")


_GLOBAL_NAMES = frozenset({"--config", "--log-level", "--log-json", "--log-pretty", "--version"})


def split_global_options(argv: Sequence[str]) -> tuple[RootOptions, list[str]]:
    """The global options before the command, and the rest of ``argv`` for typer."""
    config: Path | None = None
    flags: dict[str, Any] = {}
    rest = list(argv)
    while rest and rest[0].startswith("--"):
        name, sep, value = rest[0].partition("=")
        if name not in ("--config", "--log-level", "--log-json", "--log-pretty"):
            break
        rest.pop(0)
        if name in ("--log-json", "--log-pretty"):
            if sep:
                fail(f"{name} takes no value")
            flags["log_json"] = name == "--log-json"
            continue
        if not sep:
            if not rest:
                fail(f"{name} needs a value")
            value = rest.pop(0)
        if name == "--config":
            config = Path(value)
        else:
            flags["log_level"] = value
    return RootOptions(config, flags), rest


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    _raise_open_files_limit()
    try:
        options, args = split_global_options(sys.argv[1:] if argv is None else argv)
        if args[:1] in (["--version"], ["-V"]):
            typer.echo(f"scrapeflow {_version()}")
            code = 0
        elif not args or args[0] in HELP_OPTION["help_option_names"]:
            print_root_help()
            code = 0 if args else EXIT_BAD_INPUT
        else:
            code = command().main(
                args=args, prog_name="scrapeflow", obj=options, standalone_mode=False
            )
    except typer.Exit as done:
        code = done.exit_code
    except BrokenPipeError:  # `scrapeflow status DIR | head`
        code = 0
    except (KeyboardInterrupt, typer.Abort):
        code = EXIT_INTERRUPTED
    except Exception as exc:
        code = _report(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scrapeflow")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def command() -> click.Command:
    """The click command typer makes of :data:`app`, its help in words (see ``_help``)."""
    return plain_help(typer.main.get_command(app))


def print_root_help() -> None:
    """The root command's help: its commands and the global options."""
    root = command()
    with root.make_context("scrapeflow", [], resilient_parsing=True) as ctx:
        typer.echo(root.get_help(ctx))


def _report(exc: Exception) -> int:
    """One line for an error that reached the top; its exit code."""
    from scrapeflow._util.redact import redact
    from scrapeflow.errors import ScrapeflowError

    if type(exc).__name__ == "NoArgsIsHelpError":  # `scrapeflow bank`: its help, as help
        ctx = getattr(exc, "ctx", None)
        typer.echo(ctx.get_help() if ctx is not None else str(exc))
        return EXIT_BAD_INPUT
    if type(exc).__module__.startswith(("typer", "click")) and hasattr(exc, "format_message"):
        # A usage error (typer's own click): unknown option, bad value, missing argument.
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "scrapeflow"
        option = getattr(exc, "option_name", None)
        if type(exc).__name__ == "NoSuchOption" and option in _GLOBAL_NAMES:
            root = ctx.find_root().command_path if ctx is not None else command
            where = command[len(root) :].strip() or "the command"
            return _print(f"{option} is a global option: put it before {where}", EXIT_BAD_INPUT)
        return _print(f"{exc.format_message()} (see {command} --help)", EXIT_BAD_INPUT)
    if isinstance(exc, ScrapeflowError):
        return _print(str(exc), EXIT_BAD_INPUT)
    if _database_locked(exc):
        from scrapeflow.db import _engine

        return _print(
            f"the database stayed locked for {_engine.SQLITE_BUSY_TIMEOUT_MS / 1000:g} s: "
            "another process holds its write lock (a stopped or hung scrapeflow?); "
            "what finished is saved, run this again once that process goes on or ends",
            EXIT_UNEXPECTED,
        )
    # A bug or the machine: one line, its own code, not a traceback.
    cause: BaseException = _driver_error(exc) or exc
    return _print(
        f"unexpected {type(cause).__name__}: {redact(str(cause))} "
        "(what finished is saved; --log-level DEBUG tells more)",
        EXIT_UNEXPECTED,
    )


def _driver_error(exc: BaseException) -> BaseException | None:
    """The database driver's own error under SQLAlchemy's, whose text adds the statement and
    its parameters (a customer's login, say): those stay out of the message."""
    from sqlalchemy.exc import DBAPIError

    return exc.orig if isinstance(exc, DBAPIError) else None


def _database_locked(exc: BaseException) -> bool:
    """SQLite's busy timeout ran out: another process held the write lock all along."""
    return "database is locked" in str(_driver_error(exc) or "")


def _print(message: str, code: int) -> int:
    from rich.text import Text

    from scrapeflow.cli._common import err

    err.print(Text.assemble(("error: ", "bold red"), message), highlight=False, soft_wrap=True)
    return code


def _raise_open_files_limit() -> None:
    """Let --parallelism go past the default 1,024 open files: lift the soft limit to the hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
