"""A :class:`Launcher` built from the process's :class:`~scrapeflow.config.Settings`: the banks'
URLs (settings, then a sandbox manifest), limits, the incremental window, the vault, the log
directory, the HTTP settings and the proxy list (``proxies``: the exit IPs the banks see, with
the per-IP slots of ``per_host``); with a sandbox manifest, the sandbox's clock is "today".
The CLI and the service build their launchers here, so both read the same settings the same
way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from scrapeflow.banking._events import EventSink
from scrapeflow.banking._launcher import Launcher
from scrapeflow.banking._registry import scrapers
from scrapeflow.banking._reports import LaunchLimits
from scrapeflow.banking._scraper import IncrementalPolicy
from scrapeflow.banking._vault import CredentialVault

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = ["bank_sites", "launcher_from_settings"]

_BANK_CONNECTIONS = 400
"""Requests in flight to all banks at once (what a launcher's ``overall`` accesses need)."""


def launcher_from_settings(settings: Settings, *, on_event: EventSink | None = None) -> Launcher:
    """A launcher on ``settings`` (not entered yet). Raises a ConfigError naming what is wrong
    (a bad manifest, no vault key) before anything is claimed."""
    from scrapeflow.http import HttpConfig
    from scrapeflow.proxies import ProxyProviderFromList

    bank_urls, today = _sandbox_sites(settings)
    proxies = settings.proxies
    return Launcher(
        settings.db_url,
        vault=CredentialVault.from_settings(settings),
        bank_urls={**bank_urls, **settings.bank_urls},
        limits=LaunchLimits(
            per_bank=settings.per_bank,
            overall=settings.overall,
            access_timeout=settings.access_timeout,
            heartbeat=settings.heartbeat,
        ),
        policy=IncrementalPolicy(
            initial_days=settings.initial_days, overlap_days=settings.overlap_days
        ),
        today=today,
        log_dir=settings.log_dir,
        on_event=on_event,
        http_config=HttpConfig.from_settings(settings, max_connections=_BANK_CONNECTIONS),
        proxy_provider=ProxyProviderFromList.from_file(proxies) if proxies else None,
    )


def bank_sites(settings: Settings) -> tuple[dict[str, str], Callable[[], Awaitable[date]]]:
    """The banks' URLs (the settings' over a sandbox manifest's) and the day it is for them
    (the sandbox's clock with a manifest, else today in UTC)."""
    urls, clock = _sandbox_sites(settings)

    async def utc_today() -> date:
        return datetime.now(UTC).date()

    return {**urls, **settings.bank_urls}, clock or utc_today


def _sandbox_sites(
    settings: Settings,
) -> tuple[dict[str, str], Callable[[], Awaitable[date]] | None]:
    """The banks of the sandbox manifest and the sandbox's clock (its 'today')."""
    manifest = settings.sandbox_manifest
    if manifest is None:
        return {}, None
    from scrapeflow.sandbox import SandboxAdmin

    admin = SandboxAdmin.from_manifest_file(manifest)  # refused here when the manifest is bad
    banks = {name: url for name, url in admin.sites.items() if name in scrapers()}

    async def sandbox_today() -> date:
        async with SandboxAdmin.from_manifest_file(manifest) as client:
            return (await client.now()).date()

    return banks, sandbox_today
