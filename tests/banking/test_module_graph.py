"""The banking package's private modules import each other without a circle (type-only imports
counted), and none reaches back into the package's façade: the launcher's modules can each be
read, and tested, on top of the ones below it."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import scrapeflow.banking

PACKAGE = Path(scrapeflow.banking.__file__).parent


def imports_of(module: Path) -> set[str]:
    """The package's modules ``module`` imports, at run time or for type checking."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if name == "scrapeflow.banking" or node.level == 1:
                found.add("__init__")
            elif name.startswith("scrapeflow.banking."):
                found.add(name.removeprefix("scrapeflow.banking.").split(".")[0])
    return found


def test_the_banking_modules_import_each_other_without_a_circle() -> None:
    graph = {
        path.stem: imports_of(path) for path in PACKAGE.glob("_*.py") if path.stem != "__init__"
    }
    assert {"_launcher", "_launchclaims", "_launchaccess", "_state"} <= set(graph)
    reaching_back = sorted(stem for stem, imported in graph.items() if "__init__" in imported)
    assert not reaching_back, f"private modules importing the façade: {reaching_back}"
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise AssertionError(f"an import circle: {' -> '.join(cycle.args[1])}") from None
    assert order.index("_state") < order.index("_launchclaims") < order.index("_launchaccess")
    assert order.index("_launchaccess") < order.index("_launcher")
