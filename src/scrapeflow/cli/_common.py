"""What every command shares: exit codes, the one-line error, the settings, running a coroutine.

Imports here stay light (typer, rich): ``scrapeflow --help`` must not pay for SQLAlchemy, aiohttp
or pydantic. A command imports what it uses inside its own body.
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_UNEXPECTED",
    "HELP_OPTION",
    "RootOptions",
    "ask",
    "err",
    "fail",
    "input_errors",
    "out",
    "password_from_stdin",
    "remember_options",
    "run_async",
    "settings",
]

T = TypeVar("T")

HELP_OPTION: dict[str, Any] = {"help_option_names": ["--help", "-h"]}
"""The context settings of every command and group below the root (see ``_main``)."""

EXIT_FAILED = 1
"""Some tasks, URLs or accesses failed (recorded where they belong)."""
EXIT_BAD_INPUT = 2
"""Bad input or configuration: nothing stored was touched."""
EXIT_UNEXPECTED = 3
"""A bug or the machine: what finished is saved."""
EXIT_INTERRUPTED = 130
"""Ctrl-C or SIGTERM: run the same command to resume."""

out = Console()
err = Console(stderr=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line error on stderr and exit with ``code``."""
    # Text, not markup: file names and messages may hold "[...]".
    err.print(Text.assemble(("error: ", "bold red"), message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def password_from_stdin() -> str:
    """The first line of standard input, as UTF-8 (strict), read no further than a password
    may go."""
    from scrapeflow.banking import MAX_PASSWORD

    most = 4 * MAX_PASSWORD  # bytes: UTF-8 takes at most 4 a character
    line = sys.stdin.buffer.readline(most + 2).rstrip(b"\r\n")
    if len(line) > most:
        fail(f"the password on standard input is longer than {MAX_PASSWORD} characters")
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        fail("the password on standard input is not valid UTF-8 text")


def ask(question: str, *, what: str, hide: bool = False) -> str:
    """The answer typed at a prompt; standard input at its end (a pipe, /dev/null) is bad
    input naming what was missing, not an interruption."""
    try:
        answer: str = typer.prompt(question, hide_input=hide)
    except typer.Abort:
        if not sys.stdin.isatty() and not sys.stdin.read(1):
            typer.echo("", err=hide)  # end the prompt's line (getpass writes it on stderr)
            fail(f"no {what} given: standard input ended (pipe it with --{what}-stdin)")
        raise
    return answer


@contextmanager
def input_errors() -> Iterator[None]:
    """Turn a :class:`~scrapeflow.errors.ScrapeflowError` raised inside into a one-line exit 2."""
    from scrapeflow.errors import ScrapeflowError

    try:
        yield
    except ScrapeflowError as exc:
        fail(str(exc))


class RootOptions:
    """Flags given before the command (``scrapeflow --config F bank …``), for :func:`settings`."""

    def __init__(self, config: Path | None, flags: dict[str, Any]) -> None:
        self.config = config
        self.flags = flags


def remember_options(ctx: typer.Context, config: Path | None, **flags: Any) -> None:
    """Keep a group's flags on the context; :func:`settings` merges every group's."""
    parent = ctx.find_object(RootOptions)
    merged = {**(parent.flags if parent else {}), **flags}
    ctx.obj = RootOptions(config or (parent.config if parent else None), merged)


def settings(
    ctx: typer.Context, *, flag_names: dict[str, str] | None = None, **flags: Any
) -> Settings:
    """The process's :class:`~scrapeflow.config.Settings`: this command's flags over its groups'
    flags over ``SCRAPEFLOW_*`` over the config file over the defaults. Bad values exit 2."""
    from scrapeflow._util.logs import configure_logging
    from scrapeflow.config import Settings

    options = ctx.find_object(RootOptions)
    given = {**(options.flags if options else {}), **flags}
    with input_errors():
        loaded = Settings.load(
            config=options.config if options else None,
            flags=given,
            flag_names={
                "db_url": "--db",
                "bank_urls": "--bank-url",
                "sandbox_manifest": "--sandbox",
                **(flag_names or {}),
            },
        )
    configure_logging(loaded.log_level.value, json=loaded.log_json)
    return loaded


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` where SIGTERM, like Ctrl-C, cancels the work and raises KeyboardInterrupt.

    Cancellation unwinds the engine, which has saved every finished task by then.
    """
    import asyncio
    import signal

    async def guarded() -> T:
        task = asyncio.current_task()
        if task is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await coro

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
