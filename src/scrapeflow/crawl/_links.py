"""Which links a crawl follows: strategies, include and exclude patterns, allowed domains.

Strategies compare a link with the page it was found on (Crawlee's names):

* ``same-hostname`` (the default): the same host name, not its subdomains;
* ``same-domain``: the same registrable domain (``docs.example.co.uk`` and
  ``www.example.co.uk``), by the Public Suffix List; an IP address only itself;
* ``same-origin``: the same scheme, host and port;
* ``all``: any http(s) link.

Patterns are globs over the whole URL (``**`` any characters, ``*`` any but ``/``, ``?`` one)
or compiled regular expressions (searched). A link must match an include pattern when any is
given, and no exclude pattern.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from scrapeflow.errors import ConfigError

__all__ = ["STRATEGIES", "LinkFilter", "Pattern", "Strategy", "compile_patterns", "domain_allowed"]

Strategy = Literal["same-hostname", "same-domain", "same-origin", "all"]
STRATEGIES: tuple[str, ...] = ("same-hostname", "same-domain", "same-origin", "all")
Pattern = str | re.Pattern[str]
_SKIPPED_SCHEMES = ("javascript:", "mailto:", "tel:", "data:", "ftp:", "file:", "about:")


def compile_patterns(patterns: Iterable[Pattern] | None) -> tuple[re.Pattern[str], ...]:
    """Globs and regular expressions as compiled expressions (globs anchored at both ends).

    >>> [p.pattern for p in compile_patterns(["http://a.test/**/*.html"])]
    ['^http://a\\\\.test/.*/[^/]*\\\\.html$']
    """
    compiled = []
    for pattern in patterns or ():
        if isinstance(pattern, re.Pattern):
            compiled.append(pattern)
        elif isinstance(pattern, str) and pattern:
            compiled.append(re.compile(_glob_regex(pattern)))
        else:
            raise ConfigError(f"a link pattern is a glob or a compiled regex, got {pattern!r}")
    return tuple(compiled)


def _glob_regex(glob: str) -> str:
    out, i = ["^"], 0
    while i < len(glob):
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append(".")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    out.append("$")
    return "".join(out)


@functools.lru_cache(maxsize=1)
def _suffixes() -> object:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


@functools.lru_cache(maxsize=4096)
def registrable_domain(host: str) -> str:
    """The domain a site registered: ``a.b.example.co.uk`` → ``example.co.uk``; an IP address
    or a public suffix alone is itself."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return host
    domain = _suffixes().privatesuffix(host)  # type: ignore[attr-defined]
    return domain if isinstance(domain, str) else host


def domain_allowed(host: str, allowed: Sequence[str]) -> bool:
    """Whether ``host`` is one of ``allowed`` or a subdomain of one (Scrapy's rule)."""
    return any(host == d or host.endswith("." + d) for d in allowed)


@dataclass(frozen=True, slots=True)
class LinkFilter:
    """One ``enqueue_links`` call's rules, applied to absolute URLs found on ``base``."""

    strategy: Strategy = "same-hostname"
    include: tuple[re.Pattern[str], ...] = ()
    exclude: tuple[re.Pattern[str], ...] = ()

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"unknown link strategy {self.strategy!r}: one of {', '.join(STRATEGIES)}"
            )

    def keeps(self, url: str, base: str) -> bool:
        """Whether the link ``url`` (absolute) found on page ``base`` is followed."""
        if self.strategy != "all" and not _same(self.strategy, url, base):
            return False
        if self.include and not any(p.search(url) for p in self.include):
            return False
        return not any(p.search(url) for p in self.exclude)


def _same(strategy: str, url: str, base: str) -> bool:
    link, page = urlsplit(url), urlsplit(base)
    if strategy == "same-hostname":
        return link.hostname == page.hostname
    if strategy == "same-origin":
        return (link.scheme, link.hostname, _port(link)) == (
            page.scheme,
            page.hostname,
            _port(page),
        )
    if link.hostname is None or page.hostname is None:
        return False
    return registrable_domain(link.hostname) == registrable_domain(page.hostname)


def _port(parts: object) -> int | None:
    try:
        port = parts.port  # type: ignore[attr-defined]
    except ValueError:
        return None
    if port is None:
        return 443 if parts.scheme == "https" else 80  # type: ignore[attr-defined]
    return int(port)


def followable(href: str) -> bool:
    """Whether an ``href`` can lead to a page (not ``javascript:``, ``mailto:``, a bare
    fragment…)."""
    lowered = href[:11].lower()
    return bool(href) and not href.startswith("#") and not lowered.startswith(_SKIPPED_SCHEMES)
