"""All sandbox sites together, each on its own loopback host:port, sharing one clock and seed.

>>> from scrapeflow.sandbox import Sandbox, SandboxConfig
>>> async with Sandbox(SandboxConfig(seed=7, hostility="realistic")) as sandbox:  # doctest: +SKIP
...     sandbox.urls["feed"], sandbox.urls["formbank"]
...     sandbox.clock.advance(timedelta(days=1))

``hostility`` shapes the feed (the Aerocene adversary) with the profile's switches, and the
banks with the matching bank behaviour below; every switch can be changed afterwards through the
admin API (``/__admin/hostility``, ``/__admin/settings``)::

    profile    banks' guard                       legacy bank               the other banks
    none       none                               -                         -
    realistic  none                               1% maintenance; session   -
                                                  ends after 300 requests
    hostile    10 req/s per IP (burst 20), ban    3% maintenance; session   1% maintenance
               after 20 ignored 429s for 120 s    ends after 100 requests
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from scrapeflow.sandbox._clock import SandboxClock
from scrapeflow.sandbox._feed import FeedSite
from scrapeflow.sandbox._hostility import Hostility
from scrapeflow.sandbox._plainsite import PlainSite, SiteConfig
from scrapeflow.sandbox._server import check_host, run_in_thread, serve
from scrapeflow.sandbox._site import SandboxSite, SandboxState
from scrapeflow.sandbox.banks import ApiBank, BankSettings, FormBank, LegacyBank, NeoBank

__all__ = ["Sandbox", "SandboxConfig"]

LatencyRange = tuple[float, float]

_BANK_GUARDS = {
    "none": Hostility(),
    "realistic": Hostility(),
    "hostile": Hostility(rate_limit_rps=10, rate_limit_burst=20, ban_after=20, ban_seconds=120),
}
_LEGACY_SETTINGS = {
    "none": BankSettings(),
    "realistic": BankSettings(maintenance_rate=0.01, session_max_requests=300),
    "hostile": BankSettings(maintenance_rate=0.03, session_max_requests=100),
}
_OTHER_BANK_SETTINGS = {
    "none": BankSettings(),
    "realistic": BankSettings(),
    "hostile": BankSettings(maintenance_rate=0.01),
}


@dataclass(frozen=True)
class SandboxConfig:
    """How to run a sandbox. ``latency_ms=None`` keeps each site's realistic default
    (banks 80-250 ms, feed 20-80 ms, plain site none); a range applies to every site.

    ``host`` must be a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``) unless
    ``allow_remote=True``: the admin API hands out every customer's password. Otherwise the
    config is refused with ``ValueError``.
    """

    host: str = "127.0.0.1"
    seed: int = 0
    hostility: str = "realistic"
    switches: dict[str, Any] = field(default_factory=dict)
    latency_ms: LatencyRange | None = None
    admin_token: str | None = None
    customers: int = 10_000
    feed_profiles: int = 1000
    plain_pages: int = 1000
    allow_remote: bool = False

    def __post_init__(self) -> None:
        check_host(self.host, allow_remote=self.allow_remote)

    def feed_hostility(self) -> Hostility:
        return Hostility.profile(self.hostility).with_switches(self.switches)


class Sandbox:
    """Start with ``async with Sandbox(config) as sandbox``; ``sandbox.urls`` names each site."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config = config or SandboxConfig()
        feed_hostility = config.feed_hostility()  # validates the profile and switches early
        self.admin_token = config.admin_token or secrets.token_urlsafe(18)
        self.state = SandboxState(
            seed=config.seed, admin_token=self.admin_token, customers=config.customers
        )
        latency = config.latency_ms
        profile = config.hostility
        bank_latency = latency if latency is not None else (80.0, 250.0)
        self.plain = PlainSite(
            SiteConfig(pages=config.plain_pages, seed=config.seed, latency_ms=latency or (0, 0))
        )
        self.sites: dict[str, SandboxSite] = {
            "feed": FeedSite(
                self.state,
                hostility=feed_hostility,
                latency_ms=latency if latency is not None else (20.0, 80.0),
                profiles=config.feed_profiles,
            ),
            "formbank": FormBank(
                self.state,
                hostility=_BANK_GUARDS[profile],
                latency_ms=bank_latency,
                settings=dataclasses.replace(_OTHER_BANK_SETTINGS[profile]),
            ),
            "apibank": ApiBank(
                self.state,
                hostility=_BANK_GUARDS[profile],
                latency_ms=bank_latency,
                settings=dataclasses.replace(_OTHER_BANK_SETTINGS[profile]),
            ),
            "legacybank": LegacyBank(
                self.state,
                hostility=_BANK_GUARDS[profile],
                latency_ms=bank_latency,
                settings=dataclasses.replace(_LEGACY_SETTINGS[profile]),
            ),
            "neobank": NeoBank(
                self.state,
                hostility=_BANK_GUARDS[profile],
                latency_ms=bank_latency,
                settings=dataclasses.replace(_OTHER_BANK_SETTINGS[profile]),
            ),
        }
        self.urls: dict[str, str] = {}
        self._stack = contextlib.AsyncExitStack()

    @property
    def clock(self) -> SandboxClock:
        return self.state.clock

    async def __aenter__(self) -> Sandbox:
        host = self.config.host
        try:
            self.urls["plain"] = await self._stack.enter_async_context(
                serve(self.plain.app(), host=host, allow_remote=self.config.allow_remote)
            )
            for name, site in self.sites.items():
                self.urls[name] = await self._stack.enter_async_context(
                    serve(site.app(), host=host, allow_remote=self.config.allow_remote)
                )
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    def manifest(self) -> dict[str, Any]:
        """What a client needs: every site's base URL, the admin token, seed and hostility."""
        return {
            "sites": dict(self.urls),
            "admin_token": self.admin_token,
            "seed": self.config.seed,
            "hostility": self.config.hostility,
            "switches": self.config.feed_hostility().as_dict(),
            "clock": self.clock.now().isoformat(),
            "customers": self.config.customers,
        }

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls, config: SandboxConfig | None = None) -> Iterator[Sandbox]:
        """Run a sandbox from a daemon thread with its own loop (for sync code and tests)."""
        with run_in_thread(lambda: cls(config)) as sandbox:
            yield sandbox
