"""``scrape`` through real proxies: tinyproxy processes bound to other loopback addresses.

Each tinyproxy opens its connections to the site from its own address (127.0.0.2 ... 127.0.0.5),
so the site's record of who connected proves which proxy, if any, a request went through.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler

from scrapeflow.executor import execute_async
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.proxies import ProxyProviderFromList
from scrapeflow.sandbox import PlainSite, SiteConfig, serve
from scrapeflow.scrape import scrape
from tests._tinyproxy import free_port, run_tinyproxy

PASSWORD = "tiny-s3cret-9041"


def read_status(directory: Path, key: str) -> dict:
    """The task's status file, as a user would read it."""
    return json.loads((directory / f"{key}.status.json").read_text())


@dataclass
class WatchedSite:
    """The plain site, plus the peer address of every request it answered, by path."""

    site: PlainSite
    url: str
    peers: dict[str, list[str | None]] = field(default_factory=lambda: defaultdict(list))

    def page_url(self, n: int) -> str:
        return f"{self.url}/page/{n}"

    def all_peers(self) -> set[str | None]:
        return {peer for peers in self.peers.values() for peer in peers}


@pytest.fixture
async def watched_site() -> AsyncIterator[WatchedSite]:
    site = PlainSite(SiteConfig(pages=100))
    app = site.app()
    watched = WatchedSite(site, "")

    @web.middleware
    async def record_peer(request: web.Request, handler: Handler) -> web.StreamResponse:
        watched.peers[request.path].append(request.remote)
        return await handler(request)

    app.middlewares.append(record_peer)
    async with serve(app) as url:
        watched.url = url
        yield watched


async def test_scrape_goes_through_the_proxy(tmp_path: Path, watched_site: WatchedSite) -> None:
    with run_tinyproxy("127.0.0.2") as proxy:
        done = await execute_async(
            [scrape],
            tmp_path,
            {"p3": {"url": watched_site.page_url(3)}},
            proxy_provider=ProxyProviderFromList([proxy]),
        )
    assert done == ["p3"]
    assert (tmp_path / "p3.scrape").read_text() == watched_site.site.page_html(3)
    assert watched_site.peers["/page/3"] == ["127.0.0.2"]  # not 127.0.0.1: the proxy connected
    via = read_status(tmp_path, "p3")["scrape"]["response_headers"]["Via"]
    assert "tinyproxy" in via


async def test_without_a_provider_the_site_sees_us_directly(
    tmp_path: Path, watched_site: WatchedSite
) -> None:
    """The control for the test above: the peer address does tell the two apart."""
    assert await execute_async([scrape], tmp_path, {"p3": {"url": watched_site.page_url(3)}})
    assert watched_site.peers["/page/3"] == ["127.0.0.1"]


async def test_requests_are_spread_over_the_proxies(
    tmp_path: Path, watched_site: WatchedSite
) -> None:
    tasks = {f"p{n}": {"url": watched_site.page_url(n)} for n in range(30)}
    with run_tinyproxy("127.0.0.4") as first, run_tinyproxy("127.0.0.5") as second:
        provider = ProxyProviderFromList([first, second])
        done = await execute_async(
            [scrape], tmp_path, tasks, max_parallelism=4, proxy_provider=provider
        )
    assert sorted(done) == sorted(tasks)
    # 30 random picks between two proxies: both are used (one alone has odds 2 in 10^9).
    assert watched_site.all_peers() == {"127.0.0.4", "127.0.0.5"}


async def test_proxy_credentials_work_and_stay_out_of_files_and_logs(
    tmp_path: Path, watched_site: WatchedSite, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="scrapeflow")
    good_dir, refused_dir = tmp_path / "good", tmp_path / "refused"
    with run_tinyproxy("127.0.0.3", basic_auth=("scraper", PASSWORD)) as proxy:
        assert f"scraper:{PASSWORD}@" in proxy
        done = await execute_async(
            [scrape],
            good_dir,
            {"p5": {"url": watched_site.page_url(5)}},
            proxy_provider=ProxyProviderFromList([proxy]),
        )
        wrong = proxy.replace(PASSWORD, f"{PASSWORD}-wrong")
        refused = await execute_async(
            [scrape],
            refused_dir,
            {"p6": {"url": watched_site.page_url(6)}},
            proxy_provider=ProxyProviderFromList([wrong]),
        )

    assert done == ["p5"]
    assert watched_site.peers["/page/5"] == ["127.0.0.3"]
    assert refused == []  # tinyproxy refused the wrong password; the site never saw the request
    assert "/page/6" not in watched_site.peers
    error = read_status(refused_dir, "p6")["scrape_status"]
    # tinyproxy 1.11 refuses a wrong login with a 401 of its own (not the standard 407): a
    # proxy failure (the proxy is set aside, another would be tried), not the site's answer.
    assert error.startswith("ERROR NoProxyAvailable::no good proxy left")
    assert "proxy refused the login" in error and "401" in error

    assert "run.start" in caplog.text  # the logs were captured, so the next check means something
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"p5.status.json", "p5.scrape", "p6.status.json"}
    for text in [caplog.text, *(p.read_text(errors="replace") for p in written)]:
        assert PASSWORD not in text


async def test_a_dead_proxy_is_quarantined_and_the_tasks_go_through_the_good_one(
    tmp_path: Path, watched_site: WatchedSite
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    tasks = {f"p{n}": {"url": watched_site.page_url(n)} for n in range(20)}
    with run_tinyproxy("127.0.0.2") as good:
        provider = ProxyProviderFromList([dead, good])
        async with HttpClient(HttpConfig(max_connections=2), proxy_provider=provider) as http:
            done = await execute_async([scrape], tmp_path, tasks, http=http)
            assert http.proxy_pool.is_quarantined(dead)
            assert not http.proxy_pool.is_quarantined(good)
            assert http.stats.proxies[dead.removeprefix("http://")].errors["proxy"] >= 1
    assert sorted(done) == sorted(tasks)
    assert provider.bad_proxies == set()  # set aside for a while, not condemned
    assert watched_site.all_peers() == {"127.0.0.2"}
    for key in tasks:
        assert read_status(tmp_path, key)["scrape_status"] == "SUCCESS"


async def test_a_proxy_answering_407_is_dropped_never_bypassed(
    tmp_path: Path, watched_site: WatchedSite
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=407, headers={"Proxy-Authenticate": 'Basic realm="p"'})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    async with serve(app) as refusing_proxy:
        provider = ProxyProviderFromList([refusing_proxy.replace("http://", "http://u:secret@")])
        done = await execute_async(
            [scrape], tmp_path, {"p1": {"url": watched_site.page_url(1)}}, proxy_provider=provider
        )
    assert done == []
    error = read_status(tmp_path, "p1")["scrape_status"]
    assert error.startswith("ERROR NoProxyAvailable::no good proxy left")
    assert "407" in error
    assert "secret" not in error
    assert "/page/1" not in watched_site.peers
