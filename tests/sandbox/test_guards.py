"""The guard's defences, seen over HTTP on the feed: rate limits, bans, chaos, header coherence."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from scrapeflow.sandbox import SandboxAdmin, serve
from scrapeflow.sandbox._feed import FeedSite
from scrapeflow.sandbox._guards import CAPTCHA_MARKER
from scrapeflow.sandbox._hostility import PROFILES, Hostility
from scrapeflow.sandbox._site import SandboxState

PAGE = "/u/user0001"
CHROME_UA = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36"
)
FIREFOX_UA = "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"
ACCEPT = {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.9",
}
CHROME = {
    "User-Agent": CHROME_UA,
    **ACCEPT,
    "sec-ch-ua": '"Chromium";v="124", "Google Chrome";v="124", "Not-A.Brand";v="99"',
    "sec-ch-ua-mobile": "?0",
    "sec-ch-ua-platform": '"Windows"',
}
FIREFOX = {"User-Agent": FIREFOX_UA, **ACCEPT}


@dataclass
class Feed:
    site: FeedSite
    url: str
    session: aiohttp.ClientSession
    admin: SandboxAdmin

    async def get(self, path: str = PAGE, **kwargs: Any) -> tuple[int, str, Any]:
        async with self.session.get(self.url + path, **kwargs) as r:
            return r.status, await r.text(), r.headers

    async def without_token(self, path: str, body: dict[str, Any]) -> int:
        """The status of an admin POST sent with no token at all."""
        async with self.session.post(f"{self.url}/__admin{path}", json=body) as r:
            return r.status

    async def statuses(self, n: int, concurrency: int = 25) -> tuple[Counter[int], list[str]]:
        """GET the profile page ``n`` times, ``concurrency`` at once; statuses and bodies."""
        limit = asyncio.Semaphore(concurrency)

        async def one() -> tuple[int, str]:
            async with limit:
                status, text, _ = await self.get()
                return status, text

        answers = await asyncio.gather(*(one() for _ in range(n)))
        return Counter(status for status, _ in answers), [text for _, text in answers]


@contextlib.asynccontextmanager
async def running(hostility: Hostility | None = None, **options: Any) -> AsyncIterator[Feed]:
    site = FeedSite(SandboxState(seed=0, admin_token="t"), hostility=hostility, **options)
    async with (
        serve(site.app()) as url,
        aiohttp.ClientSession() as session,
        SandboxAdmin({"feed": url}, "t", session=session) as admin,
    ):
        yield Feed(site, url, session, admin)


@contextlib.asynccontextmanager
async def session_from(ip: str) -> AsyncIterator[aiohttp.ClientSession]:
    """A client whose connections come from ``ip`` (any of 127/8 on Linux loopback)."""
    connector = aiohttp.TCPConnector(local_addr=(ip, 0))
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


def within_five_sigma(observed: int, n: int, rate: float) -> bool:
    return abs(observed - n * rate) <= 5 * math.sqrt(n * rate * (1 - rate))


async def test_rate_limit_answers_429_with_retry_after() -> None:
    async with running(Hostility(rate_limit_rps=1, rate_limit_burst=3)) as feed:
        for _ in range(3):
            assert (await feed.get())[0] == 200
        status, _, headers = await feed.get()
        assert status == 429
        retry_after = int(headers["Retry-After"])
        assert retry_after == 1  # one token, at one per second
        await asyncio.sleep(retry_after + 0.05)
        assert (await feed.get())[0] == 200


async def test_a_client_that_keeps_going_is_banned_other_ips_are_served() -> None:
    hostility = Hostility(rate_limit_rps=0.5, rate_limit_burst=2, ban_after=3, ban_seconds=60)
    async with running(hostility) as feed:
        answers = [await feed.get() for _ in range(10)]
        statuses = [status for status, _, _ in answers]
        assert statuses[:3] == [200, 200, 429]
        assert statuses[-1] == 403 and "blocked" in answers[-1][1]
        assert statuses.index(403) <= 2 + 1 + hostility.ban_after
        assert feed.site.guard.is_banned("127.0.0.1")
        async with session_from("127.0.0.2") as other, other.get(feed.url + PAGE) as r:
            assert r.status == 200
        assert (await feed.admin.stats("feed"))["bans"] == 1


async def test_server_errors_come_at_the_configured_rate() -> None:
    n, rate = 500, 0.2
    async with running(Hostility(error_rate=rate), page_size=5) as feed:
        statuses, _ = await feed.statuses(n)
    errors = statuses[500] + statuses[502] + statuses[503]
    assert errors + statuses[200] == n
    assert within_five_sigma(errors, n, rate), statuses


async def test_captchas_come_at_the_configured_rate_with_status_200() -> None:
    n, rate = 500, 0.2
    async with running(Hostility(captcha_rate=rate), page_size=5) as feed:
        statuses, bodies = await feed.statuses(n)
        captchas = sum(CAPTCHA_MARKER in body for body in bodies)
        assert statuses == {200: n}
        assert within_five_sigma(captchas, n, rate)
        assert sum('class="post"' in body for body in bodies) == n - captchas
        # On the JSON API the CAPTCHA is a JSON checkpoint, before any signature check.
        feed.site.guard.hostility = Hostility(captcha_rate=1.0)
        async with feed.session.get(f"{feed.url}/graphql/query/", params={"variables": "{}"}) as r:
            assert r.status == 200
            assert (await r.json())["message"] == "checkpoint_required"


async def test_slow_answers_outlast_a_shorter_client_timeout() -> None:
    async with running(Hostility(slow_rate=1.0, slow_seconds=0.5)) as feed:
        with pytest.raises(asyncio.TimeoutError):
            await feed.get(timeout=aiohttp.ClientTimeout(total=0.15))
        started = time.monotonic()
        assert (await feed.get())[0] == 200
        assert time.monotonic() - started >= 0.5


async def test_dropped_connections_get_no_answer() -> None:
    async with running(Hostility(drop_rate=1.0)) as feed:
        for _ in range(3):
            with pytest.raises((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
                await feed.get()
        feed.site.guard.hostility = Hostility()
        assert (await feed.get())[0] == 200


@pytest.mark.parametrize(
    ("headers", "block"),
    [
        ({}, "bot-user-agent"),  # aiohttp's own User-Agent
        ({"User-Agent": CHROME_UA, **ACCEPT}, "client-hints-mismatch"),
        (
            {**CHROME, "sec-ch-ua": '"Chromium";v="123", "Google Chrome";v="123"'},
            "client-hints-mismatch",
        ),
        ({k: v for k, v in CHROME.items() if k != "sec-ch-ua-mobile"}, "client-hints-incomplete"),
        ({**FIREFOX, "sec-ch-ua": CHROME["sec-ch-ua"]}, "client-hints-from-non-chromium"),
        ({"User-Agent": FIREFOX_UA}, "missing-accept-headers"),
        (CHROME, None),
        (FIREFOX, None),
    ],
)
async def test_incoherent_headers_are_blocked(headers: dict[str, str], block: str | None) -> None:
    async with running(Hostility(check_headers=True)) as feed:
        status, _, answer_headers = await feed.get(headers=headers)
        assert (status, answer_headers.get("X-Sandbox-Block")) == (403 if block else 200, block)


async def test_profiles_load_and_the_admin_switches_them_at_runtime() -> None:
    assert set(PROFILES) == {"none", "realistic", "hostile"}
    assert not Hostility.profile("none").check_headers
    assert (
        Hostility.profile("realistic").rate_limit_rps > Hostility.profile("hostile").rate_limit_rps
    )
    assert Hostility.profile("hostile").ban_mode == "empty"
    with pytest.raises(ValueError, match="unknown hostility profile"):
        Hostility.profile("friendly")

    async with running() as feed:
        assert (await feed.get())[0] == 200  # aiohttp's UA passes with no header checks
        assert await feed.without_token("/hostility", {"profile": "hostile"}) == 401
        assert (await feed.get())[0] == 200

        for name in ("realistic", "hostile", "none"):
            switches = await feed.admin.set_hostility("feed", profile=name)
            assert switches == Hostility.profile(name) == feed.site.guard.hostility
            assert await feed.admin.hostility("feed") == switches

        await feed.admin.set_hostility("feed", profile="realistic")
        status, _, headers = await feed.get()
        assert (status, headers["X-Sandbox-Block"]) == (403, "bot-user-agent")
        # A client first seen with no rate limit still has its burst when one is switched on.
        switches = await feed.admin.set_hostility("feed", check_headers="off")
        assert (switches.check_headers, switches.rate_limit_rps) == (False, 20)
        assert (await feed.get())[0] == 200


async def test_admin_block_bans_that_ip_only() -> None:
    async with running() as feed:
        assert await feed.without_token("/block", {"ip": "127.0.0.2"}) == 401
        await feed.admin.block("feed", "127.0.0.2")
        async with session_from("127.0.0.2") as other:
            async with other.get(feed.url + PAGE) as r:
                assert r.status == 403
            assert (await feed.get())[0] == 200
            await feed.admin.unblock_all("feed")
            async with other.get(feed.url + PAGE) as r:
                assert r.status == 200


async def test_refusals_on_json_routes_are_json() -> None:
    async with running(Hostility(rate_limit_rps=1, rate_limit_burst=1)) as feed:
        statuses = []
        for _ in range(3):
            async with feed.session.get(feed.url + "/graphql/query/?variables={}") as r:
                statuses.append(r.status)
                if r.status == 429:
                    assert r.content_type == "application/json"
                    assert (await r.json())["status"] == "fail"
                    assert int(r.headers["Retry-After"]) >= 1
        assert 429 in statuses
