"""Proxy providers: where the proxies a scrape goes through come from.

>>> from scrapeflow.proxies import ProxyProviderFromDict, ProxyProviderFromList
>>> provider = ProxyProviderFromList(["http://user:password@127.0.0.2:8888"])
>>> provider.get_one_proxy()
'http://user:password@127.0.0.2:8888'
>>> by_country = ProxyProviderFromDict({"US": ["http://127.0.0.3:8888"], "*": ["http://127.0.0.4:8888"]})
>>> by_country.get_one_proxy("US"), by_country.get_one_proxy()
('http://127.0.0.3:8888', 'http://127.0.0.4:8888')

Static providers are usable at once. Remote providers (paid or free services) fetch their list in
``await provider.load()``; ``execute_async`` and ``check_proxies`` call it for you::

    provider = ProxyProviderFromWebshare()  # reads WEBSHARE_API_KEY; no I/O yet
    await provider.load()                   # fetches the list once; refresh() fetches it again
    provider.get_one_proxy("US")

A list that cannot be had raises :class:`~scrapeflow.errors.ProxyListUnavailable`; its message
names the service and the problem, never the API key or a proxy password.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self
from urllib.parse import quote

import aiohttp
import yarl

from scrapeflow._util.redact import redact
from scrapeflow.errors import (
    ConfigError,
    InputError,
    MissingSetting,
    ProxiesNotLoaded,
    ProxyListUnavailable,
)
from scrapeflow.urllist import open_regular_file

__all__ = [
    "ANY_COUNTRY",
    "DEFAULT_CHECK_URL",
    "NO_COUNTRY",
    "ProxyProvider",
    "ProxyProviderFromDict",
    "ProxyProviderFromIPRoyal",
    "ProxyProviderFromList",
    "ProxyProviderFromProxyscrape",
    "ProxyProviderFromWebshare",
    "validate_proxy_url",
]

DEFAULT_CHECK_URL = "http://www.gstatic.com/generate_204"
"""What ``check_proxies`` fetches through each proxy unless given another ``check_url``."""

ANY_COUNTRY = "*"
NO_COUNTRY = ""
_CHECK_CONCURRENCY = 50


def validate_proxy_url(proxy: str) -> str:
    """Return ``proxy`` if it is a usable ``http(s)://[user:password@]host:port`` URL.

    The error never repeats the value: a malformed line may well be a password.
    """
    want = "want http(s)://[user:password@]host:port"
    try:
        url = yarl.URL(proxy)
    except (TypeError, ValueError):
        raise InputError(f"not a proxy URL ({want})") from None
    if url.scheme not in {"http", "https"}:
        raise InputError(f"not a proxy URL: the scheme must be http or https ({want})")
    if not url.host or url.explicit_port is None:
        raise InputError(f"not a proxy URL: it needs a host and a port ({want})")
    return proxy


class ProxyProvider:
    """Proxies by country, the ones found bad, and a way to pick one.

    ``proxies`` maps a country code to fully qualified proxy URLs
    (``http://[user:password@]ip:port``); a provider without country information files them
    under ``""``, and ``"*"`` holds the proxies to use when no country is asked for.
    """

    default_retries = 5

    def __init__(
        self,
        proxies: Mapping[str, Iterable[str]] | None = None,
        *,
        check_url: str = DEFAULT_CHECK_URL,
    ) -> None:
        self.proxies: dict[str, list[str]] = {}
        self.bad_proxies: set[str] = set()
        self.check_url = check_url
        self._loaded = proxies is not None
        if proxies is not None:
            self._set_proxies(proxies)

    def _set_proxies(self, proxies: Mapping[str, Iterable[str]]) -> None:
        self.proxies = {
            str(country): [validate_proxy_url(p) for p in urls] for country, urls in proxies.items()
        }
        self._loaded = True

    def __repr__(self) -> str:
        counts = {country: len(urls) for country, urls in self.proxies.items()}
        return f"{type(self).__name__}(proxies={counts}, bad={len(self.bad_proxies)})"

    @property
    def loaded(self) -> bool:
        """Whether the proxy list is known (static lists are; remote ones after ``load``)."""
        return self._loaded

    async def load(self) -> None:
        """Fetch the proxy list if this provider has a remote source. Idempotent."""
        self._loaded = True

    def all_proxies(self) -> list[str]:
        """Every proxy once, whatever its country."""
        seen: dict[str, None] = {}
        for urls in self.proxies.values():
            seen.update(dict.fromkeys(urls))
        return list(seen)

    def get_one_proxy(self, country: str | None = None) -> str | None:
        """A random good proxy, or ``None`` if none is left.

        With ``country``, only that country's proxies (the same code the provider uses).
        Without, the ``"*"`` proxies when the provider has them, else any proxy.
        """
        good = self.candidates(country)
        return random.choice(good) if good else None

    def candidates(self, country: str | None = None) -> list[str]:
        """The good proxies ``get_one_proxy(country)`` chooses from."""
        if not self._loaded:
            raise ProxiesNotLoaded(
                f"{type(self).__name__} has not fetched its proxies yet: await provider.load()"
            )
        if country is not None:
            pool = self.proxies.get(country, [])
        elif ANY_COUNTRY in self.proxies:
            pool = self.proxies[ANY_COUNTRY]
        else:
            pool = self.all_proxies()
        return [p for p in pool if p not in self.bad_proxies]

    def mark_bad(self, proxy: str) -> None:
        """Stop handing out ``proxy``."""
        self.bad_proxies.add(proxy)

    async def check_proxies(
        self,
        timeout: float = 30,  # noqa: ASYNC109 - the seed's signature
        retries: int = 5,
    ) -> None:
        """Fetch ``check_url`` through every proxy; the ones that fail ``retries`` times are bad.

        A proxy that answers again is taken back out of ``bad_proxies``.
        """
        await self.load()
        limit = asyncio.Semaphore(_CHECK_CONCURRENCY)
        client_timeout = aiohttp.ClientTimeout(total=timeout)
        async with aiohttp.ClientSession(timeout=client_timeout) as session:

            async def check(proxy: str) -> None:
                async with limit:
                    alive = await self._is_alive(session, proxy, max(1, retries))
                if alive:
                    self.bad_proxies.discard(proxy)
                else:
                    self.bad_proxies.add(proxy)

            await asyncio.gather(*(check(p) for p in self.all_proxies()))

    async def _is_alive(self, session: aiohttp.ClientSession, proxy: str, attempts: int) -> bool:
        for _ in range(attempts):
            try:
                async with session.get(self.check_url, proxy=proxy, allow_redirects=False) as r:
                    await r.read()
                    if r.status < 400:
                        return True
            except (aiohttp.ClientError, TimeoutError):
                pass
        return False


class ProxyProviderFromList(ProxyProvider):
    """A fixed list of proxies without country information."""

    def __init__(self, proxies: Iterable[str], *, check_url: str = DEFAULT_CHECK_URL) -> None:
        super().__init__({NO_COUNTRY: list(proxies)}, check_url=check_url)

    @classmethod
    def from_file(cls, path: str | Path, *, check_url: str = DEFAULT_CHECK_URL) -> Self:
        """Proxies from a text file: one ``http(s)://[user:password@]host:port`` a line; blank
        lines and ``#`` comments skipped. A bad line raises :class:`InputError` naming its
        number, never its text (it may hold a password).

        >>> ProxyProviderFromList.from_file("proxies.txt")  # doctest: +SKIP
        """
        path = Path(path)
        # A regular file only: a FIFO would block, /dev/zero never end.
        with open_regular_file(path, what="proxy list") as handle:
            raw = handle.read()
        try:
            lines = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError:
            raise InputError(f"{path}: the proxy list is not UTF-8 text") from None
        proxies = []
        for lineno, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                proxies.append(validate_proxy_url(text))
            except InputError as exc:
                raise InputError(f"{path}:{lineno}: {exc}") from None
        if not proxies:
            raise InputError(f"{path}: no proxy in the file")
        return cls(proxies, check_url=check_url)


class ProxyProviderFromDict(ProxyProvider):
    """Proxies by country; ``"*"`` lists the ones to use when no country is asked for."""

    def __init__(
        self, proxies: Mapping[str, Iterable[str]], *, check_url: str = DEFAULT_CHECK_URL
    ) -> None:
        super().__init__(proxies, check_url=check_url)


# --- Remote providers -------------------------------------------------------------------------

_API_TIMEOUT = 30.0
_WEBSHARE_PAGE_SIZE = "100"
_WEBSHARE_MAX_PAGES = 1_000  # 100,000 proxies: far past any plan, a stop for a looping `next`


def _setting(value: str | None, *, argument: str, variable: str, owner: str) -> str:
    """``value``, else the environment variable; :class:`MissingSetting` if neither is set."""
    if value is None:
        value = os.environ.get(variable)
    value = (value or "").strip()
    if not value:
        raise MissingSetting(
            variable, f"pass {argument}=... to {owner} or set the {variable} environment variable"
        )
    if any(c in value for c in "\r\n\x00"):
        raise ConfigError(f"{owner}: {argument} ({variable}) contains a line break")
    return value


def _proxy_url(host: Any, port: Any, user: Any = None, password: Any = None) -> str | None:
    """``http://[user:password@]host:port``, credentials percent-encoded; ``None`` if invalid.

    Built by hand because yarl drops a default port (``:80``), which the proxy URL must keep.
    """
    if not isinstance(host, str) or not host.strip():
        return None
    try:
        number = int(port)
        authority = yarl.URL.build(scheme="http", host=host.strip()).raw_authority
    except (TypeError, ValueError):
        return None
    if not 0 < number < 65536:
        return None
    userinfo = f"{quote(str(user), safe='')}:{quote(str(password or ''), safe='')}@" if user else ""
    return f"http://{userinfo}{authority}:{number}"


class _RemoteProxyProvider(ProxyProvider):
    """A provider whose list comes from a web API: fetched by ``load``, again by ``refresh``."""

    service: ClassVar[str]
    default_base_url: ClassVar[str]
    _api_key = ""  # scrubbed from every message, should the service ever echo it

    def __init__(self, *, base_url: str | None, timeout: float, check_url: str) -> None:
        super().__init__(None, check_url=check_url)
        base = yarl.URL(base_url or self.default_base_url)
        if base.scheme not in {"http", "https"} or not base.host:
            raise ConfigError(f"{type(self).__name__}: base_url must be an http(s) URL")
        self.base_url = str(base).rstrip("/")
        if timeout <= 0:
            raise ConfigError(f"{type(self).__name__}: timeout must be positive, got {timeout}")
        self.timeout = float(timeout)
        self._lock = asyncio.Lock()  # binds to a loop on first use, not here

    async def load(self) -> None:
        """Fetch the proxy list unless it was fetched already."""
        async with self._lock:
            if not self._loaded:
                await self._refetch()

    async def refresh(self) -> None:
        """Fetch the proxy list again; bad proxies still in the new list stay bad."""
        async with self._lock:
            await self._refetch()

    async def _refetch(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            proxies = await self._fetch(session)
        if not any(proxies.values()):
            raise self._unavailable("the service returned no usable proxy")
        self._set_proxies(proxies)
        self.bad_proxies &= set(self.all_proxies())

    async def _fetch(self, session: aiohttp.ClientSession) -> dict[str, list[str]]:
        """The service's proxies by country code (``""`` when it gives none)."""
        raise NotImplementedError

    def _unavailable(self, problem: str) -> ProxyListUnavailable:
        text = redact(" ".join(problem.split()))
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return ProxyListUnavailable(f"{self.service} proxy list unavailable: {text}")

    async def _get_json(
        self,
        session: aiohttp.ClientSession,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """GET ``base_url + path`` and decode its JSON; every failure is ProxyListUnavailable."""
        url = self.base_url + path
        try:
            # No redirects: a redirect to another host would carry the API key header along.
            async with session.get(
                url, params=params, headers=headers, allow_redirects=False
            ) as response:
                body = await response.read()
                status, reason = response.status, response.reason or ""
        except aiohttp.ClientError as exc:
            raise self._unavailable(f"cannot fetch {url}: {type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            raise self._unavailable(f"no answer from {url} within {self.timeout:g} s") from exc
        if not 200 <= status < 300:
            raise self._unavailable(f"HTTP {status} {reason} from {url}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise self._unavailable(f"{url} did not answer JSON") from exc


class ProxyProviderFromProxyscrape(_RemoteProxyProvider):
    """Free public HTTP proxies from ProxyScrape, by country. No API key.

    Endpoint: ProxyScrape's free proxy list API v3,
    ``GET https://api.proxyscrape.com/v3/free-proxy-list/get?request=displayproxies
    &protocol=http&format=json&timeout=<ms>&country=<code|all>``, which answers
    ``{"proxies": [{"ip": ..., "port": ..., "protocol": "http", "alive": true,
    "ip_data": {"countryCode": "US", ...}, ...}, ...]}``. Proxies are filed under
    ``ip_data.countryCode`` (``""`` when absent); the ones reported dead are left out.

    Free proxies come and go, so check them before use::

        provider = ProxyProviderFromProxyscrape(country="DE")
        await provider.check_proxies(timeout=10, retries=1)
    """

    service = "ProxyScrape"
    default_base_url = "https://api.proxyscrape.com/v3"
    path = "/free-proxy-list/get"

    def __init__(
        self,
        *,
        country: str = "all",
        max_timeout_ms: int = 10_000,
        base_url: str | None = None,
        timeout: float = _API_TIMEOUT,
        check_url: str = DEFAULT_CHECK_URL,
    ) -> None:
        super().__init__(base_url=base_url, timeout=timeout, check_url=check_url)
        self.country = country
        self.max_timeout_ms = max_timeout_ms

    async def _fetch(self, session: aiohttp.ClientSession) -> dict[str, list[str]]:
        params = {
            "request": "displayproxies",
            "protocol": "http",
            "format": "json",
            "timeout": str(self.max_timeout_ms),
            "country": self.country,
        }
        data = await self._get_json(session, self.path, params=params)
        entries = data.get("proxies") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise self._unavailable(f"no 'proxies' list in the answer of {self.path}")
        proxies: dict[str, list[str]] = {}
        for entry in entries:
            # Dead ones (by the service's own check) and SOCKS ones are of no use here.
            if not isinstance(entry, dict) or entry.get("alive") is False:
                continue
            url = _proxy_url(entry.get("ip"), entry.get("port"))
            if url is None or entry.get("protocol", "http") != "http":
                continue
            ip_data = entry.get("ip_data")
            code = ip_data.get("countryCode") if isinstance(ip_data, dict) else None
            proxies.setdefault(code if isinstance(code, str) else NO_COUNTRY, []).append(url)
        return proxies


class ProxyProviderFromWebshare(_RemoteProxyProvider):
    """Your Webshare proxies, by country. Needs an API key.

    Endpoint: Webshare API v2, "List proxies" (https://apidocs.webshare.io/proxy-list),
    ``GET https://proxy.webshare.io/api/v2/proxy/list/?mode=direct&page=<n>&page_size=100``
    with the header ``Authorization: Token <API key>``. It answers
    ``{"count": ..., "next": ..., "previous": ..., "results": [...]}``; pages are read while
    ``next`` is set. Each result's ``username``, ``password``, ``proxy_address`` and ``port``
    make the proxy URL, filed under its ``country_code``; results with ``valid: false`` are left
    out. Webshare bills bandwidth, so use it where a free list will not do.

    The key is ``api_key`` or the ``WEBSHARE_API_KEY`` environment variable.
    """

    service = "Webshare"
    default_base_url = "https://proxy.webshare.io/api/v2"
    path = "/proxy/list/"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = _API_TIMEOUT,
        check_url: str = DEFAULT_CHECK_URL,
    ) -> None:
        self._api_key = _setting(
            api_key, argument="api_key", variable="WEBSHARE_API_KEY", owner=type(self).__name__
        )
        super().__init__(base_url=base_url, timeout=timeout, check_url=check_url)

    async def _fetch(self, session: aiohttp.ClientSession) -> dict[str, list[str]]:
        headers = {"Authorization": f"Token {self._api_key}"}
        proxies: dict[str, list[str]] = {}
        for page in range(1, _WEBSHARE_MAX_PAGES + 1):
            # Pages are asked by number rather than by following `next`, a URL the answer
            # chooses: the key is only ever sent to base_url.
            params = {"mode": "direct", "page": str(page), "page_size": _WEBSHARE_PAGE_SIZE}
            data = await self._get_json(session, self.path, params=params, headers=headers)
            results = data.get("results") if isinstance(data, dict) else None
            if not isinstance(results, list):
                raise self._unavailable(f"no 'results' list in page {page} of {self.path}")
            for entry in results:
                if not isinstance(entry, dict) or entry.get("valid") is False:
                    continue
                url = _proxy_url(
                    entry.get("proxy_address"),
                    entry.get("port"),
                    entry.get("username"),
                    entry.get("password"),
                )
                if url is None:
                    continue
                code = entry.get("country_code")
                proxies.setdefault(code if isinstance(code, str) else NO_COUNTRY, []).append(url)
            if not data.get("next"):
                return proxies
        raise self._unavailable(f"{self.path} still has a next page after {page} pages")


class ProxyProviderFromIPRoyal(_RemoteProxyProvider):
    """The proxies of one IPRoyal order (ISP, datacenter). Needs an API key and the order id.

    Endpoint: IPRoyal reseller API, "Get Order" (https://docs.iproyal.com/proxies/isp/api/orders),
    ``GET https://apid.iproyal.com/v1/reseller/orders/<order_id>`` with the header
    ``X-Access-Token: <API key>``. The order's ``proxy_data.ports["http|https"]`` is the port
    and each of ``proxy_data.proxies`` is ``{"ip", "username", "password"}`` (or an IPRoyal
    proxy string ``ip:port:username:password``). An order names its location ("United
    States"), not a country code, so its proxies are filed under ``""``.

    The key is ``api_key`` or ``IPROYAL_API_KEY``; the order is ``order_id`` or
    ``IPROYAL_ORDER_ID``.
    """

    service = "IPRoyal"
    default_base_url = "https://apid.iproyal.com/v1/reseller"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        order_id: str | int | None = None,
        base_url: str | None = None,
        timeout: float = _API_TIMEOUT,
        check_url: str = DEFAULT_CHECK_URL,
    ) -> None:
        owner = type(self).__name__
        self._api_key = _setting(
            api_key, argument="api_key", variable="IPROYAL_API_KEY", owner=owner
        )
        order = _setting(
            None if order_id is None else str(order_id),
            argument="order_id",
            variable="IPROYAL_ORDER_ID",
            owner=owner,
        )
        if not order.isdigit():
            raise ConfigError(f"{owner}: order_id must be a number, got {order!r}")
        self.order_id = order
        super().__init__(base_url=base_url, timeout=timeout, check_url=check_url)

    async def _fetch(self, session: aiohttp.ClientSession) -> dict[str, list[str]]:
        path = f"/orders/{self.order_id}"
        order = await self._get_json(session, path, headers={"X-Access-Token": self._api_key})
        data = order.get("proxy_data") if isinstance(order, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("proxies"), list):
            raise self._unavailable(f"no 'proxy_data.proxies' list in the answer of {path}")
        ports = data.get("ports")
        port = ports.get("http|https") if isinstance(ports, dict) else None
        urls = [url for item in data["proxies"] if (url := self._parse(item, port))]
        if not urls:
            status = order.get("status")
            raise self._unavailable(f"order {self.order_id} has no proxies (status {status!r})")
        return {NO_COUNTRY: urls}

    @staticmethod
    def _parse(item: Any, port: Any) -> str | None:
        if isinstance(item, dict):
            return _proxy_url(item.get("ip"), port, item.get("username"), item.get("password"))
        if isinstance(item, str):
            parts = item.strip().split(":", 3)  # the password may hold a ':'
            return _proxy_url(*parts) if len(parts) == 4 else None
        return None
