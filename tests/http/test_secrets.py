"""Secrets: a proxied, authenticated run leaves the proxy password nowhere a user can read.

The run goes through a real tinyproxy that demands BasicAuth, and also meets the failures
whose messages are the likeliest to carry a proxy URL or its ``Proxy-Authorization`` header: a
dead proxy, a proxy that answers 407, a wrong password, a server error, a timeout. Then the
logs (DEBUG, captured), the stats, every file of the run and every exception raised are read
for the password, plain, percent-encoded and inside the Basic credentials.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import re
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
from aiohttp import web

from scrapeflow._util.redact import redact
from scrapeflow.errors import ScrapeflowError
from scrapeflow.executor import execute_async
from scrapeflow.http import HttpClient, HttpConfig, RetryPolicy
from scrapeflow.proxies import ProxyProviderFromList
from scrapeflow.sandbox import serve
from scrapeflow.scrape import scrape
from tests._tinyproxy import free_port
from tests.http import Recorder, proxies

USER, PASSWORD = "scraper", "pr0xy-S3cret-94q"


def leaks(text: str) -> list[str]:
    """The forms of the password found in ``text``."""
    forms = {
        "plain": PASSWORD,
        "percent-encoded": quote(PASSWORD, safe=""),
        "basic credentials": base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(),
    }
    return [name for name, form in forms.items() if form in text]


def exception_texts(exc: BaseException) -> list[str]:
    texts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        texts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return texts


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, Recorder]]:
    recorder = Recorder()
    release = asyncio.Event()
    failed: set[str] = set()

    async def page(request: web.Request) -> web.Response:
        response = web.Response(text=f"page {request.match_info['n']}")
        response.set_cookie("sid", "abc")
        return response

    async def fail_once(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in failed:
            failed.add(name)
            return web.Response(status=500, text="oops")
        return web.Response(text="fine")

    async def login(request: web.Request) -> web.Response:
        form = await request.post()
        ok = form.get("user") == "alice" and form.get("password") == "site-password"
        return web.Response(status=200 if ok else 401, text="welcome" if ok else "no")

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    recorder.route("/page/{n}", page)
    recorder.route("/fail-once/{name}", fail_once)
    recorder.route("/login", login)
    recorder.route("/hang", hang)
    async with serve(recorder.app) as url:
        yield url, recorder
        release.set()


@pytest.fixture
async def refusing_proxy() -> AsyncIterator[str]:
    """A "proxy" that refuses every login with 407, its URL carrying the password."""

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=407, headers={"Proxy-Authenticate": 'Basic realm="p"'})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    async with serve(app) as url:
        yield url.replace("http://", f"http://{USER}:{quote(PASSWORD, safe='')}@")


async def test_the_proxy_password_is_nowhere(
    tmp_path: Path, site, refusing_proxy: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="scrapeflow")
    url, recorder = site
    errors: list[BaseException] = []
    dead = f"http://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{free_port()}"
    config = HttpConfig(timeout=0.5, retry=RetryPolicy(attempts=3, backoff=0.0), seed=1)

    with proxies("127.0.0.3", basic_auth=(USER, PASSWORD)) as (good,):
        assert quote(PASSWORD, safe="") in good  # the password is in what we hand over
        wrong = good.replace(quote(PASSWORD, safe=""), quote(PASSWORD + "x", safe=""))

        # A run of the engine through the good proxy (plus a dead one and a refusing one).
        provider = ProxyProviderFromList([good, dead, refusing_proxy])
        tasks = {f"p{n}": {"url": f"{url}/page/{n}"} for n in range(12)}
        tasks["flaky"] = {"url": f"{url}/fail-once/run"}
        login = {
            "login": {
                "url": f"{url}/login",
                "post_payload": {"user": "alice", "password": "site-password"},
            }
        }
        # A POST is sent once: through the authenticated proxy only, it must succeed.
        done = await execute_async(
            [scrape], tmp_path / "run", login, proxy_provider=ProxyProviderFromList([good])
        )
        # Its timeout is a long one: at 0.5 s a loaded machine timed the good proxy out once,
        # and with all three set aside every task failed (the short one is for /hang below).
        run_config = HttpConfig(timeout=10.0, retry=RetryPolicy(attempts=3, backoff=0.0), seed=1)
        async with HttpClient(run_config, proxy_provider=provider) as http:
            done += await execute_async([scrape], tmp_path / "run", tasks, http=http)
            stats_text = json.dumps(http.stats.snapshot())
            reprs = [repr(s) for s in http._sessions] + [repr(provider), repr(http.proxy_pool)]

        # The errors a caller gets: a dead proxy, a refusing one, a timeout through the good one.
        for proxy, path in [(dead, "/page/99"), (refusing_proxy, "/page/98"), (good, "/hang")]:
            async with HttpClient(config, proxy_provider=ProxyProviderFromList([proxy])) as http:
                try:
                    await http.get(f"{url}{path}")
                except ScrapeflowError as exc:
                    errors.append(exc)
                stats_text += json.dumps(http.stats.snapshot())
        async with HttpClient(config, proxy_provider=ProxyProviderFromList([wrong])) as http:
            try:
                await http.get(f"{url}/page/100")
            except ScrapeflowError as exc:
                errors.append(exc)
            stats_text += json.dumps(http.stats.snapshot())

    # The run worked, through the proxy and its login.
    assert sorted(done) == sorted([*tasks, "login"])
    assert (tmp_path / "run" / "login.scrape").read_text() == "welcome"
    assert {hit.peer for hit in recorder.hits} == {"127.0.0.3"}
    # A lone proxy that fails hard is set aside at once: the retry finds none left. A wrong
    # password (tinyproxy answers it with a 401 of its own) is the proxy failing too.
    assert [type(e).__name__ for e in errors] == [
        "NoProxyAvailable",
        "NoProxyAvailable",
        "FetchTimeout",
        "NoProxyAvailable",
    ]
    assert "407" in str(errors[1])
    assert "401" in str(errors[3])

    # The logs were captured, and name the proxies by host:port: the check below means something.
    assert "run.start" in caplog.text
    assert "http.attempt_failed" in caplog.text
    assert "http.proxy_quarantined" in caplog.text
    assert good.split("@")[1] in caplog.text
    assert "407" in caplog.text

    texts = {
        "logs": caplog.text,
        "log records": "\n".join(repr(r.msg) + repr(r.args) for r in caplog.records),
        "stats": stats_text,
        "reprs": "\n".join(reprs),
    }
    for path in (tmp_path / "run").iterdir():
        texts[path.name] = path.read_text(errors="replace")
    for n, exc in enumerate(errors):
        texts[f"exception {n}: {type(exc).__name__}"] = "\n".join(exception_texts(exc))
    assert {name: leaks(text) for name, text in texts.items() if leaks(text)} == {}
    assert len(texts) > 20  # the status files and bodies of every task were read


# The pattern redaction used to be: what it masks is the reference (it backtracked: 3 s for a
# 40,000-character URL, minutes at 400,000, with the event loop and Ctrl-C blocked meanwhile).
_REFERENCE = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^\s'\"<>]*@"
    r"|(?<![^\s'\"(\[<=,])[^\s'\"<>()\[\]]*@(?=[\w\[])"
)
_PIECES = [*"aZ9:/@=,()[] '\"<>+.-_é\t", "://", "http://", "@", "u:p@", "%40"]


def reference_redact(text: str) -> str:
    return _REFERENCE.sub(lambda m: f"{m.group('scheme') or ''}***@", text)


def test_redaction_masks_what_the_reference_pattern_masks() -> None:
    rng = random.Random(11)
    texts = [
        "Cannot connect via http://bob:hunter2@127.0.0.2:8888",
        "bob:p@ss@10.0.0.1:3128 and http://token@h:1",
        "x=(http://u:p@h/a?mail=a@b.c) [u:p@h] <a@b> >c:d@e 9http://u:p@h",
    ]
    texts += ["".join(rng.choices(_PIECES, k=rng.randint(0, 30))) for _ in range(20_000)]
    assert [redact(t) for t in texts] == [reference_redact(t) for t in texts]


def test_a_key_value_connection_strings_password_is_masked() -> None:
    """psycopg and libpq name the server with key=value pairs, not a URL."""
    assert redact("no route: user=bob password=hunter2 host=db") == (
        "no route: user=bob password=*** host=db"
    )
    assert redact("PASSWORD='hun ter\\'2' dbname=x") == "PASSWORD=*** dbname=x"
    assert "hunter2" not in redact("dsn=host=h password=hunter2@h2 port=5")


LINEAR_SHAPES = {
    "long URL path": lambda n: "http://127.0.0.1:1/" + "a" * n,
    "query of many pairs": lambda n: "http://u:p@127.0.0.1:1/?" + "a=1&" * (n // 4) + "@x",
    "many schemes": lambda n: "x" + "a://" * (n // 4),
    "many credentials": lambda n: "@[" * (n // 2),
    "commas": lambda n: "," * n + "@x",
    "passwords": lambda n: "password=" * (n // 9),
}


@pytest.mark.parametrize("shape", LINEAR_SHAPES)
def test_redaction_time_is_linear_in_the_texts_length(shape: str) -> None:
    """Four times the text takes about four times as long, not sixteen (no absolute time)."""
    small, large = LINEAR_SHAPES[shape](25_000), LINEAR_SHAPES[shape](100_000)

    def timed(text: str, reps: int) -> float:
        # This thread's CPU time, not the wall clock: the time other processes (the other
        # pytest-xdist worker, other test runs on the machine) hold the cores is not counted.
        started = time.thread_time()
        for _ in range(reps):
            redact(text)
        return time.thread_time() - started

    reps = 1
    while (small_time := timed(small, reps)) < 0.05:  # long enough to measure
        reps *= 2
    small_time = min(small_time, timed(small, reps))
    large_time = timed(large, reps)
    if large_time > 8 * small_time and large_time < 32 * small_time:
        large_time = min(large_time, timed(large, reps))  # once more: the machine is shared
    assert large_time <= 8 * small_time, f"{large_time / small_time:.1f}x for 4x the text"
