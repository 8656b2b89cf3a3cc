"""``scrapeflow bank new NAME``: a package of its own for a new bank's scraper.

The package (``scrapeflow-bank-NAME/``) holds the scraper module, its test, a recorded session
with its golden file, a ``pyproject.toml`` registering the entry point and a README. It
installs with ``pip install -e`` and its test passes at once: the scraper it starts from reads
one of the sandbox's banks (``--kind api``: the API bank; ``html``: the legacy bank's pages),
and the recording is a session at that bank. The author changes it for their bank from there
(docs/writing-a-bank.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from string import Template

from scrapeflow.banking._registry import scrapers
from scrapeflow.errors import InputError

__all__ = ["BANK_KINDS", "new_bank"]

BANK_KINDS = {"html": "legacybank", "api": "apibank"}
"""The kinds of starting point, and the sandbox bank each one reads."""
_NAME = re.compile(r"[a-z][a-z0-9_]{1,39}")


def new_bank(
    name: str, *, kind: str = "html", directory: str | os.PathLike[str] | None = None
) -> Path:
    """Make the package of bank ``name`` in ``directory`` (default:
    ``./scrapeflow-bank-NAME``), which must not exist or be empty; the directory made.
    :class:`~scrapeflow.errors.InputError` names what is wrong (the name, the kind, the
    directory, a bank of that name installed already)."""
    if not _NAME.fullmatch(name):
        raise InputError(
            f"bank name {name!r}: 2-40 characters, lower-case letters, digits and '_', "
            "starting with a letter (it is the bank's code and a Python package's name)"
        )
    if kind not in BANK_KINDS:
        raise InputError(f"--kind {kind!r}: one of {', '.join(BANK_KINDS)}")
    if name in scrapers():
        raise InputError(f"a bank called {name!r} is installed already: choose another name")
    target = Path(directory) if directory is not None else Path(f"scrapeflow-bank-{name}")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(f"{target}: exists and is not an empty directory")
    package = f"scrapeflow_bank_{name}"
    words = {
        "name": name,
        "package": package,
        "cls": "".join(part.capitalize() for part in name.split("_")) + "Scraper",
        "title": name.replace("_", " ").title(),
        "sandbox_bank": "API bank" if kind == "api" else "legacy bank",
    }
    files = {
        "pyproject.toml": _filled("common/pyproject.toml.tmpl", words),
        "README.md": _filled("common/README.md.tmpl", words),
        f"src/{package}/__init__.py": _filled("common/init.py.tmpl", words),
        f"src/{package}/scraper.py": _filled(f"{kind}/scraper.py.tmpl", words),
        f"tests/test_{name}.py": _filled("common/test.py.tmpl", words),
        "tests/recordings/session.har": _renamed(f"{kind}/session.har", name, "log"),
        "tests/recordings/session.json": _renamed(f"{kind}/session.json", name, None),
    }
    # Made aside, then moved in place: a failure leaves no half package.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if target.exists():
            target.rmdir()  # empty (checked above)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _template(relative: str) -> str:
    return resources.files("scrapeflow.banking").joinpath("template", relative).read_text("utf-8")


def _filled(relative: str, words: dict[str, str]) -> str:
    return Template(_template(relative)).substitute(words)


def _renamed(relative: str, name: str, inside: str | None) -> str:
    """A recording or golden file of the template, its bank called ``name``."""
    document = json.loads(_template(relative))
    holder = document[inside]["_scrapeflow"] if inside else document
    holder["bank"] = name
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"
