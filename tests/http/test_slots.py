"""Per-host slots: ``Retry-After``, adaptive rate (AIMD), per-host concurrency and fairness.

No assertion here is on the client's clock: gaps are measured by the server when it receives
requests, and fairness is an ordering (the fast host finishes while the slow one is held).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from scrapeflow.http import HostPolicy, HttpClient, HttpConfig, RetryPolicy
from scrapeflow.proxies import ProxyProviderFromList
from scrapeflow.sandbox import serve
from tests.http import Recorder, proxies, until

NO_RETRY = RetryPolicy(attempts=1, backoff=0.0)


class Limited:
    """``/limited``: the first request gets 429 with ``Retry-After: 1``; the others 200."""

    def __init__(self) -> None:
        self.throttled = 0
        self.release = asyncio.Event()

    async def limited(self, request: web.Request) -> web.Response:
        if self.throttled == 0:
            self.throttled += 1
            return web.Response(status=429, text="slow down", headers={"Retry-After": "1"})
        return web.Response(text="ok")

    async def ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def throttle(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["status"]), text="slow down")

    async def held(self, request: web.Request) -> web.Response:
        await self.release.wait()
        return web.Response(text="ok")


@pytest.fixture
async def limited() -> AsyncIterator[tuple[str, Recorder, Limited]]:
    recorder = Recorder()
    site = Limited()
    recorder.route("/limited", site.limited)
    recorder.route("/ok/{n}", site.ok)
    recorder.route("/throttle/{status}", site.throttle)
    recorder.route("/held/{n}", site.held)
    async with serve(recorder.app) as url:
        yield url, recorder, site
        site.release.set()


async def test_retry_after_holds_the_retry(limited) -> None:
    url, recorder, _ = limited
    async with HttpClient(HttpConfig(retry=RetryPolicy(attempts=2, backoff=0.0))) as http:
        response = await http.get(f"{url}/limited")
    assert (response.status, response.attempts) == (200, 2)
    first, second = recorder.at("/limited")
    assert second.arrived - first.arrived >= 0.9  # measured by the server


async def test_retry_after_holds_every_request_to_the_host(limited) -> None:
    url, recorder, _ = limited
    key = url.removeprefix("http://")
    config = HttpConfig(host=HostPolicy(concurrency=4), retry=NO_RETRY)
    async with HttpClient(config) as http:
        throttled = await http.get(f"{url}/limited")
        slot = http.hosts.slots[key]
        assert (slot.limit, slot.delay) == (2.0, 0.05)  # cut at once: halved, paced
        other = await http.get(f"{url}/ok/1")  # another URL of the same host: held too
        assert (throttled.status, other.status) == (429, 200)
        (sent_429,) = recorder.at("/limited")
        (held,) = recorder.at("/ok/1")
        assert held.arrived - sent_429.arrived >= 0.9
        for n in range(2, 12):
            assert (await http.get(f"{url}/ok/{n}")).status == 200
        # Successes won the rate back, never beyond the configured policy.
        assert (slot.limit, slot.delay) == (4.0, 0.0)


async def test_a_burst_of_throttles_cuts_the_rate_once(limited) -> None:
    """Eight answers to eight requests sent together are one signal, not eight: the slot halves
    once (TCP-like), it does not collapse to one request every max_delay."""
    url, _, _ = limited
    config = HttpConfig(host=HostPolicy(concurrency=8), retry=NO_RETRY)
    async with HttpClient(config) as http:
        answers = await asyncio.gather(*(http.get(f"{url}/throttle/429") for _ in range(8)))
        slot = http.hosts.slots[url.removeprefix("http://")]
        assert [a.status for a in answers] == [429] * 8
        assert (slot.limit, slot.delay) == (4.0, 0.05)
        # A later signal, from a request sent after the cut, cuts again.
        await http.get(f"{url}/throttle/503")
        assert (slot.limit, slot.delay) == (2.0, 0.1)


async def test_a_500_does_not_slow_the_host(limited) -> None:
    url, _, _ = limited
    async with HttpClient(HttpConfig(host=HostPolicy(concurrency=4), retry=NO_RETRY)) as http:
        await http.get(f"{url}/throttle/500")
        slot = http.hosts.slots[url.removeprefix("http://")]
        assert (slot.limit, slot.delay) == (4.0, 0.0)


async def test_a_non_adaptive_host_keeps_its_rate_but_honours_retry_after(limited) -> None:
    url, recorder, _ = limited
    config = HttpConfig(host=HostPolicy(concurrency=4, adaptive=False), retry=NO_RETRY)
    async with HttpClient(config) as http:
        await http.get(f"{url}/limited")
        slot = http.hosts.slots[url.removeprefix("http://")]
        assert (slot.limit, slot.delay) == (4.0, 0.0)
        await http.get(f"{url}/ok/1")
    assert recorder.at("/ok/1")[0].arrived - recorder.at("/limited")[0].arrived >= 0.9


async def test_per_host_delay_spaces_requests(limited) -> None:
    url, recorder, _ = limited
    config = HttpConfig(host=HostPolicy(concurrency=8, delay=0.2, jitter=0.0), retry=NO_RETRY)
    async with HttpClient(config) as http:
        await asyncio.gather(*(http.get(f"{url}/ok/{n}") for n in range(4)))
    arrivals = sorted(hit.arrived for hit in recorder.hits)
    assert len(arrivals) == 4
    # Measured by the server, against the first start's grid (a start the machine ran late
    # comes near the next one, on time); nothing asserted on an upper bound.
    since_first = [t - arrivals[0] for t in arrivals]
    assert all(t >= k * 0.2 * 0.9 for k, t in enumerate(since_first)), since_first


async def test_a_host_policy_applies_through_proxies_too(limited) -> None:
    """``hosts={"host:port": policy}`` names the site; going through a proxy does not escape it."""
    url, recorder, site = limited
    key = url.removeprefix("http://")
    config = HttpConfig(hosts={key: HostPolicy(concurrency=1)}, retry=NO_RETRY)
    with proxies("127.0.0.2") as (proxy,):
        async with HttpClient(config, proxy_provider=ProxyProviderFromList([proxy])) as http:
            calls = [asyncio.create_task(http.get(f"{url}/held/{n}")) for n in range(3)]
            await until(lambda: len(recorder.hits) >= 1)
            await asyncio.sleep(0.3)  # give a wrongly admitted second request time to arrive
            in_flight_while_held = recorder.in_flight["held"]
            site.release.set()
            answers = await asyncio.gather(*calls)
    assert in_flight_while_held == 1
    assert [a.status for a in answers] == [200] * 3
    assert recorder.max_in_flight["held"] == 1
    assert {hit.peer for hit in recorder.hits} == {"127.0.0.2"}


async def test_a_slow_host_does_not_hold_up_a_fast_one() -> None:
    """Per-host concurrency 4 under a global cap of 6: the slow host can take 4 places, never
    all of them, so every fast-host request completes while the slow host is still busy."""
    slow, fast = Recorder(), Recorder()
    release = asyncio.Event()

    async def slow_page(request: web.Request) -> web.Response:
        # As slow as it takes: it answers once the test has seen the fast host through (or
        # after 20 s, when a fast host held up behind it would come last and fail the test).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(release.wait(), timeout=20.0)
        return web.Response(text="slow")

    async def fast_page(request: web.Request) -> web.Response:
        return web.Response(text="fast")

    slow.route("/s/{n}", slow_page)
    fast.route("/f/{n}", fast_page)
    config = HttpConfig(max_connections=6, host=HostPolicy(concurrency=4), retry=NO_RETRY)
    order: list[str] = []

    async def get(http: HttpClient, url: str, tag: str) -> None:
        response = await http.get(url)
        assert response.status == 200
        order.append(tag)

    async with serve(slow.app) as slow_url, serve(fast.app) as fast_url, HttpClient(config) as http:
        slow_calls = [
            asyncio.create_task(get(http, f"{slow_url}/s/{n}", "slow")) for n in range(12)
        ]
        await until(lambda: slow.in_flight["s"] == 4)  # the slow host has all it may have
        fast_calls = [
            asyncio.create_task(get(http, f"{fast_url}/f/{n}", "fast")) for n in range(60)
        ]
        await asyncio.gather(*fast_calls)
        fast_done_while_slow_busy = order.count("fast")
        release.set()
        await asyncio.gather(*slow_calls)
    assert fast_done_while_slow_busy == 60
    assert order[:60] == ["fast"] * 60  # every fast answer before the first slow one
    assert slow.max_in_flight["s"] == 4  # never more than its own concurrency
    assert len(slow.hits) == 12


async def test_a_cancelled_waiter_leaves_the_slot_consistent() -> None:
    """A request cancelled while it waits for a place (a task timeout) raises CancelledError,
    and the slot's count stays right."""
    config = HttpConfig(host=HostPolicy(concurrency=1))
    async with HttpClient(config) as http:
        slot = http.hosts.slot("example.invalid:80")
        await slot.acquire()
        waiting = asyncio.create_task(slot.acquire())
        await asyncio.sleep(0)  # it is queued now
        waiting.cancel()
        slot.release()  # before the cancelled waiter gets to run
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert slot.in_flight == 0
        await asyncio.wait_for(slot.acquire(), timeout=5)  # the place is free
        assert slot.in_flight == 1


async def test_a_lone_503_naming_no_wait_does_not_slow_the_host(limited) -> None:
    """A 503 without ``Retry-After`` among successes is a server error, not a rate signal; two
    in a row (no success between) are, and halve the rate as a 429 does."""
    url, _, _ = limited
    async with HttpClient(HttpConfig(host=HostPolicy(concurrency=4), retry=NO_RETRY)) as http:
        slot = http.hosts.slot(url.removeprefix("http://"))
        for n in range(3):
            assert (await http.get(f"{url}/throttle/503")).status == 503
            assert (await http.get(f"{url}/ok/{n}")).status == 200
        assert (slot.limit, slot.delay) == (4.0, 0.0)
        await http.get(f"{url}/throttle/503")
        await http.get(f"{url}/throttle/503")
        assert (slot.limit, slot.delay) == (2.0, 0.05)


async def test_starts_keep_to_a_grid_whatever_the_jitter(limited) -> None:
    """Jitter makes a start late, never early: the k-th start comes at least k delays less one
    jitter after the first (as the server saw). Not pair by pair: a start the machine ran late
    (the process not scheduled) comes near the next one, on time (CI saw 36 ms, not 45)."""
    url, recorder, _ = limited
    policy = HostPolicy(concurrency=8, delay=0.1, jitter=0.5)
    async with HttpClient(HttpConfig(host=policy, retry=NO_RETRY)) as http:
        await asyncio.gather(*(http.get(f"{url}/ok/{n}") for n in range(12)))
    arrivals = sorted(hit.arrived for hit in recorder.hits)
    assert len(arrivals) == 12
    early = [k for k in range(1, 12) if arrivals[k] - arrivals[0] < (k - 0.5) * 0.1 * 0.9]
    assert early == [], [round(t - arrivals[0], 3) for t in arrivals]


async def test_an_idle_slot_starts_up_to_its_burst_at_once(limited) -> None:
    """With a long delay, a fresh slot of burst 3 sends three requests straight away and holds
    the fourth for its place on the grid; burst 1 (the default) sends one."""
    url, recorder, _ = limited
    for burst in (3, 1):
        recorder.hits.clear()
        policy = HostPolicy(concurrency=8, delay=30.0, burst=burst)
        async with HttpClient(HttpConfig(host=policy, retry=NO_RETRY)) as http:
            calls = [asyncio.create_task(http.get(f"{url}/ok/{n}")) for n in range(4)]
            await until(lambda burst=burst: len(recorder.hits) >= burst)
            await asyncio.sleep(0.3)  # time for a wrongly admitted request to arrive
            assert len(recorder.hits) == burst
            assert sum(call.done() for call in calls) == burst
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)


async def test_a_retry_after_forfeits_the_saved_burst(limited) -> None:
    """After the site said when to come back, the slot resumes at its pace, not in a burst:
    the site counted us as too fast, whatever the client had saved."""
    url, recorder, _ = limited
    policy = HostPolicy(concurrency=8, delay=0.3, jitter=0.0, burst=5, adaptive=False)
    async with HttpClient(HttpConfig(host=policy, retry=NO_RETRY)) as http:
        assert (await http.get(f"{url}/limited")).status == 429
        await asyncio.gather(*(http.get(f"{url}/ok/{n}") for n in range(3)))
    (refused,) = recorder.at("/limited")
    after = sorted(hit.arrived for hit in recorder.hits if hit is not refused)
    assert after[0] - refused.arrived >= 0.9
    assert all(t - after[0] >= k * 0.3 * 0.9 for k, t in enumerate(after))  # on its grid


async def test_a_place_given_back_unused_never_puts_two_starts_on_one_instant() -> None:
    """A request that never went out gives its start back to the grid, but only while no later
    start was handed out: else the next one would share an instant with that later one."""
    config = HttpConfig(host=HostPolicy(concurrency=4, delay=0.05, jitter=0.0))
    async with HttpClient(config) as http:
        slot = http.hosts.slot("example.invalid:80")
        a = await slot.acquire()
        b = await slot.acquire()
        assert a is not None and b is not None and b - a == pytest.approx(0.05)
        slot.release(unused=a)  # b was handed out since: a's start stays used
        c = await slot.acquire()
        assert c is not None and c - b == pytest.approx(0.05)
        slot.release(unused=c)  # the last start handed out: the grid takes it back
        d = await slot.acquire()
        assert d is not None and d - c < 0.04  # at once (c has passed), not c + delay
        slot.release()  # b
        slot.release()  # d
        assert slot.in_flight == 0


async def test_a_declared_site_limit_paces_its_host_unless_the_settings_say_otherwise() -> None:
    """What a scraper declares paces the host and each exit IP's slot, one request of the burst
    in hand; a host the settings name keeps its policy, a slower default delay stays."""
    config = HttpConfig(
        host=HostPolicy(concurrency=8, delay=0.0),
        hosts={"named.example:443": HostPolicy(concurrency=2, delay=1.0)},
    )
    async with HttpClient(config) as http:
        http.hosts.pace("bank.example:443", 10.0, burst=20)
        http.hosts.pace("named.example:443", 10.0, burst=20)
        http.hosts.pace("strict.example:443", 4.0)  # no burst at all: paced under its rate
        bank = http.hosts.slot("bank.example:443").policy
        via_proxy = http.hosts.slot("bank.example:443@127.0.0.2:3128").policy
        assert (bank.delay, bank.burst, bank.concurrency) == (0.1, 19, 8)
        assert via_proxy == bank
        assert http.hosts.slot("named.example:443").policy == HostPolicy(concurrency=2, delay=1.0)
        assert http.hosts.slot("strict.example:443").policy.delay == pytest.approx(0.275)
        assert http.hosts.slot("other.example:443").policy.delay == 0.0
    slower = HttpConfig(host=HostPolicy(delay=0.5))
    async with HttpClient(slower) as http:
        http.hosts.pace("bank.example:443", 10.0, burst=20)
        assert http.hosts.slot("bank.example:443").policy.delay == 0.5
