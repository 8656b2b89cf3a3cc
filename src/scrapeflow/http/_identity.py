"""Coherent browser identities: a User-Agent and the headers that browser really sends with it.

Sites check coherence (a Chrome User-Agent without matching client hints, or a Firefox one
with them, is a bot). An identity is chosen per session, not per request: a real visitor does
not change browser between two clicks.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["IDENTITIES", "Identity", "pick_identity"]

_CHROME_ACCEPT = (
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
    "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
)


@dataclass(frozen=True, slots=True)
class Identity:
    """A browser as a site sees it: ``name`` for stats, ``headers`` to send on every request."""

    name: str
    headers: Mapping[str, str]


def _chrome(version: int, platform: str, os_token: str) -> Identity:
    return Identity(
        name=f"chrome-{version}-{platform.strip(chr(34)).lower()}",
        headers=MappingProxyType(
            {
                "User-Agent": f"Mozilla/5.0 ({os_token}) AppleWebKit/537.36 (KHTML, like Gecko) "
                f"Chrome/{version}.0.0.0 Safari/537.36",
                "Accept": _CHROME_ACCEPT,
                "Accept-Language": "es-ES,es;q=0.9,en;q=0.8",
                "sec-ch-ua": f'"Google Chrome";v="{version}", "Chromium";v="{version}", '
                '"Not_A Brand";v="24"',
                "sec-ch-ua-mobile": "?0",
                "sec-ch-ua-platform": platform,
                "Upgrade-Insecure-Requests": "1",
            }
        ),
    )


def _firefox(version: int, os_token: str, platform: str) -> Identity:
    return Identity(
        name=f"firefox-{version}-{platform}",
        headers=MappingProxyType(
            {
                "User-Agent": f"Mozilla/5.0 ({os_token}; rv:{version}.0) Gecko/20100101 "
                f"Firefox/{version}.0",
                "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
                "Accept-Language": "es-ES,es;q=0.8,en-US;q=0.5,en;q=0.3",
                "Upgrade-Insecure-Requests": "1",
            }
        ),
    )


_SAFARI = Identity(
    name="safari-18-macos",
    headers=MappingProxyType(
        {
            "User-Agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 "
            "(KHTML, like Gecko) Version/18.1 Safari/605.1.15",
            "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "Accept-Language": "es-ES,es;q=0.9",
        }
    ),
)

IDENTITIES: tuple[Identity, ...] = (
    _chrome(131, '"Windows"', "Windows NT 10.0; Win64; x64"),
    _chrome(130, '"Windows"', "Windows NT 10.0; Win64; x64"),
    _chrome(131, '"macOS"', "Macintosh; Intel Mac OS X 10_15_7"),
    _chrome(129, '"Linux"', "X11; Linux x86_64"),
    _firefox(133, "Windows NT 10.0; Win64; x64", "windows"),
    _firefox(132, "X11; Linux x86_64", "linux"),
    _SAFARI,
)
"""Header sets of current desktop browsers, as they send them for a page load."""


def pick_identity(rng: random.Random, *, avoid: Identity | None = None) -> Identity:
    """A random identity, other than ``avoid`` (a retired session's) when there is a choice."""
    choices = [i for i in IDENTITIES if i is not avoid] or list(IDENTITIES)
    return rng.choice(choices)
