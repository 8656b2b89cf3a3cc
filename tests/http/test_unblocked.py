"""Acceptance, scaled down: the hostile feed, four real proxies, every page exactly once.

Four tinyproxy processes connect out from 127.0.0.2 .. 127.0.0.5, so the feed sees four client
IPs and judges each apart (rate limit, bans). The feed runs the ``hostile`` profile with its
bans, silent empty pages for banned IPs (``ban_mode="empty"``), CAPTCHAs served with 200,
errors and dropped connections; to keep the test short its rate limit is raised (10 req/s per
IP, bursts of 10, from 5 and 10) and its slow answers take 3 s (past the client's 2-s timeout,
as the profile's 40 s are) rather than 40. One of the four IPs is banned from the start, so
bans are certain to happen and to be survived, whatever the chaos draws.

bench/unblocked.py runs the full-size acceptance (2,000 pages, the profile unchanged).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from scrapeflow.executor import execute_async
from scrapeflow.http import HostPolicy, HttpClient, HttpConfig, Response, RetryPolicy
from scrapeflow.proxies import ProxyProviderFromList
from scrapeflow.sandbox import (
    CAPTCHA_MARKER,
    FeedSite,
    Hostility,
    SandboxAdmin,
    SandboxState,
    serve,
)
from scrapeflow.scrape import scrape, scrape_with_validation
from tests.http import proxies

PAGES = 200
PAGE_SIZE = 50
BANNED_FROM_THE_START = "127.0.0.2"
HOSTILE = Hostility.profile("hostile").with_switches(
    {"rate_limit_rps": 10, "rate_limit_burst": 10, "slow_seconds": 3}
)
TITLE = re.compile(rb"<title>@(user\d{4}) - page (\d+)</title>")
COUNT = re.compile(rb'<span class="count" data-count="(\d+)">')
ARTICLE = re.compile(rb'<article class="post" data-id="(\d+)"')


def page_problem(body: bytes) -> str | None:
    """Why a body is not the real page it claims to be: a CAPTCHA, or a silent empty page
    (the feed's count says how many posts page N must hold). ``None`` for a real page."""
    if CAPTCHA_MARKER.encode() in body:
        return "CAPTCHA page"
    title, count = TITLE.search(body), COUNT.search(body)
    if title is None or count is None:
        return "not a profile page"
    page, total = int(title.group(2)), int(count.group(1))
    expected = max(0, min(PAGE_SIZE, total - (page - 1) * PAGE_SIZE))
    found = len(ARTICLE.findall(body))
    if found != expected:
        return f"{found} posts on page {page} where {expected} must be: a ban's empty page"
    return None


def refuse_fake_pages(body: bytes) -> None:
    """The seed's ``response_callback``: raise ``RuntimeError`` for content that is not real."""
    problem = page_problem(body)
    if problem is not None:
        raise RuntimeError(problem)


def is_empty_ban(response: Response) -> bool:
    """A 200 page with fewer posts than its count promises: the feed's silent ban."""
    problem = page_problem(response.body) if response.status == 200 else None
    return problem is not None and "empty page" in problem


async def feed_page(context, status):
    return await scrape_with_validation(context, status, refuse_fake_pages)


def feed_tasks(feed: FeedSite, url: str, count: int) -> dict[str, dict]:
    """``count`` HTML pages: up to 4 pages of each profile in turn (skipping empty ones)."""
    tasks: dict[str, dict] = {}
    number = 0
    while len(tasks) < count:
        profile = f"user{number:04d}"
        pages = -(-feed.post_count(profile) // PAGE_SIZE)
        for page in range(1, min(pages, 4) + 1):
            if len(tasks) < count:
                tasks[f"{profile}-p{page}"] = {"url": f"{url}/u/{profile}?page={page}"}
        number += 1
    return tasks


def truth(feed: FeedSite, key: str) -> list[bytes]:
    profile, page = key.split("-p")
    start = (int(page) - 1) * PAGE_SIZE
    return [post.id.encode() for post in feed.posts(profile, start, start + PAGE_SIZE)]


@pytest.fixture(scope="module")
def four_proxies() -> Iterator[list[str]]:
    with proxies("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5") as urls:
        yield urls


@pytest.fixture
async def hostile_feed() -> AsyncIterator[tuple[FeedSite, str, SandboxAdmin]]:
    feed = FeedSite(SandboxState(seed=0, admin_token="t"), hostility=HOSTILE, page_size=PAGE_SIZE)
    async with serve(feed.app()) as url, SandboxAdmin({"feed": url}, "t") as admin:
        yield feed, url, admin


async def test_every_page_exactly_once_through_bans_and_captchas(
    tmp_path: Path, hostile_feed, four_proxies
) -> None:
    feed, url, admin = hostile_feed
    await admin.block("feed", BANNED_FROM_THE_START, seconds=300)
    tasks = feed_tasks(feed, url, PAGES)
    config = HttpConfig(
        max_connections=16,
        timeout=2.0,
        host=HostPolicy(concurrency=4),
        retry=RetryPolicy(attempts=6, backoff=0.1, backoff_max=2.0, ban_retries=6),
        quarantine=5.0,
        seed=0,
    )
    provider = ProxyProviderFromList(four_proxies)
    async with HttpClient(config, proxy_provider=provider, is_ban=is_empty_ban) as http:
        done = await execute_async(
            [feed_page], tmp_path, tasks, max_parallelism=16, timeout=120, http=http
        )
        totals = http.stats.totals()
        banned_proxy = http.stats.proxies[four_proxies[0].removeprefix("http://")]

    assert sorted(done) == sorted(tasks)
    stored = sorted(p.name for p in tmp_path.glob("*.scrape"))
    assert stored == sorted(f"{key}.scrape" for key in tasks)  # each page once, nothing else
    all_ids: list[bytes] = []
    for key in tasks:
        body = (tmp_path / f"{key}.scrape").read_bytes()
        assert CAPTCHA_MARKER.encode() not in body
        assert page_problem(body) is None, key
        ids = ARTICLE.findall(body)
        assert ids == truth(feed, key), key  # the real posts, in order
        all_ids += ids
        status = json.loads((tmp_path / f"{key}.status.json").read_text())
        assert status["feed_page_status"] == "SUCCESS"
    assert len(all_ids) == len(set(all_ids))  # no post twice across pages

    # The site really fought back, and the client got through it.
    guard = await admin.stats("feed")
    assert guard["banned"] >= 1  # requests from the banned IP were answered emptily
    assert guard["captchas"] >= 1
    assert banned_proxy.bans >= 1  # noticed (the empty pages) and rotated away
    assert totals.bans >= 1
    assert totals.captchas >= 1
    assert totals.retries >= totals.bans + totals.captchas
    assert totals.ok == PAGES


async def test_without_proxies_a_naive_client_is_banned(tmp_path: Path, hostile_feed) -> None:
    """No proxies, no retries, no validation, many requests at once: the feed bans the IP and
    then serves it empty pages that look real; the naive client stores them as pages."""
    feed, url, admin = hostile_feed
    tasks = feed_tasks(feed, url, PAGES)
    config = HttpConfig(
        max_connections=32,
        host=HostPolicy(concurrency=32, adaptive=False),
        retry=RetryPolicy(attempts=1, ban_retries=0),
        seed=0,
    )
    async with HttpClient(config) as http:
        done = await execute_async([scrape], tmp_path, tasks, max_parallelism=32, http=http)
        totals = http.stats.totals()

    assert feed.guard.is_banned("127.0.0.1")
    assert (await admin.stats("feed"))["bans"] >= 1
    assert len(done) < PAGES  # the 429s failed their tasks
    assert totals.throttled >= 1
    kinds = Counter(page_problem(p.read_bytes()) is None for p in tmp_path.glob("*.scrape"))
    assert kinds[False] >= 1  # silent empty pages (or CAPTCHAs) stored as if real
    errors = [
        json.loads(p.read_text())["scrape_status"]
        for p in tmp_path.glob("*.status.json")
        if json.loads(p.read_text())["scrape_status"] != "SUCCESS"
    ]
    assert any("HTTP response 429" in e for e in errors)


async def test_a_naive_client_with_aiohttp_headers_is_refused_outright(
    tmp_path: Path, hostile_feed
) -> None:
    feed, url, admin = hostile_feed
    tasks = feed_tasks(feed, url, 20)
    config = HttpConfig(identities="none", retry=RetryPolicy(attempts=1, ban_retries=0))
    async with HttpClient(config) as http:
        done = await execute_async([scrape], tmp_path, tasks, http=http)
        totals = http.stats.totals()
    assert done == []
    assert totals.bans == 20  # every answer a 403
    assert (await admin.stats("feed"))["header_blocks"] == 20
    status = json.loads((tmp_path / "user0000-p1.status.json").read_text())
    assert status["scrape_status"].startswith("ERROR Banned::banned (HTTP 403)")
