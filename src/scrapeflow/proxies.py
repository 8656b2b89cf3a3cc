"""Proxy providers: where the proxies a scrape goes through come from.

>>> from scrapeflow.proxies import ProxyProviderFromDict, ProxyProviderFromList
>>> provider = ProxyProviderFromList(["http://user:password@127.0.0.2:8888"])
>>> provider.get_one_proxy()
'http://user:password@127.0.0.2:8888'
>>> by_country = ProxyProviderFromDict({"US": ["http://127.0.0.3:8888"], "*": ["http://127.0.0.4:8888"]})
>>> by_country.get_one_proxy("US"), by_country.get_one_proxy()
('http://127.0.0.3:8888', 'http://127.0.0.4:8888')

Static providers are usable at once. Remote providers (paid or free services) fetch their list in
``await provider.load()``; ``execute_async`` and ``check_proxies`` call it for you.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Mapping

import aiohttp
import yarl

from scrapeflow._redact import redact
from scrapeflow.errors import InputError, ProxiesNotLoaded

__all__ = [
    "DEFAULT_CHECK_URL",
    "ProxyProvider",
    "ProxyProviderFromDict",
    "ProxyProviderFromList",
]

DEFAULT_CHECK_URL = "http://www.gstatic.com/generate_204"
"""What ``check_proxies`` fetches through each proxy unless given another ``check_url``."""

ANY_COUNTRY = "*"
NO_COUNTRY = ""
_CHECK_CONCURRENCY = 50


def validate_proxy_url(proxy: str) -> str:
    """Return ``proxy`` if it is a usable ``http(s)://[user:password@]host:port`` URL."""
    try:
        url = yarl.URL(proxy)
    except (TypeError, ValueError) as exc:
        raise InputError(f"not a proxy URL: {redact(str(proxy))!r}") from exc
    if url.scheme not in {"http", "https"} or not url.host or url.explicit_port is None:
        raise InputError(
            f"not a proxy URL (want http(s)://[user:password@]host:port): {redact(proxy)!r}"
        )
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
        good = [p for p in pool if p not in self.bad_proxies]
        return random.choice(good) if good else None

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


class ProxyProviderFromDict(ProxyProvider):
    """Proxies by country; ``"*"`` lists the ones to use when no country is asked for."""

    def __init__(
        self, proxies: Mapping[str, Iterable[str]], *, check_url: str = DEFAULT_CHECK_URL
    ) -> None:
        super().__init__(proxies, check_url=check_url)
