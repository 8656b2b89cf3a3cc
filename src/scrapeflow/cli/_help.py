"""Help in words: the click commands typer builds, rewritten once before they run.

typer labels values with Python types (``<int>``, ``<list[str]>``), shows a descriptive
default as ``[default: (100)]`` and cuts each command's summary at about 45 characters. Here
every value gets a plain placeholder (``N``, ``SECONDS``, ``FILE``…), a default reads
``[default: 100]``, a command's summary is its whole first sentence and reStructuredText's
double backticks are dropped from every text.
"""

from __future__ import annotations

import re
from typing import Any

from typer import _click as click  # typer's own copy of click, whose commands it builds

__all__ = ["plain_help"]

_PLACEHOLDERS = {
    "int": "N",
    "float": "NUMBER",
    "str": "TEXT",
    "path": "PATH",
    "file": "FILE",
    "directory": "DIR",
    "bool": "BOOLEAN",
}


def plain_help(command: click.Command) -> click.Command:
    """Rewrite ``command`` and every command below it in place; returns it."""
    command.help = _words(command.help)
    command.epilog = _words(command.epilog)
    if command.help and not command.short_help:
        command.short_help = _first_sentence(command.help)
    for param in command.params:
        _plain_param(command, param)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command


def _plain_param(command: click.Command, param: click.Parameter) -> None:
    # typer's parameters are of its own copy of click: told apart by kind, not class.
    if param.param_type_name == "option":
        option: Any = param
        option.help = _words(option.help)
        if isinstance(option.show_default, str):
            shown = option.show_default
            option.show_default = False
            option.help = f"{option.help or ''}  [default: {shown}]".strip()
        if option.metavar is None and not option.is_flag:
            option.metavar = _placeholder(command, param)
    elif param.param_type_name == "argument":
        argument: Any = param
        name = argument.metavar or (argument.name or "value").upper()
        argument.metavar = name
        argument.help = _words(argument.help)
        # typer writes an argument as ``{name}`` in the usage and adds its Python type to its
        # help line; click's convention is NAME when required, [NAME] when not.
        shown = name if argument.required else f"[{name}]"
        if argument.nargs != 1:
            shown += "..."
        argument._usage_display_name = lambda: shown
        argument.display_type_rich = lambda ctx: None


def _placeholder(command: click.Command, param: click.Parameter) -> str:
    display = getattr(param, "display_type", None)
    if display is None:  # not one of typer's: click's own placeholder
        return (param.name or "value").upper()
    label = str(display(click.Context(command))).strip("<>")
    listed = re.fullmatch(r"list\[(.*)\]", label)
    bare = (listed.group(1) if listed else label).removesuffix(" range")
    if "|" in bare:
        return f"[{bare}]"
    return _PLACEHOLDERS.get(bare, (param.name or "value").upper())


def _words(text: str | None) -> str | None:
    return None if text is None else text.replace("``", "")


def _first_sentence(text: str) -> str:
    """The help's first sentence, whole: up to a stop (``.`` or ``;`` before a space or
    the end) outside parentheses."""
    paragraph = text.split("\n\n", 1)[0].replace("\b", "").strip()
    flat = " ".join(paragraph.split())
    depth = 0
    for at, char in enumerate(flat):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char in ".;" and flat[at + 1 : at + 2] in ("", " "):
            return flat[:at]
    return flat
