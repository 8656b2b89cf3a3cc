"""The sandbox: sites on loopback to scrape, test and benchmark against, knowing nothing of us.

* the plain site (:class:`PlainSite`): deterministic linked pages and a sitemap;
* the feed (``FeedSite``): the Aerocene adversary — cursor pagination, a signature header,
  per-IP rate limits and bans, errors, CAPTCHAs, header checks;
* three banks (``scrapeflow.sandbox.banks``) with ground truth behind an admin token.

Start them all with :class:`Sandbox` (``scrapeflow sandbox`` on the command line), or one::

    >>> from scrapeflow.sandbox import PlainSite, SiteConfig, serve
    >>> site = PlainSite(SiteConfig(pages=500))
    >>> async with serve(site.app()) as base_url:  # doctest: +SKIP
    ...     ...  # scrape f"{base_url}/page/0" ... f"{base_url}/page/499"

Drive a running sandbox's admin API (clock, ground truth, defences) with :class:`SandboxAdmin`::

    >>> async with SandboxAdmin.from_sandbox(sandbox) as admin:  # doctest: +SKIP
    ...     await admin.advance(timedelta(days=1))

See docs/sandbox.md for every site, switch and admin route.
"""

from scrapeflow.sandbox._admin import (
    AccountTruth,
    BankTruth,
    CustomerLogin,
    FeedProfile,
    MovementTruth,
    SandboxAdmin,
)
from scrapeflow.sandbox._clock import DEFAULT_EPOCH, SandboxClock
from scrapeflow.sandbox._feed import FeedSite
from scrapeflow.sandbox._guards import CAPTCHA_MARKER, header_problem
from scrapeflow.sandbox._hostility import PROFILES, Hostility
from scrapeflow.sandbox._plainsite import SITEMAP_CHUNK, PlainSite, SiteConfig
from scrapeflow.sandbox._sandbox import Sandbox, SandboxConfig
from scrapeflow.sandbox._server import run_in_thread, serve, serve_in_thread
from scrapeflow.sandbox._site import SandboxState

__all__ = [
    "CAPTCHA_MARKER",
    "DEFAULT_EPOCH",
    "PROFILES",
    "SITEMAP_CHUNK",
    "AccountTruth",
    "BankTruth",
    "CustomerLogin",
    "FeedProfile",
    "FeedSite",
    "Hostility",
    "MovementTruth",
    "PlainSite",
    "Sandbox",
    "SandboxAdmin",
    "SandboxClock",
    "SandboxConfig",
    "SandboxState",
    "SiteConfig",
    "header_problem",
    "run_in_thread",
    "serve",
    "serve_in_thread",
]
