"""A proxy that refuses our credentials is a proxy failure, never the site's answer.

Against a real tinyproxy with BasicAuth: a wrong password is answered by tinyproxy itself with a
401 (not the standard 407) to a plain request, and to a CONNECT. Either way the request must be
classed as the proxy failing (set aside, another proxy tried, ``NoProxyAvailable`` when none is
left), not as the site refusing us: the site never saw the request. A site's own 401, relayed
by the same tinyproxy with the right password, stays the site's answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from scrapeflow.errors import ConnectionFailed, NoProxyAvailable
from scrapeflow.http import HttpClient, HttpConfig, RetryPolicy
from scrapeflow.proxies import ProxyProviderFromList
from scrapeflow.sandbox import serve
from tests.http import Recorder, proxies

USER, PASSWORD = "scraper", "login-S3cret-77"
FAST = RetryPolicy(attempts=3, backoff=0.0)


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, Recorder]]:
    recorder = Recorder()

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="a page")

    async def private(request: web.Request) -> web.Response:
        return web.Response(
            status=401, text="log in first", headers={"WWW-Authenticate": 'Basic realm="site"'}
        )

    recorder.route("/page", page)
    recorder.route("/private", private)
    async with serve(recorder.app) as url:
        yield url, recorder


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_wrong_proxy_password_is_a_proxy_failure_not_the_sites_401(
    site, scheme: str
) -> None:
    url, recorder = site
    with proxies("127.0.0.3", basic_auth=(USER, PASSWORD)) as (good,):
        wrong = good.replace(PASSWORD, PASSWORD + "-wrong")
        # https: the CONNECT is refused (by the same 401); the site's port speaks plain HTTP,
        # which is never reached.
        target = f"{url.replace('http://', f'{scheme}://')}/page"
        provider = ProxyProviderFromList([wrong])
        async with HttpClient(HttpConfig(retry=FAST), proxy_provider=provider) as http:
            with pytest.raises(NoProxyAvailable) as refused:
                await http.get(target)
            assert http.stats.proxies[wrong.split("@")[1]].errors["proxy"] == 1
    assert isinstance(refused.value, ConnectionFailed)  # not an HTTP status of the site
    assert "401" in str(refused.value)
    assert PASSWORD not in str(refused.value)
    assert recorder.hits == []  # the site never saw the request


async def test_a_proxy_refusing_the_login_is_left_for_one_that_accepts_it(site) -> None:
    url, recorder = site
    with proxies("127.0.0.3", "127.0.0.4", basic_auth=(USER, PASSWORD)) as (good, other):
        wrong = other.replace(PASSWORD, PASSWORD + "-wrong")
        provider = ProxyProviderFromList([wrong, good])
        async with HttpClient(HttpConfig(retry=FAST, seed=5), proxy_provider=provider) as http:
            answers = [await http.get(f"{url}/page", session=http.session()) for _ in range(6)]
    assert [a.status for a in answers] == [200] * 6
    assert {hit.peer for hit in recorder.hits} == {"127.0.0.3"}  # only through the good one


async def test_the_sites_own_401_through_the_proxy_stays_the_sites(site) -> None:
    url, recorder = site
    with proxies("127.0.0.3", basic_auth=(USER, PASSWORD)) as (good,):
        provider = ProxyProviderFromList([good])
        async with HttpClient(HttpConfig(retry=FAST), proxy_provider=provider) as http:
            answer = await http.get(f"{url}/private")
    assert answer.status == 401 and answer.body == b"log in first"
    assert [hit.peer for hit in recorder.at("/private")] == ["127.0.0.3"]
