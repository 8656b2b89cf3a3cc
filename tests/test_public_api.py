"""Every public module lists exactly its public names in __all__ (the façade is deliberate)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import scrapeflow

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(scrapeflow.__path__, prefix="scrapeflow.")
    if not any(part.startswith("_") for part in m.name.split(".")[1:])
)


@pytest.mark.parametrize("name", ["scrapeflow", *MODULES])
def test_all_lists_the_public_names_defined_here(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(getattr(module, "__all__", []))
    assert exported, f"{name} has no __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names {attr}, which does not exist"
    defined_here = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", None) == name
    }
    assert defined_here <= exported, (
        f"{name} defines public {defined_here - exported} not in __all__"
    )


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
