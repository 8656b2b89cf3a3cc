"""Retries: what is tried again, how often, what the caller gets at the end, and the stats.

Every server here counts what it received, so "retried N times" is what the server saw.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from scrapeflow.errors import (
    ConfigError,
    ConnectionFailed,
    FetchError,
    FetchTimeout,
    RetryBudgetExhausted,
)
from scrapeflow.http import HttpClient, HttpConfig, RetryPolicy
from scrapeflow.sandbox import serve
from tests._tinyproxy import free_port
from tests.http import Recorder

FAST = RetryPolicy(attempts=4, backoff=0.0)  # no waits: these tests are about counts


class Flaky:
    """``/fail-then-ok/{n}/{name}``: ``n`` answers of 503 (or ``?status=``, with
    ``?retry_after=`` as a ``Retry-After`` header), then 200."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.release = asyncio.Event()

    async def fail_then_ok(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.seen[name] += 1
        if self.seen[name] <= int(request.match_info["n"]):
            status = int(request.query.get("status", 503))
            headers = {}
            if "retry_after" in request.query:
                headers["Retry-After"] = request.query["retry_after"]
            return web.Response(status=status, text="try later", headers=headers)
        return web.Response(text=f"ok after {self.seen[name]}")

    async def always(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["status"]), text="no")

    async def hang(self, request: web.Request) -> web.Response:
        # Answers only when the test ends (so the server shuts down at once).
        await self.release.wait()
        return web.Response(text="too late")


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Recorder, Flaky]]:
    flaky = Flaky()
    recorder = Recorder()
    recorder.route("/fail-then-ok/{n}/{name}", flaky.fail_then_ok)
    recorder.route("/always/{status}", flaky.always)
    recorder.route("/hang", flaky.hang)
    async with serve(recorder.app) as url:
        yield url, recorder, flaky
        flaky.release.set()


async def test_5xx_then_success_returns_the_success(server) -> None:
    url, recorder, _ = server
    async with HttpClient(HttpConfig(retry=FAST)) as http:
        response = await http.get(f"{url}/fail-then-ok/2/a")
        stats = http.stats.host(url.removeprefix("http://"))
    assert response.status == 200
    assert response.text() == "ok after 3"
    assert response.attempts == 3
    assert len(recorder.at("/fail-then-ok/2/a")) == 3
    assert (stats.requests, stats.ok, stats.retries, stats.throttled) == (3, 1, 2, 2)


async def test_a_rate_limit_that_says_when_is_waited_out_beyond_the_attempts(server) -> None:
    # Six 429s with Retry-After: 0, two attempts allowed: the waits are not failed attempts.
    url, recorder, _ = server
    path = "/fail-then-ok/6/rl?status=429&retry_after=0"
    async with HttpClient(HttpConfig(retry=RetryPolicy(attempts=2, backoff=0.0))) as http:
        response = await http.get(f"{url}{path}")
    assert (response.status, response.text()) == (200, "ok after 7")
    # Without a Retry-After, a 429 is an ordinary failed attempt; so is a wait past the budget.
    async with HttpClient(HttpConfig(retry=RetryPolicy(attempts=2, backoff=0.0))) as http:
        plain = await http.get(f"{url}/fail-then-ok/6/plain?status=429")
    assert (plain.status, plain.attempts) == (429, 2)
    tight = RetryPolicy(attempts=2, backoff=0.0, throttle_retries=3)
    async with HttpClient(HttpConfig(retry=tight)) as http:
        cut = await http.get(f"{url}/fail-then-ok/6/cut?status=429&retry_after=0")
    assert (cut.status, cut.attempts) == (429, 5)
    assert len(recorder.at("/fail-then-ok/6/cut")) == 5
    with pytest.raises(ConfigError, match="throttle_retries"):
        RetryPolicy(throttle_retries=-1)


async def test_exhausted_retries_on_5xx_return_the_final_response(server) -> None:
    url, recorder, _ = server
    async with HttpClient(HttpConfig(retry=RetryPolicy(attempts=3, backoff=0.0))) as http:
        response = await http.get(f"{url}/always/500")
        stats = http.stats.host(url.removeprefix("http://"))
    assert response.status == 500  # the caller judges the final answer
    assert response.attempts == 3
    assert len(recorder.at("/always/500")) == 3
    assert stats.requests == 3
    assert stats.retries == 2
    assert stats.errors == Counter({"status": 3})
    assert stats.ok == 0


async def test_a_404_is_an_answer_not_a_failure(server) -> None:
    url, recorder, _ = server
    async with HttpClient(HttpConfig(retry=FAST)) as http:
        response = await http.get(f"{url}/always/404")
    assert (response.status, response.attempts) == (404, 1)
    assert len(recorder.at("/always/404")) == 1


async def test_connection_refused_raises_connection_failed_after_every_attempt() -> None:
    url = f"http://127.0.0.1:{free_port()}/nothing-listens"
    async with HttpClient(HttpConfig(retry=RetryPolicy(attempts=3, backoff=0.0))) as http:
        with pytest.raises(ConnectionFailed) as caught:
            await http.get(url)
        stats = http.stats.host(url.split("/")[2])
    assert caught.value.attempts == 3
    assert caught.value.url == url
    assert isinstance(caught.value, ConnectionError)  # plain `except ConnectionError` works
    assert "after 3 attempt(s)" in str(caught.value)
    assert (stats.requests, stats.retries, stats.errors["connection"]) == (3, 2, 3)


async def test_a_timeout_raises_fetch_timeout(server) -> None:
    url, recorder, _ = server
    config = HttpConfig(timeout=0.3, retry=RetryPolicy(attempts=2, backoff=0.0))
    async with HttpClient(config) as http:
        with pytest.raises(FetchTimeout) as caught:
            await http.get(f"{url}/hang")
        stats = http.stats.host(url.removeprefix("http://"))
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.attempts == 2
    assert len(recorder.at("/hang")) == 2
    assert stats.errors == Counter({"timeout": 2})


async def test_post_is_sent_once(server) -> None:
    url, recorder, _ = server
    async with HttpClient(HttpConfig(retry=FAST)) as http:
        response = await http.request("POST", f"{url}/fail-then-ok/1/p", data={"a": "1"})
        stats = http.stats.host(url.removeprefix("http://"))
    assert response.status == 503  # not retried: the server might have acted on it
    assert response.attempts == 1
    assert [hit.method for hit in recorder.at("/fail-then-ok/1/p")] == ["POST"]
    assert stats.retries == 0


async def test_post_marked_safe_is_retried(server) -> None:
    url, recorder, _ = server
    async with HttpClient(HttpConfig(retry=FAST)) as http:
        response = await http.request("POST", f"{url}/fail-then-ok/1/s", data={"a": "1"}, safe=True)
    assert (response.status, response.attempts) == (200, 2)
    assert [hit.method for hit in recorder.at("/fail-then-ok/1/s")] == ["POST", "POST"]


async def test_post_is_not_resent_after_a_dropped_connection() -> None:
    """The request may have been processed before the connection dropped: raise, not resend."""
    seen = []

    async def drop(request: web.Request) -> web.Response:
        seen.append(request.method)
        await request.read()
        assert request.transport is not None
        request.transport.abort()
        raise web.HTTPInternalServerError  # never written

    app = web.Application()
    app.router.add_post("/drop", drop)
    async with serve(app) as url, HttpClient(HttpConfig(retry=FAST)) as http:
        with pytest.raises(ConnectionFailed) as caught:
            await http.request("POST", f"{url}/drop", data=b"x")
    assert seen == ["POST"]
    assert caught.value.attempts == 1


async def test_put_and_delete_are_idempotent_and_retried(server) -> None:
    url, recorder, _ = server
    assert recorder.hits == []
    async with HttpClient(HttpConfig(retry=FAST)) as http:
        put = await http.request("PUT", f"{url}/fail-then-ok/1/put")
        delete = await http.request("DELETE", f"{url}/fail-then-ok/1/delete")
    assert (put.status, put.attempts, delete.status, delete.attempts) == (200, 2, 200, 2)
    assert [hit.method for hit in recorder.hits] == ["PUT", "PUT", "DELETE", "DELETE"]


async def test_the_run_budget_stops_retrying(server) -> None:
    url, recorder, _ = server
    policy = RetryPolicy(attempts=10, backoff=0.0, run_budget=3)
    async with HttpClient(HttpConfig(retry=policy)) as http:
        first = await http.get(f"{url}/fail-then-ok/2/budget")  # spends 2 of the 3 retries
        with pytest.raises(RetryBudgetExhausted) as caught:
            await http.get(f"{url}/always/502")  # 1 retry left, then the budget is spent
        stats = http.stats.host(url.removeprefix("http://"))
    assert (first.status, first.attempts) == (200, 3)
    assert isinstance(caught.value, FetchError)
    assert caught.value.attempts == 2
    assert "retry budget of 3 spent" in str(caught.value)
    assert len(recorder.at("/always/502")) == 2
    assert stats.retries == 3
    assert stats.requests == 5


async def test_retry_waits_grow_exponentially_within_the_cap() -> None:
    """The waits are drawn from [0, min(backoff_max, backoff * 2**(n-1))] (full jitter)."""
    import random

    policy = RetryPolicy(backoff=0.5, backoff_max=3.0)
    rng = random.Random(1)
    for retry, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (10, 3.0)]:
        waits = [policy.wait(retry, rng) for _ in range(200)]
        assert min(waits) >= 0 and max(waits) <= ceiling
        assert max(waits) > ceiling * 0.8  # jittered over the whole range, not a constant
    assert policy.wait(1, rng, retry_after=7.0) == 7.0  # never shorter than Retry-After


async def test_every_attempt_is_logged_and_counted_per_kind(server, caplog) -> None:
    import logging

    caplog.set_level(logging.DEBUG, logger="scrapeflow")
    url, _, _ = server
    dead = f"http://127.0.0.1:{free_port()}/x"
    async with HttpClient(HttpConfig(timeout=0.3, retry=RetryPolicy(attempts=2, backoff=0))) as h:
        await h.get(f"{url}/fail-then-ok/1/log?status=500")
        await h.get(f"{url}/fail-then-ok/1/log429?status=429")
        with pytest.raises(ConnectionFailed):
            await h.get(dead)
        with pytest.raises(FetchTimeout):
            await h.get(f"{url}/hang")
        totals = h.stats.totals()
        snapshot = h.stats.snapshot()
    failed = [r.msg for r in caplog.records if isinstance(r.msg, dict)]
    kinds = Counter(m["kind"] for m in failed if m.get("event") == "http.attempt_failed")
    assert kinds == Counter({"status": 1, "throttle": 1, "connection": 2, "timeout": 2})
    assert totals.requests == 8
    assert totals.retries == 4
    assert totals.ok == 2
    assert totals.throttled == 1
    assert totals.errors == Counter({"status": 1, "connection": 2, "timeout": 2})
    host = snapshot["hosts"][url.removeprefix("http://")]
    assert host["latency_ms"]["p50"] is not None
    assert host["errors"] == {"status": 1, "timeout": 2}


def test_a_huge_retry_after_is_cut_to_the_policy_maximum() -> None:
    import random

    from scrapeflow.http import RetryPolicy

    policy = RetryPolicy(retry_after_max=5.0)
    assert policy.wait(1, random.Random(0), retry_after=86_400) == 5.0
    assert policy.wait(1, random.Random(0), retry_after=2.0) >= 2.0
