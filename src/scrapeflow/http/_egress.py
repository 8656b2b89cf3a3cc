"""The egress policy: the one place that decides which addresses a client-given URL may reach.

The service makes requests on its clients' behalf — webhook deliveries, ``fetch`` jobs, ``run``
jobs' ``scrape`` — and a client must not be able to point them at the service's own network:
loopback, private ranges, link-local (cloud metadata), and so on. :class:`EgressPolicy` judges
an address by its class (:func:`address_class`), and gates every connection three ways:

* at registration (:meth:`EgressPolicy.check_url`): the host is resolved as the system resolves
  it (so ``127.1``, ``0x7f.0.0.1``, ``2130706433`` and ``017700000001`` are all loopback) and
  the URL is refused if **any** address it resolves to is blocked (a name that does not
  resolve yet passes: there is nothing to dial, and the dial is judged again);
* at dial time (:meth:`EgressPolicy.connector`): the connector's resolver refuses a name any of
  whose addresses is blocked, and its socket factory checks the very address it is about to
  connect to (an IP literal skips the resolver; a name is never looked up twice), on every
  redirect hop, so DNS rebinding between the check and the dial gains nothing;
* through an egress proxy (``egress_proxy``, else ``HTTPS_PROXY`` / ``HTTP_PROXY`` minus
  ``NO_PROXY``): the connection goes to the operator's proxy, which enforces its own rules; the
  target is still judged here first, by a lookup of its own.

``egress_allow`` opens what an operator chooses: CIDRs (``10.1.2.0/24``) and host names
(``hooks.internal``; ``.corp.example`` for every name under it). Bank scrapers' URLs are the
operator's configuration, not a client's, and never go through this policy.

>>> policy = EgressPolicy()
>>> policy.blocked_class(ipaddress.ip_address("169.254.169.254"))
'link-local'
>>> policy.blocked_class(ipaddress.ip_address("::ffff:10.0.0.1"))
'private'
>>> policy.blocked_class(ipaddress.ip_address("93.184.216.34")) is None
True
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult

from scrapeflow._util.egress import parse_egress_allow
from scrapeflow._util.redact import redact
from scrapeflow.errors import ConnectionFailed, EgressBlocked, InputError

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = [
    "EgressPolicy",
    "address_class",
    "egress_refusal",
    "judge_target",
    "parse_egress_allow",
    "redirect_judge",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_V4_CLASSES: tuple[tuple[str, str], ...] = (
    ("255.255.255.255/32", "broadcast"),
    ("0.0.0.0/8", "unspecified"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "shared (CGNAT)"),
    ("169.254.0.0/16", "link-local"),
    ("168.63.129.16/32", "cloud metadata"),
    ("192.0.0.0/24", "reserved"),
    ("192.0.2.0/24", "documentation"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("192.88.99.0/24", "reserved"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)
_V6_CLASSES: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "reserved"),  # IPv4-compatible, deprecated
    ("64:ff9b:1::/48", "private"),  # local-use NAT64
    ("100::/64", "reserved"),  # discard-only
    ("2001::/32", "reserved"),  # Teredo: an IPv4 inside, obfuscated
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "reserved"),  # segment routing SIDs
    ("fc00::/7", "private"),  # unique local
    ("fe80::/10", "link-local"),
    ("fec0::/10", "link-local"),  # site-local, deprecated
    ("ff00::/8", "multicast"),
)
_CLASSES: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), name) for net, name in (*_V4_CLASSES, *_V6_CLASSES)
)
CHECKED_NAMES = 32
"""Host names of one submission resolved there, at most (the rest are judged when dialled)."""
CHECK_SECONDS = 5.0
"""Seconds the names of one submission may take to resolve (the rest: judged when dialled)."""
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # IPv4-translated (SIIT)
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")


def address_class(ip: IPAddress) -> str | None:
    """The blocked class of ``ip`` ("loopback", "private", "link-local"…), or None for a public
    address. An IPv6 address carrying an IPv4 one (mapped ``::ffff:0:0/96``, NAT64
    ``64:ff9b::/96``, 6to4 ``2002::/16``) is judged by the IPv4 inside."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is None and (ip in _NAT64 or ip in _TRANSLATED):
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None:
            return address_class(inner)
    for network, name in _CLASSES:
        if ip.version == network.version and ip in network:
            return name
    if not ip.is_global:  # whatever else IANA's special-purpose registries hold back
        return "reserved"
    return None


@dataclass(frozen=True)
class EgressPolicy:
    """Which addresses client-given URLs may reach, and the proxy they go through.

    ``allow``: entries of :func:`parse_egress_allow`; ``proxy``: an ``http(s)://`` proxy URL for
    every request (None: direct); ``trusted``: ``(host, port)`` of the operator's own (its
    proxies) that the connector may dial whatever their class — that port only, to reach them
    as proxies: a target on the same address is judged like any other.
    """

    allow: tuple[str, ...] = ()
    proxy: str | None = field(default=None, repr=False)  # may hold credentials
    no_proxy: tuple[str, ...] = ()
    """Hosts (and ``.suffix`` entries) reached directly although a proxy is set (``NO_PROXY``)."""
    trusted: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def from_settings(
        cls, settings: Settings, environ: Mapping[str, str] | None = None
    ) -> EgressPolicy:
        """The policy of ``egress_allow`` and ``egress_proxy`` (else the standard proxy
        variables of ``environ``, the process's environment by default)."""
        env = os.environ if environ is None else environ
        proxy = settings.egress_proxy.get_secret_value() if settings.egress_proxy else None
        no_proxy: tuple[str, ...] = ()
        if proxy is None:
            found = {k.lower(): v for k, v in env.items() if k.lower().endswith("_proxy")}
            proxy = found.get("https_proxy") or found.get("http_proxy") or None
            no_proxy = tuple(
                h.strip().lower() for h in found.get("no_proxy", "").split(",") if h.strip()
            )
        return cls(allow=settings.egress_allow, proxy=proxy, no_proxy=no_proxy).trusting(
            [proxy] if proxy else []
        )

    def trusting(self, urls: Iterable[str]) -> EgressPolicy:
        """This policy, also letting connections reach the hosts of ``urls`` (the operator's
        proxies)."""
        places = {(u.host.lower().rstrip("."), u.port or 0) for u in map(yarl.URL, urls) if u.host}
        return EgressPolicy(self.allow, self.proxy, self.no_proxy, self.trusted | places)

    # -- judging ----------------------------------------------------------------------------

    def allows_host(self, host: str) -> bool:
        """``host`` is named in ``egress_allow``."""
        name = host.lower().rstrip(".")
        return any(
            name == entry or (entry.startswith(".") and name.endswith(entry))
            for entry in self.allow
            if "/" not in entry
        )

    def blocked_class(self, ip: IPAddress) -> str | None:
        """The class that blocks ``ip`` under this policy, or None when it may be reached."""
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        name = address_class(ip)
        if name is None:
            return None
        for entry in self.allow:
            if "/" in entry:
                network = ipaddress.ip_network(entry)
                if network.version == ip.version and ip in network:
                    return None
        return name

    def proxy_for(self, url: yarl.URL) -> str | None:
        """The proxy a request to ``url`` goes through, or None (direct)."""
        if self.proxy is None:
            return None
        host = (url.host or "").lower().rstrip(".")
        for entry in self.no_proxy:
            if entry == "*" or host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")):
                return None
        return self.proxy

    async def check_url(self, url: str, *, unresolved: bool = True) -> None:
        """Refuse ``url`` (:class:`EgressBlocked`) when its host is, or resolves to, any
        blocked address. A name that does not resolve passes when ``unresolved`` (nothing can
        be dialled, and every dial is judged again), else it is refused as ``InputError``."""
        try:
            parsed = yarl.URL(url)
            host = parsed.host
        except (ValueError, TypeError):
            raise InputError("not a URL") from None
        if not host:
            raise InputError("a URL needs a host")
        if self.allows_host(host):
            return
        try:
            addresses = await self._resolve(host, parsed.port or 0)
        except InputError:
            if unresolved:
                return
            raise
        for ip in addresses:
            blocked = self.blocked_class(ip)
            if blocked is not None:
                raise EgressBlocked(blocked, url=_shown(parsed))

    async def check_urls(self, urls: Iterable[str]) -> None:
        """:meth:`check_url` for each distinct host of ``urls``: every IP literal, and the
        first :data:`CHECKED_NAMES` names within :data:`CHECK_SECONDS` (a job of 10,000 URLs on
        one site resolves it once; one of 10,000 names cannot hold the resolver's threads).
        A name left unchecked, or still resolving at the bound, is judged when it is dialled,
        like every connection."""
        hosts: dict[str, str] = {}
        for url in urls:
            host = (yarl.URL(url).host or "").lower()
            hosts.setdefault(host, url)
        literals = [u for h, u in hosts.items() if _ip_literal(h) is not None]
        names = [u for h, u in hosts.items() if _ip_literal(h) is None][:CHECKED_NAMES]
        for url in literals:
            await self.check_url(url)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CHECK_SECONDS):
                for start in range(0, len(names), 8):  # a few lookups at once
                    await asyncio.gather(*(self.check_url(u) for u in names[start : start + 8]))

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        literal = _ip_literal(host)
        if literal is not None:
            return [literal]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise InputError(f"the host {host[:80]!r} does not resolve") from None
        return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]

    # -- dialling ---------------------------------------------------------------------------

    def connector(self, **options: Any) -> aiohttp.TCPConnector:
        """An aiohttp connector that connects only where this policy allows: its resolver
        refuses a name any of whose addresses is blocked, and its socket factory refuses to
        dial a blocked address (IP literals, which skip the resolver, included). A refusal
        raises :class:`EgressBlocked` inside aiohttp's ``ClientConnectorError``
        (:func:`egress_refusal` finds it)."""
        # Dialled whatever their class: the addresses of names egress_allow names (any port),
        # and the operator's proxies (their port only; an IP literal approved from the start).
        approved: set[tuple[str, int | None]] = {
            (str(ip), port) for host, port in self.trusted if (ip := _ip_literal(host))
        }
        resolver = _checking_resolver(self, approved)

        def dial(addr_info: Any) -> socket.socket:
            family, type_, proto, _, address = addr_info
            ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
            known = (str(ip), None) in approved or (str(ip), int(address[1])) in approved
            blocked = None if known else self.blocked_class(ip)
            if blocked is not None:
                raise EgressBlocked(blocked)
            return socket.socket(family=family, type=type_, proto=proto)

        return aiohttp.TCPConnector(resolver=resolver, socket_factory=dial, **options)


def _checking_resolver(
    policy: EgressPolicy, approved: set[tuple[str, int | None]]
) -> aiohttp.abc.AbstractResolver:
    """aiohttp's resolver, refusing names that resolve to any blocked address. Addresses of
    names named in ``egress_allow`` (any port) and of the operator's proxies (their port) are
    remembered as approved for the socket factory."""

    class CheckingResolver(AbstractResolver):
        def __init__(self) -> None:
            self.inner = aiohttp.DefaultResolver()

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            results = await self.inner.resolve(host, port, family)
            allowed = policy.allows_host(host)
            proxy = (host.lower().rstrip("."), port) in policy.trusted
            for result in results:
                ip = ipaddress.ip_address(str(result["host"]).split("%", 1)[0])
                if allowed or proxy:
                    approved.add((str(ip), None if allowed else port))
                    continue
                blocked = policy.blocked_class(ip)
                if blocked is not None:
                    raise EgressBlocked(blocked)
            return results

        async def close(self) -> None:
            await self.inner.close()

    return CheckingResolver()


def egress_refusal(error: BaseException) -> EgressBlocked | None:
    """The policy's refusal inside an aiohttp connection error, if that is what it is."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, EgressBlocked):
            return current
        seen.add(id(current))
        inner = getattr(current, "os_error", None)
        current = inner if isinstance(inner, BaseException) else current.__cause__
    return None


async def judge_target(policy: EgressPolicy, url: yarl.URL) -> None:
    """Refuse ``url`` if the policy blocks where it leads (:class:`EgressBlocked`); a name
    that does not resolve is a failed connection, as it would be dialled."""
    try:
        await policy.check_url(str(url), unresolved=False)
    except InputError:  # unjudged, it would be dialled by the proxy as it pleases
        raise ConnectionFailed("name not resolved", url=redact(str(url))) from None


def redirect_judge(policy: EgressPolicy) -> aiohttp.TraceConfig:
    """An aiohttp trace judging each redirect's target before it is followed (through a proxy,
    which dials it where the connector cannot judge)."""
    trace = aiohttp.TraceConfig()

    async def on_redirect(
        session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestRedirectParams
    ) -> None:
        # Where aiohttp goes next: Location, else URI (it follows either).
        headers = params.response.headers
        location = headers.get("Location") or headers.get("URI")
        if location:
            await judge_target(policy, params.url.join(yarl.URL(location)))

    trace.on_request_redirect.append(on_redirect)
    return trace


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def _shown(url: yarl.URL) -> str:
    """The URL for an error: scheme, host and port only (a path or query may hold secrets)."""
    return str(url.origin()) if url.is_absolute() else ""
