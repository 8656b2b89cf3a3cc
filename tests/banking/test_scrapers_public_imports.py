"""The shipped scrapers are what users copy to write their own: they use public names only.

Each ``scrapeflow/banking/scrapers/*.py`` is parsed (not imported): any import of a scrapeflow
module with a private part (``scrapeflow.banking._models``, ``scrapeflow._util``), of a private
name, or of a name its module does not list in ``__all__`` fails, naming the file and line.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

_PACKAGE = "scrapeflow.banking.scrapers"
# The module, not the attribute: ``scrapeflow.banking.scrapers`` is the registry function.
SCRAPERS = sorted(
    path
    for path in Path(str(importlib.import_module(_PACKAGE).__file__)).parent.glob("*.py")
    if path.name != "__init__.py"
)


def _scrapeflow_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None for ``import module``) of every scrapeflow import."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend(
                (node.lineno, alias.name, None)
                for alias in node.names
                if alias.name.split(".")[0] == "scrapeflow"
            )
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolved inside the scrapers' package
                base = _PACKAGE.rsplit(".", node.level - 1)[0] if node.level > 1 else _PACKAGE
                module = f"{base}.{module}" if module else base
            if module.split(".")[0] == "scrapeflow":
                found.extend((node.lineno, module, alias.name) for alias in node.names)
    return found


def test_every_shipped_scraper_is_checked() -> None:
    assert {p.stem for p in SCRAPERS} >= {"apibank", "formbank", "legacybank"}


@pytest.mark.parametrize("path", SCRAPERS, ids=lambda p: p.stem)
def test_a_shipped_scraper_imports_only_public_names(path: Path) -> None:
    imports = _scrapeflow_imports(path)
    assert imports, f"{path.name} imports nothing from scrapeflow: is this still a scraper?"
    private = [
        f"{path.name}:{line}: {module}" + (f" import {name}" if name else "")
        for line, module, name in imports
        if any(part.startswith("_") for part in module.split("."))
        or (name is not None and name.startswith("_"))
    ]
    assert not private, "private imports:\n" + "\n".join(private)
    unlisted = [
        f"{path.name}:{line}: {module} import {name}"
        for line, module, name in imports
        if name is not None
        and name != "*"
        and name not in getattr(importlib.import_module(module), "__all__", ())
        # a submodule (``from scrapeflow import banking``) is public by its own name
        and importlib.util.find_spec(f"{module}.{name}") is None
    ]
    assert not unlisted, "names missing from their module's __all__:\n" + "\n".join(unlisted)
