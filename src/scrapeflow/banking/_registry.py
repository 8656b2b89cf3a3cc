"""Scrapers are found by entry point: a bank is added by installing a package, not by editing
the core.

A package declares its scrapers in its ``pyproject.toml``::

    [project.entry-points."scrapeflow.banks"]
    mybank = "mypackage.mybank:MyBankScraper"

The entry point's name is the bank's code (``FinancialEntity.code``) and must equal the class's
``bank``. :func:`register` adds one at run time (an application's own, a test's).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from scrapeflow._util.logs import get_logger
from scrapeflow.errors import ConfigError, UnknownScraper

if TYPE_CHECKING:
    # At run time imported where a scraper is checked: the scraper API pulls the HTTP client
    # (aiohttp), which commands that only name banks (or none) do not need.
    from scrapeflow.banking._scraper import BasicScraper

__all__ = ["ENTRY_POINT_GROUP", "get_scraper", "register", "scrapers"]

ENTRY_POINT_GROUP = "scrapeflow.banks"
_log = get_logger(__name__)
_registered: dict[str, type[BasicScraper]] = {}
_loaded: dict[str, type[BasicScraper]] | None = None


def _load() -> dict[str, type[BasicScraper]]:
    global _loaded
    if _loaded is None:
        from scrapeflow.banking._scraper import BasicScraper

        found: dict[str, type[BasicScraper]] = {}
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                cls = point.load()
            except Exception as exc:  # one broken plug-in must not hide the others
                _log.warning("scraper entry point failed to load", name=point.name, error=repr(exc))
                continue
            if not (isinstance(cls, type) and issubclass(cls, BasicScraper)):
                _log.warning("entry point is not a BasicScraper", name=point.name)
                continue
            if cls.bank != point.name:
                _log.warning("entry point name differs from its bank", name=point.name)
                continue
            found[point.name] = cls
        _loaded = found
    return _loaded


def scrapers() -> dict[str, type[BasicScraper]]:
    """Every known scraper by bank code: installed entry points, then :func:`register`\\ ed."""
    return dict(sorted({**_load(), **_registered}.items()))


def get_scraper(bank: str) -> type[BasicScraper]:
    """The scraper class of ``bank``; :class:`UnknownScraper` names the known ones."""
    found = scrapers()
    try:
        return found[bank]
    except KeyError:
        known = ", ".join(found) or "none"
        raise UnknownScraper(f"no scraper for bank {bank!r} (known: {known})") from None


def register(cls: type[BasicScraper]) -> type[BasicScraper]:
    """Register ``cls`` under ``cls.bank`` (usable as a class decorator)."""
    from scrapeflow.banking._scraper import BasicScraper

    if not (isinstance(cls, type) and issubclass(cls, BasicScraper)):
        raise ConfigError(f"{cls!r} is not a BasicScraper subclass")
    if not getattr(cls, "bank", ""):
        raise ConfigError(f"{cls.__name__} has no 'bank' code")
    _registered[cls.bank] = cls
    return cls
