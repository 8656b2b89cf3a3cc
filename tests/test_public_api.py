"""Every public module lists exactly its public names in __all__ (the façade is deliberate).

Both ways: every name in ``__all__`` exists, and every public name a module offers is in
``__all__``: a class, function or UPPER_CASE constant defined in the module, and, for a package
(a façade), everything it takes from its own private ``_x`` modules. What a plain module imports
from elsewhere to do its work is its business, not its API.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType
from typing import ParamSpec, TypeVar, TypeVarTuple

import pytest

import scrapeflow

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(scrapeflow.__path__, prefix="scrapeflow.")
    if not any(part.startswith("_") for part in m.name.split(".")[1:])
)

_CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")
_TYPE_VARIABLES = (TypeVar, ParamSpec, TypeVarTuple)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run at import: the body, and blocks under if/try/with in it."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With | ast.AsyncWith):
            yield from _module_level(node.body)
            yield from _module_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try | ast.TryStar):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)


def _import_sources(module: ModuleType) -> dict[str, str]:
    """The names ``module`` binds by an import, each with the module it comes from."""
    package = module.__name__ if hasattr(module, "__path__") else module.__package__ or ""
    sources: dict[str, str] = {}
    for node in _module_level(ast.parse(inspect.getsource(module)).body):
        if isinstance(node, ast.Import):
            sources |= {a.asname or a.name.split(".")[0]: a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(part for part in (base, node.module or "") if part)
            sources |= {a.asname or a.name: source for a in node.names}
    return sources


def _offered(module: ModuleType, origin: str | None) -> bool:
    """Whether a name from ``origin`` is part of what ``module`` offers: defined there, or, in a
    package, taken from one of its own private modules."""
    if origin == module.__name__:
        return True
    return hasattr(module, "__path__") and (origin or "").startswith(f"{module.__name__}._")


def _exposed(module: ModuleType) -> dict[str, str]:
    """The public names ``module`` offers, each with where it comes from."""
    sources = _import_sources(module)
    found: dict[str, str] = {}
    for attr, value in vars(module).items():
        if attr.startswith("_") or inspect.ismodule(value):
            continue
        if inspect.isclass(value) or inspect.isroutine(value):
            origin = getattr(value, "__module__", None)
            if _offered(module, origin):
                found[attr] = str(origin)
        elif _CONSTANT.fullmatch(attr) and not isinstance(value, _TYPE_VARIABLES):
            origin = sources.get(attr, module.__name__)  # not imported: bound here
            if _offered(module, origin):
                found[attr] = origin
    return found


def _exported(module: ModuleType) -> set[str]:
    exported = getattr(module, "__all__", None)
    assert exported, f"{module.__name__} has no __all__"
    return set(exported)


@pytest.mark.parametrize("name", ["scrapeflow", *MODULES])
def test_every_name_in_all_exists(name: str) -> None:
    module = importlib.import_module(name)
    missing = sorted(attr for attr in _exported(module) if not hasattr(module, attr))
    assert not missing, f"{name}.__all__ names {missing}, which do not exist"


@pytest.mark.parametrize("name", ["scrapeflow", *MODULES])
def test_all_lists_every_public_name_the_module_exposes(name: str) -> None:
    module = importlib.import_module(name)
    unlisted = {
        attr: origin for attr, origin in _exposed(module).items() if attr not in _exported(module)
    }
    assert not unlisted, (
        f"{name} offers public names missing from __all__ (list them, or make them private): "
        + ", ".join(f"{attr} ({origin})" for attr, origin in sorted(unlisted.items()))
    )


def test_the_check_finds_reexports_and_constants_and_skips_foreign_names() -> None:
    from scrapeflow import http

    exposed = _exposed(http)
    assert exposed["HttpClient"] == "scrapeflow.http._client"  # re-exported from a private module
    assert exposed["IDENTITIES"] == "scrapeflow.http._identity"
    js = importlib.import_module("scrapeflow.js")
    assert "MiniRacer" not in _exposed(js)  # a third-party class
    assert _exposed(js)["BROWSER_SHIM"] == "scrapeflow.js"  # a constant defined there
    executor = importlib.import_module("scrapeflow.executor")
    assert "HttpClient" not in _exposed(executor)  # used by a plain module, not offered


def test_seed_import_paths() -> None:
    from scrapeflow.executor import Context, execute_async, taskify  # noqa: F401
    from scrapeflow.proxies import (  # noqa: F401
        ProxyProvider,
        ProxyProviderFromDict,
        ProxyProviderFromIPRoyal,
        ProxyProviderFromList,
        ProxyProviderFromProxyscrape,
        ProxyProviderFromWebshare,
    )
    from scrapeflow.scrape import scrape, scrape_with_validation  # noqa: F401
    from scrapeflow.status import StatusData, read_status, status_summary  # noqa: F401
    from scrapeflow.statusdata import StatusData as SD  # noqa: F401
