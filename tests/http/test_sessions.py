"""Sessions: cookies, identity and proxy kept together; smart rotation; bans and CAPTCHAs.

Real tinyproxy processes bound to 127.0.0.2 and 127.0.0.3 stand for two exit IPs: the test
server knows which one a request came through from its peer address, and answers by it (a
"bad" IP gets 500s, a "banned" one 403s).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web

from scrapeflow.errors import Banned, CaptchaDetected, NoProxyAvailable
from scrapeflow.http import (
    IDENTITIES,
    HostPolicy,
    HttpClient,
    HttpConfig,
    RetryPolicy,
    ScrapeSession,
    proxy_label,
)
from scrapeflow.proxies import ProxyProviderFromList
from scrapeflow.sandbox import CAPTCHA_MARKER, FeedSite, Hostility, SandboxState, header_problem
from scrapeflow.sandbox import serve as serve_app
from tests._tinyproxy import free_port
from tests.http import Recorder, proxies, until

BAD, GOOD = "127.0.0.2", "127.0.0.3"
FAST = RetryPolicy(attempts=4, backoff=0.0)


class Site:
    """Answers by the client's IP (``status_for``) on ``/by-peer``; cookies on ``/cookie``."""

    def __init__(self) -> None:
        self.status_for: dict[str, int] = {}
        self.captchas_left: Counter[str] = Counter()
        self.barrier = 0  # /by-peer holds its answers until this many requests are in

    async def by_peer(self, request: web.Request) -> web.Response:
        status = self.status_for.get(request.remote or "", 200)
        if self.barrier:
            await until(lambda: self.arrived >= self.barrier)
        return web.Response(status=status, text=f"{status} for {request.remote}")

    async def set_cookie(self, request: web.Request) -> web.Response:
        response = web.Response(text="set")
        response.set_cookie("sid", request.match_info["value"])
        return response

    async def echo_cookie(self, request: web.Request) -> web.Response:
        return web.Response(text=request.cookies.get("sid", "-"))

    async def captcha(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "always" or self.captchas_left[name] > 0:
            self.captchas_left[name] -= 1
            return web.Response(
                text=f"<html><h2>{CAPTCHA_MARKER}</h2></html>", content_type="text/html"
            )
        return web.Response(text="<html><article>real</article></html>", content_type="text/html")

    arrived = 0


def refuse_captcha(body: bytes) -> None:
    if CAPTCHA_MARKER.encode() in body:
        raise RuntimeError("CAPTCHA page")


@pytest.fixture(scope="module")
def two_proxies() -> Iterator[dict[str, str]]:
    """tinyproxy URLs by the address they connect from."""
    with proxies(BAD, GOOD) as urls:
        yield dict(zip((BAD, GOOD), urls, strict=True))


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, Site, Recorder]]:
    recorder = Recorder()
    s = Site()

    async def by_peer(request: web.Request) -> web.Response:
        s.arrived += 1
        return await s.by_peer(request)

    recorder.route("/by-peer", by_peer)
    recorder.route("/cookie/set/{value}", s.set_cookie)
    recorder.route("/cookie/echo", s.echo_cookie)
    recorder.route("/captcha/{name}", s.captcha)
    async with serve_app(recorder.app) as url:
        yield url, s, recorder


def on_proxy(http: HttpClient, proxy: str) -> ScrapeSession:
    """A new session that the pool put on ``proxy`` (sessions go to the least-used proxy)."""
    for _ in range(10):
        session = http.session()
        if session.proxy == proxy:
            return session
    raise AssertionError(f"no session landed on {proxy}")


def quarantine_events(caplog: pytest.LogCaptureFixture) -> list[dict]:
    return [
        r.msg
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "http.proxy_quarantined"
    ]


async def test_cookies_stay_in_their_session(site) -> None:
    url, _, _ = site
    async with HttpClient() as http:
        alice, bob = http.session(), http.session()
        await http.get(f"{url}/cookie/set/alice", session=alice)
        assert (await http.get(f"{url}/cookie/echo", session=alice)).text() == "alice"
        assert (await http.get(f"{url}/cookie/echo", session=bob)).text() == "-"
        assert (await http.get(f"{url}/cookie/echo")).text() == "-"  # the default session
        await http.get(f"{url}/cookie/set/bob", session=bob)
        assert (await http.get(f"{url}/cookie/echo", session=alice)).text() == "alice"
        assert (await http.get(f"{url}/cookie/echo", session=bob)).text() == "bob"


async def test_a_session_keeps_its_proxy_and_identity(site, two_proxies) -> None:
    url, _, recorder = site
    provider = ProxyProviderFromList(list(two_proxies.values()))
    async with HttpClient(HttpConfig(seed=3), proxy_provider=provider) as http:
        sessions = [http.session() for _ in range(2)]
        for n in range(10):
            for session in sessions:
                response = await http.get(f"{url}/by-peer?n={n}", session=session)
                assert response.proxy == proxy_label(session.proxy)
    seen = {(hit.peer, hit.headers["User-Agent"]) for hit in recorder.hits}
    # Two sessions, two exit IPs (least-used first), each with one browser: two pairs in all.
    assert {peer for peer, _ in seen} == {BAD, GOOD}
    assert len(seen) == 2
    assert sessions[0].identity is not None
    assert {ua for _, ua in seen} <= {i.headers["User-Agent"] for i in IDENTITIES}


async def test_the_proxy_changes_only_after_repeated_failures(site, two_proxies, caplog) -> None:
    """rotate_after=2: two 500s through the bad IP, then the session moves and the bad proxy
    is set aside; re-admitted after its quarantine, its first failure (the re-check) sends it
    back for twice as long; a success through it clears its record."""
    caplog.set_level(logging.INFO, logger="scrapeflow")
    url, s, recorder = site
    s.status_for[BAD] = 500
    bad, good = two_proxies[BAD], two_proxies[GOOD]
    config = HttpConfig(rotate_after=2, quarantine=0.5, retry=FAST)
    async with HttpClient(config, proxy_provider=ProxyProviderFromList([bad, good])) as http:
        pool = http.proxy_pool
        assert pool is not None
        session = on_proxy(http, bad)
        response = await http.get(f"{url}/by-peer", session=session)
        assert (response.status, response.attempts) == (200, 3)
        assert [hit.peer for hit in recorder.hits] == [BAD, BAD, GOOD]
        assert session.proxy == good  # moved, and it stays there
        assert pool.is_quarantined(bad)
        assert [e["seconds"] for e in quarantine_events(caplog)] == [0.5]
        assert [e["proxy"] for e in quarantine_events(caplog)] == [proxy_label(bad)]

        await until(lambda: not pool.is_quarantined(bad))  # re-admitted
        recorder.hits.clear()
        again = on_proxy(http, bad)  # the least-used proxy again
        response = await http.get(f"{url}/by-peer", session=again)
        assert response.status == 200
        assert [hit.peer for hit in recorder.hits] == [BAD, GOOD]  # one failed re-check
        assert [e["seconds"] for e in quarantine_events(caplog)] == [0.5, 1.0]

        await until(lambda: not pool.is_quarantined(bad), timeout=5)
        s.status_for.clear()  # the IP works again
        recorder.hits.clear()
        healed = on_proxy(http, bad)
        assert (await http.get(f"{url}/by-peer", session=healed)).status == 200
        assert [hit.peer for hit in recorder.hits] == [BAD]
        s.status_for[BAD] = 500
        await http.get(f"{url}/by-peer", session=healed)
        await http.get(f"{url}/by-peer", session=healed)
        # Its record was cleared by the success: back to the first quarantine's length.
        assert [e["seconds"] for e in quarantine_events(caplog)] == [0.5, 1.0, 0.5]
        stats = http.stats.proxies[proxy_label(bad)]
        assert stats.errors["status"] == 5
        assert stats.ok == 1


async def test_a_session_whose_only_proxy_was_set_aside_comes_back(site, two_proxies) -> None:
    """No proxy is usable for a while: requests are refused (never sent directly), and the
    session uses the proxy again once its quarantine is over."""
    url, s, recorder = site
    s.status_for[BAD] = 500
    config = HttpConfig(rotate_after=2, quarantine=0.3, retry=RetryPolicy(attempts=2, backoff=0))
    provider = ProxyProviderFromList([two_proxies[BAD]])
    async with HttpClient(config, proxy_provider=provider) as http:
        assert (await http.get(f"{url}/by-peer")).status == 500  # twice: quarantined
        with pytest.raises(NoProxyAvailable) as caught:
            await http.get(f"{url}/by-peer")
        assert "500" in str(caught.value)  # the last failure is named
        s.status_for.clear()
        await until(lambda: not http.proxy_pool.is_quarantined(two_proxies[BAD]))
        assert (await http.get(f"{url}/by-peer")).status == 200
    assert [hit.peer for hit in recorder.hits] == [BAD, BAD, BAD]  # never direct


async def test_concurrent_failures_quarantine_a_proxy_once(site, two_proxies, caplog) -> None:
    """Requests in flight through a proxy that dies all fail; that is one strike, not one each
    (each would double its quarantine)."""
    caplog.set_level(logging.INFO, logger="scrapeflow")
    url, _, recorder = site
    dead = f"http://127.0.0.1:{free_port()}"
    config = HttpConfig(quarantine=30.0, retry=FAST)
    provider = ProxyProviderFromList([dead, two_proxies[GOOD]])
    async with HttpClient(config, proxy_provider=provider) as http:
        sessions = [http.session() for _ in range(6)]
        on_dead = [s for s in sessions if s.proxy == dead]
        assert len(on_dead) == 3
        answers = await asyncio.gather(
            *(http.get(f"{url}/by-peer?n={n}", session=s) for n, s in enumerate(on_dead * 3))
        )
        assert all(s.proxy == two_proxies[GOOD] for s in on_dead)
    assert [a.status for a in answers] == [200] * 9
    assert [e["seconds"] for e in quarantine_events(caplog)] == [30.0]
    assert {hit.peer for hit in recorder.hits} == {GOOD}


async def test_a_ban_retires_the_session_and_the_request_goes_through_a_new_one(
    site, two_proxies
) -> None:
    url, s, recorder = site
    s.status_for[BAD] = 403
    provider = ProxyProviderFromList([two_proxies[BAD], two_proxies[GOOD]])
    async with HttpClient(HttpConfig(retry=FAST), proxy_provider=provider) as http:
        session = on_proxy(http, two_proxies[BAD])
        identity = session.identity
        await http.get(f"{url}/cookie/set/before-ban", session=session)
        response = await http.get(f"{url}/by-peer", session=session)
        assert (response.status, response.attempts) == (200, 2)
        assert session.retired == 1
        assert session.identity is not identity
        assert session.proxy == two_proxies[GOOD]
        assert http.proxy_pool.is_quarantined(two_proxies[BAD])  # a banned proxy is set aside
        assert (await http.get(f"{url}/cookie/echo", session=session)).text() == "-"
        stats = http.stats.host(url.removeprefix("http://"))
        assert (stats.bans, stats.retries) == (1, 1)
    banned, retried = recorder.at("/by-peer")
    assert (banned.peer, retried.peer) == (BAD, GOOD)
    assert banned.headers.get("Cookie") == "sid=before-ban"
    assert "Cookie" not in retried.headers  # a new cookie jar
    assert banned.headers["User-Agent"] != retried.headers["User-Agent"]  # a new identity


async def test_requests_banned_together_retire_their_session_once(site, two_proxies) -> None:
    url, s, recorder = site
    s.status_for[BAD] = 403
    s.barrier = 4  # the four 403s are answered together, once all four have arrived
    provider = ProxyProviderFromList([two_proxies[BAD], two_proxies[GOOD]])
    async with HttpClient(HttpConfig(retry=FAST), proxy_provider=provider) as http:
        session = on_proxy(http, two_proxies[BAD])
        answers = await asyncio.gather(
            *(http.get(f"{url}/by-peer?n={n}", session=session) for n in range(4))
        )
        assert session.retired == 1  # one burnt session, one new one, not four in a row
        assert http.stats.host(url.removeprefix("http://")).bans == 4
    assert [a.status for a in answers] == [200] * 4
    assert Counter(hit.peer for hit in recorder.hits) == Counter({BAD: 4, GOOD: 4})


async def test_a_banned_post_is_not_sent_again(site, two_proxies) -> None:
    url, s, recorder = site
    s.status_for[BAD] = 403
    provider = ProxyProviderFromList([two_proxies[BAD], two_proxies[GOOD]])
    async with HttpClient(HttpConfig(retry=FAST), proxy_provider=provider) as http:
        session = on_proxy(http, two_proxies[BAD])
        with pytest.raises(Banned) as caught:
            await http.request("POST", f"{url}/by-peer", data=b"transfer", session=session)
        assert session.retired == 1  # burnt all the same: the next request starts afresh
    assert caught.value.attempts == 1
    assert [(hit.method, hit.peer) for hit in recorder.hits] == [("POST", BAD)]


async def test_a_captcha_retires_the_session_and_is_retried(site) -> None:
    url, s, recorder = site
    s.captchas_left["once"] = 1
    async with HttpClient(HttpConfig(retry=FAST)) as http:
        session = http.session()
        response = await http.get(f"{url}/captcha/once", session=session, validate=refuse_captcha)
        stats = http.stats.host(url.removeprefix("http://"))
        assert (stats.captchas, stats.retries, stats.ok) == (1, 1, 1)
        assert session.retired == 1
    assert response.text() == "<html><article>real</article></html>"
    assert response.attempts == 2
    first, second = recorder.at("/captcha/once")
    assert first.headers["User-Agent"] != second.headers["User-Agent"]


async def test_captcha_detected_when_the_ban_retries_are_spent(site) -> None:
    url, _, recorder = site
    config = HttpConfig(retry=RetryPolicy(attempts=10, backoff=0.0, ban_retries=2))
    async with HttpClient(config) as http:
        session = http.session()
        with pytest.raises(CaptchaDetected) as caught:
            await http.get(f"{url}/captcha/always", session=session, validate=refuse_captcha)
        assert session.retired == 3
        assert http.stats.host(url.removeprefix("http://")).captchas == 3
    assert isinstance(caught.value, Banned)  # the type carries the policy
    assert caught.value.attempts == 3
    assert isinstance(caught.value.__cause__, RuntimeError)  # the validator's own error
    assert str(caught.value.__cause__) == "CAPTCHA page"
    assert len(recorder.at("/captcha/always")) == 3
    assert len({hit.headers["User-Agent"] for hit in recorder.hits}) >= 2


async def test_is_ban_recognises_a_ban_page(site) -> None:
    url, _, _ = site

    def is_ban(response) -> bool:
        return b"for 127.0.0.1" in response.body and "n=0" in response.url

    config = HttpConfig(retry=RetryPolicy(backoff=0.0, ban_retries=0))
    async with HttpClient(config, is_ban=is_ban) as http:
        with pytest.raises(Banned) as caught:
            await http.get(f"{url}/by-peer?n=0")
        assert (await http.get(f"{url}/by-peer?n=1")).status == 200
        assert http.stats.host(url.removeprefix("http://")).bans == 1
    assert "banned (HTTP 200)" in str(caught.value)


def test_every_identity_is_a_coherent_browser() -> None:
    assert len(IDENTITIES) >= 5
    for identity in IDENTITIES:
        assert header_problem(dict(identity.headers)) is None, identity.name
    assert len({i.headers["User-Agent"] for i in IDENTITIES}) == len(IDENTITIES)


async def test_the_feed_accepts_the_client_and_refuses_aiohttp() -> None:
    feed = FeedSite(SandboxState(seed=0, admin_token="t"), hostility=Hostility(check_headers=True))
    async with serve_app(feed.app()) as url:
        async with HttpClient(HttpConfig(seed=0)) as http:
            sessions = [http.session() for _ in range(40)]
            answers = [await http.get(f"{url}/u/user0001", session=s) for s in sessions]
            names = {s.identity.name for s in sessions if s.identity}
        assert [a.status for a in answers] == [200] * 40
        assert names == {i.name for i in IDENTITIES}  # every identity was tried, all passed
        assert "header_blocks" not in feed.guard.stats

        config = HttpConfig(identities="none", retry=RetryPolicy(ban_retries=0))
        async with HttpClient(config) as naive:
            with pytest.raises(Banned):
                await naive.get(f"{url}/u/user0001")
        assert feed.guard.stats["header_blocks"] == 1


async def test_pooled_sessions_steer_work_away_from_a_stuck_proxy(
    tmp_path, site, two_proxies
) -> None:
    """Bulk work spreads over the proxies by load, not in turn: while one exit IP is stuck,
    the tasks flow through the other instead of piling up behind it."""
    from scrapeflow.executor import execute_async
    from scrapeflow.scrape import scrape

    url, s, recorder = site
    release = asyncio.Event()

    async def stuck_for_bad(request: web.Request) -> web.Response:
        if request.remote == BAD:
            await asyncio.wait_for(release.wait(), timeout=20)
        return web.Response(text="page")

    # A route of its own: the fixture's app is frozen, its handlers are not; swap one in.
    s.by_peer = stuck_for_bad  # type: ignore[method-assign]
    provider = ProxyProviderFromList([two_proxies[BAD], two_proxies[GOOD]])
    tasks = {f"t{n}": {"url": f"{url}/by-peer?n={n}"} for n in range(24)}
    async with HttpClient(HttpConfig(retry=FAST), proxy_provider=provider) as http:
        run = asyncio.create_task(
            execute_async([scrape], tmp_path, tasks, max_parallelism=4, http=http)
        )
        await until(lambda: Counter(hit.peer for hit in recorder.hits)[GOOD] >= 20, timeout=15)
        through_good_while_stuck = Counter(h.peer for h in recorder.hits)[GOOD]
        release.set()
        done = await run
    assert sorted(done) == sorted(tasks)
    assert through_good_while_stuck >= 20


async def test_a_post_after_a_get_through_tinyproxy_goes_through(two_proxies) -> None:
    """tinyproxy closes the connection after each answer; the POST that follows a GET is written
    to that dead pooled connection and never reaches the server: it is sent again, once."""
    posts = []

    async def form(request: web.Request) -> web.Response:
        return web.Response(text="<form>")

    async def login(request: web.Request) -> web.Response:
        posts.append(dict(await request.post()))
        return web.Response(text="welcome")

    app = web.Application()
    app.router.add_get("/login", form)
    app.router.add_post("/login", login)
    provider = ProxyProviderFromList([two_proxies[GOOD]])
    async with serve_app(app) as url, HttpClient(HttpConfig(), proxy_provider=provider) as http:
        session = http.session()
        for _ in range(3):
            assert (await http.request("GET", f"{url}/login", session=session)).status == 200
            answer = await http.request("POST", f"{url}/login", session=session, data={"u": "a"})
            assert answer.text() == "welcome"
    assert posts == [{"u": "a"}] * 3


async def test_bulk_work_is_shared_by_proxy_not_by_session(site, two_proxies) -> None:
    """Pooled sessions gathered on one proxy (CAPTCHAs move them about) do not give it the
    larger share of the work: each piece goes to the proxy with the least in progress."""
    url, s, recorder = site
    s.barrier = 8  # answers wait until all eight are in: what is in progress stays put
    bad, good = two_proxies[BAD], two_proxies[GOOD]
    async with HttpClient(
        HttpConfig(retry=FAST), proxy_provider=ProxyProviderFromList([bad, good])
    ) as http:
        pooled = {http.pooled_session() for _ in range(4)}  # two sessions per proxy
        next(p for p in pooled if p.proxy == good).rotate_proxy()
        assert sorted(p.proxy == bad for p in pooled) == [False, True, True, True]
        calls = []
        for n in range(8):
            session = http.pooled_session()
            calls.append(asyncio.create_task(http.get(f"{url}/by-peer?n={n}", session=session)))
            await asyncio.sleep(0)  # the request is counted in progress before the next
        answers = await asyncio.gather(*calls)
    assert [a.status for a in answers] == [200] * 8
    assert Counter(hit.peer for hit in recorder.hits) == {BAD: 4, GOOD: 4}


async def test_captchas_are_no_strike_against_the_proxy(site, two_proxies) -> None:
    """A CAPTCHA is the site judging a session, and the proxy relayed it: three in a row
    retire three sessions but do not set the proxy aside (rotate_after is 3)."""
    url, s, recorder = site
    s.captchas_left["thrice"] = 3
    provider = ProxyProviderFromList([two_proxies[GOOD]])
    async with HttpClient(HttpConfig(retry=FAST), proxy_provider=provider) as http:
        response = await http.get(f"{url}/captcha/thrice", validate=refuse_captcha)
        assert not http.proxy_pool.is_quarantined(two_proxies[GOOD])
    assert (response.status, response.attempts) == (200, 4)
    assert [hit.peer for hit in recorder.hits] == [GOOD] * 4


async def test_requests_waiting_for_an_ip_banned_meanwhile_go_through_another(
    site, two_proxies
) -> None:
    """One request at a time per IP: while the first is out, two more wait for the IP's
    place. The first comes back banned: the two waiting go through the other IP, and the
    banned one is not sent to again."""
    url, s, recorder = site
    s.status_for[BAD] = 403
    config = HttpConfig(host=HostPolicy(concurrency=1), retry=FAST)
    provider = ProxyProviderFromList([two_proxies[BAD], two_proxies[GOOD]])
    async with HttpClient(config, proxy_provider=provider) as http:
        session = on_proxy(http, two_proxies[BAD])
        answers = await asyncio.gather(
            *(http.get(f"{url}/by-peer?n={n}", session=session) for n in range(3))
        )
    assert [a.status for a in answers] == [200] * 3
    assert Counter(hit.peer for hit in recorder.hits) == {BAD: 1, GOOD: 3}


async def test_a_failure_sent_before_the_proxy_last_worked_is_not_in_a_row(
    site, two_proxies
) -> None:
    """Requests through one proxy interleave: a 500 to a request sent before a success came
    back does not join the failures after it, so two more 500s (rotate_after is 3) leave the
    proxy in use."""
    url, s, recorder = site
    release = asyncio.Event()

    async def slow_500(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(status=500, text="late error")

    s.by_peer = slow_500  # type: ignore[method-assign]
    good = two_proxies[GOOD]
    config = HttpConfig(retry=RetryPolicy(attempts=1))
    async with HttpClient(config, proxy_provider=ProxyProviderFromList([good])) as http:
        late = asyncio.create_task(http.get(f"{url}/by-peer"))
        await until(lambda: len(recorder.hits) == 1)  # sent, and held
        s.captchas_left["ok"] = 0
        assert (await http.get(f"{url}/captcha/ok")).status == 200  # the proxy works
        release.set()
        assert (await late).status == 500
        del s.by_peer  # the class's handler again
        s.status_for[GOOD] = 500
        for _ in range(2):
            assert (await http.get(f"{url}/by-peer")).status == 500
        assert not http.proxy_pool.is_quarantined(good)


async def test_a_proxy_left_without_sessions_gets_one_back(site, two_proxies) -> None:
    """CAPTCHAs moved every pooled session off one proxy: the next piece of bulk work moves
    one back there, rather than leaving that IP unused."""
    url, s, recorder = site
    s.barrier = 4
    bad, good = two_proxies[BAD], two_proxies[GOOD]
    async with HttpClient(
        HttpConfig(retry=FAST), proxy_provider=ProxyProviderFromList([bad, good])
    ) as http:
        pooled = {http.pooled_session() for _ in range(4)}
        for session in pooled:
            if session.proxy == good:
                session.rotate_proxy()
        assert {session.proxy for session in pooled} == {bad}
        calls = []
        for n in range(4):
            session = http.pooled_session()
            calls.append(asyncio.create_task(http.get(f"{url}/by-peer?n={n}", session=session)))
            await asyncio.sleep(0)
        answers = await asyncio.gather(*calls)
    assert [a.status for a in answers] == [200] * 4
    assert Counter(hit.peer for hit in recorder.hits) == {BAD: 2, GOOD: 2}


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_sessions_for_a_site_spread_evenly_over_the_proxies(seed: int) -> None:
    """A site limits each IP apart, so its sessions spread over the proxies by their count for
    it: customers' three banks in turn, each bank's sessions end up one apart at most."""
    exits = [f"http://127.0.0.{n}:3128" for n in range(2, 10)]
    sites = ("formbank:443", "apibank:443", "legacybank:443")
    async with HttpClient(
        HttpConfig(seed=seed), proxy_provider=ProxyProviderFromList(exits)
    ) as http:
        sessions = [http.session(site=site) for _ in range(50) for site in sites]
        for site in sites:
            per_proxy = Counter(s.proxy for s in sessions if s.site == site)
            assert set(per_proxy) == set(exits)
            assert max(per_proxy.values()) - min(per_proxy.values()) <= 1, (site, per_proxy)
        everyone = Counter(s.proxy for s in sessions)
        assert max(everyone.values()) - min(everyone.values()) <= 1  # and in all
        for session in sessions[:30]:
            await session.retire()  # a ban: another proxy, still spread for its site
        moved = Counter(s.proxy for s in sessions if s.site == "apibank:443")
        assert max(moved.values()) - min(moved.values()) <= 2


async def test_a_closed_session_is_let_go_and_an_open_one_closed_with_the_client() -> None:
    """A client shared by a service's jobs for days makes sessions without end: each one its
    scraper closed is freed (identity, cookies, aiohttp session); one still open is closed when
    the client is."""
    async with HttpClient(HttpConfig()) as http:
        sessions = [http.session() for _ in range(50)]
        freed = [weakref.ref(session) for session in sessions]
        for session in sessions:
            await session.close()
        del sessions, session
        gc.collect()
        assert [ref for ref in freed if ref() is not None] == []
        still_open = http.session()
        assert not still_open.http.closed
    assert still_open.http.closed
