"""The HTTP layer's modules import each other without a circle (type-only imports counted):
each can be read, and tested, on top of the ones below it."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import scrapeflow.http

PACKAGE = Path(scrapeflow.http.__file__).parent


def imports_of(module: Path) -> set[str]:
    """The package's modules ``module`` imports, at run time or for type checking."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("scrapeflow.http."):
            found.add(node.module.removeprefix("scrapeflow.http."))  # type: ignore[union-attr]
    return found


def test_the_http_modules_import_each_other_without_a_circle() -> None:
    graph = {
        path.stem: imports_of(path) for path in PACKAGE.glob("_*.py") if path.stem != "__init__"
    }
    assert {"_client", "_attempt", "_session", "_proxypool"} <= set(graph)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise AssertionError(f"an import circle: {' -> '.join(cycle.args[1])}") from None
    assert order.index("_proxypool") < order.index("_session") < order.index("_client")
    assert order.index("_session") < order.index("_attempt") < order.index("_client")
