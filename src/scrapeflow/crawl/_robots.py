"""robots.txt, read once per origin with Protego (the parser Scrapy uses), and obeyed.

A robots.txt that answers 4xx allows everything (there is none); one that cannot be fetched
(5xx after retries, a network error) allows everything too, with a warning in the log, as
Scrapy does. ``Crawl-delay`` paces the host's slot (at least that many seconds between two
requests). Concurrent pages of a new origin wait for one fetch of its robots.txt.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from protego import Protego

from scrapeflow.errors import FetchError

if TYPE_CHECKING:
    from scrapeflow.http import HttpClient

__all__ = ["RobotsRules"]

log = logging.getLogger("scrapeflow.crawl")
_MAX_ROBOTS_BYTES = 512 * 1024  # Google reads the first 500 KiB


class RobotsRules:
    """What each origin's robots.txt allows ``user_agent``, fetched through ``http``."""

    def __init__(self, http: HttpClient, user_agent: str) -> None:
        self.http = http
        self.user_agent = user_agent
        self._rules: dict[str, asyncio.Future[Protego | None]] = {}

    async def allows(self, url: str) -> bool:
        rules = await self.rules_for(url)
        return rules is None or rules.can_fetch(url, self.user_agent)

    async def sitemaps(self, url: str) -> list[str]:
        """The sitemaps ``url``'s origin lists in its robots.txt."""
        rules = await self.rules_for(url)
        return [] if rules is None else list(rules.sitemaps)

    async def rules_for(self, url: str) -> Protego | None:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        known = self._rules.get(origin)
        if known is None:
            known = self._rules[origin] = asyncio.get_running_loop().create_future()
            try:
                known.set_result(await self._fetch(origin))
            except BaseException as exc:
                del self._rules[origin]  # a cancelled fetch: the next page asks again
                known.set_exception(exc)
                known.exception()  # retrieved: waiters get it, nobody else needs to
                raise
        return await asyncio.shield(known)

    async def _fetch(self, origin: str) -> Protego | None:
        host = urlsplit(origin)
        slot = f"{host.hostname}:{host.port or (443 if host.scheme == 'https' else 80)}"
        try:
            answer = await self.http.request("GET", f"{origin}/robots.txt", slot=f"robots@{slot}")
        except FetchError as exc:
            log.warning("robots.txt of %s unreadable (%s): everything allowed", origin, exc)
            return None
        if answer.status >= 500:
            log.warning("robots.txt of %s answered %s: everything allowed", origin, answer.status)
            return None
        if answer.status != 200:
            return None
        rules = Protego.parse(answer.body[:_MAX_ROBOTS_BYTES].decode("utf-8", "replace"))
        delay = rules.crawl_delay(self.user_agent)
        if delay:
            self.http.hosts.pace(slot, 1.0 / float(delay))
            log.info("robots.txt of %s: Crawl-delay %s s", origin, delay)
        return rules
