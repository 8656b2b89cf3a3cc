"""execute_async, Context, taskify: the seed's contract and what we promise beyond it."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from datetime import datetime
from pathlib import Path
from random import random

import pytest

from scrapeflow.errors import ConfigError, InputError, TaskConflict, TaskNotFound
from scrapeflow.executor import Context, RunProgress, execute_async, taskify
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.sandbox import header_problem
from scrapeflow.scrape import scrape, scrape_with_validation
from scrapeflow.statusdata import StatusData


def load(directory: Path, key: str) -> dict:
    return json.loads((directory / f"{key}.status.json").read_text())


async def test_seed_basic_usage(tmp_path: Path, plain_site) -> None:
    # The seed's "Basic usage", with loopback pages in place of google and bing.
    tasks = {
        "google": {"url": plain_site.page_url(1)},
        "bing": {"url": plain_site.page_url(2)},
    }
    directory = tmp_path / "test"

    result = await execute_async(executors=[scrape], directory=directory, tasks=tasks)

    assert result == ["google", "bing"]
    status = load(directory, "bing")
    body = (directory / "bing.scrape").read_bytes()
    assert status["name"] == "bing"
    assert status["params"] == {"url": plain_site.page_url(2)}
    assert status["scrape_status"] == "SUCCESS"
    assert status["scrape"]["size"] == len(body)
    assert status["scrape"]["content"] == hashlib.md5(body).hexdigest()
    assert status["scrape"]["response_headers"]["Content-Type"].startswith("text/html")
    assert b"<h1" in body
    last_run = datetime.fromisoformat(status["scrape_last_run"])
    assert last_run.utcoffset() is not None and last_run.utcoffset().total_seconds() == 0


async def test_seed_typical_executor_runs_unchanged(tmp_path: Path, plain_site) -> None:
    # The seed's "typical executor implementation", verbatim apart from the function name.
    @taskify
    async def scraper(context: Context, key: str, status: StatusData) -> StatusData:
        response_status = {}
        url = status["params"]["url"]
        async with context.session.get(url=url) as response:
            status = response.status
            headers = {k: response.headers.getone(k) for k in response.headers.keys()}  # noqa: SIM118
            if status != 200:
                raise RuntimeError(f"HTTP response {status}")
            resp = await response.read()
            response_status["size"] = len(resp)
            response_status["content"] = hashlib.md5(resp).hexdigest()
            response_status["response_headers"] = headers
            with open(context.dir / f"{key}.scrape", mode="wb") as f:
                f.write(resp)
        return response_status

    tasks = {"ok": {"url": plain_site.page_url(3)}, "missing": {"url": f"{plain_site.url}/nope"}}
    result = await execute_async([scraper], tmp_path, tasks)

    assert result == ["ok"]
    assert load(tmp_path, "ok")["scraper_status"] == "SUCCESS"
    missing = load(tmp_path, "missing")
    assert missing["scraper_status"] == "ERROR RuntimeError::HTTP response 404"
    assert missing["scraper"] == {}
    assert "scraper_last_run" in missing


async def test_seed_validation_example_runs_unchanged(tmp_path: Path, plain_site) -> None:
    # The seed's scrape_with_validation example: a plain (context, status) function, recorded
    # under its own name, calling scrape_with_validation without the key.
    def callback(content: bytes) -> None:
        if content.find(b"<article") < 0 or content.find(b'class="links"') < 0:
            raise RuntimeError("Scrape missing data.")

    async def scrape(context, status):
        await asyncio.sleep(0.5 * random())
        return await scrape_with_validation(context, status, callback)

    tasks = {"page": {"url": plain_site.page_url(4)}, "home": {"url": plain_site.url + "/"}}
    result = await execute_async([scrape], tmp_path, tasks)

    assert result == ["page"]
    assert load(tmp_path, "page")["scrape_status"] == "SUCCESS"
    assert (tmp_path / "page.scrape").exists()
    home = load(tmp_path, "home")
    assert home["scrape_status"] == "ERROR RuntimeError::Scrape missing data."
    assert not (tmp_path / "home.scrape").exists()


async def test_second_run_by_keys_skips_and_keeps_output(tmp_path: Path, plain_site) -> None:
    tasks = {f"p{n}": {"url": plain_site.page_url(n)} for n in range(5)}
    await execute_async([scrape], tmp_path, tasks)
    before = {k: load(tmp_path, k) for k in tasks}

    result = await execute_async([scrape], tmp_path, list(tasks))

    assert result == list(tasks)
    for key in tasks:
        after = load(tmp_path, key)
        assert after["scrape_status"] == "SKIPPED"
        assert after["scrape"] == before[key]["scrape"]
        assert after["scrape_last_run"] == before[key]["scrape_last_run"]
        assert plain_site.hits(f"/page/{key[1:]}") == 1
    # SKIPPED stays SKIPPED (it counts as success) on a third run.
    await execute_async([scrape], tmp_path, list(tasks))
    assert load(tmp_path, "p0")["scrape_status"] == "SKIPPED"


async def test_force_by_name_and_all(tmp_path: Path, plain_site) -> None:
    calls: list[str] = []

    @taskify
    async def parse(context: Context, key: str, status: StatusData) -> dict:
        calls.append(key)
        return {"size_seen": status["scrape"]["size"]}

    tasks = {"a": {"url": plain_site.page_url(1)}}
    await execute_async([scrape, parse], tmp_path, tasks)
    first = load(tmp_path, "a")

    await execute_async([scrape, parse], tmp_path, ["a"], force_executors=["parse"])
    forced = load(tmp_path, "a")
    assert forced["scrape_status"] == "SKIPPED"
    assert forced["parse_status"] == "SUCCESS"
    assert forced["parse_last_run"] > first["parse_last_run"]
    assert plain_site.hits("/page/1") == 1
    assert calls == ["a", "a"]

    await execute_async([scrape, parse], tmp_path, ["a"], force_executors=["all"])
    assert load(tmp_path, "a")["scrape_status"] == "SUCCESS"
    assert plain_site.hits("/page/1") == 2
    assert calls == ["a", "a", "a"]


async def test_unknown_forced_executor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="parse"):
        await execute_async(
            [scrape], tmp_path, {"a": {"url": "http://127.0.0.1:1/"}}, force_executors=["parse"]
        )
    assert list(tmp_path.iterdir()) == []


async def test_failed_executor_stops_its_task_only(tmp_path: Path, plain_site) -> None:
    ran: list[str] = []

    @taskify
    async def check(context: Context, key: str, status: StatusData) -> dict:
        if key == "bad":
            raise RuntimeError("could not compute something")
        return {"ok": True}

    @taskify
    async def after(context: Context, key: str, status: StatusData) -> dict:
        ran.append(key)
        return {}

    tasks = {"good": {"url": plain_site.page_url(1)}, "bad": {"url": plain_site.page_url(2)}}
    result = await execute_async([scrape, check, after], tmp_path, tasks)

    assert result == ["good"]
    assert ran == ["good"]
    bad = load(tmp_path, "bad")
    assert bad["scrape_status"] == "SUCCESS"
    assert bad["check_status"] == "ERROR RuntimeError::could not compute something"
    assert bad["check"] == {}
    assert "after_status" not in bad

    # A rerun retries only what failed: the scrape is skipped, check runs again.
    await execute_async([scrape, check, after], tmp_path, list(tasks))
    assert load(tmp_path, "bad")["scrape_status"] == "SKIPPED"
    assert plain_site.hits("/page/2") == 1


async def test_expected_network_errors_are_recorded(tmp_path: Path) -> None:
    tasks = {"refused": {"url": "http://127.0.0.1:1/"}}
    result = await execute_async([scrape], tmp_path, tasks)
    assert result == []
    error = load(tmp_path, "refused")["scrape_status"]
    assert error.startswith("ERROR ConnectionFailed::connection failure after 4 attempt(s)")
    assert error.endswith(": connection refused")  # a fixed phrase, never the peer's words


async def test_a_raw_aiohttp_error_in_an_executor_is_recorded(tmp_path: Path) -> None:
    @taskify
    async def raw_get(context: Context, key: str, status: StatusData) -> dict:
        async with context.session.get("http://127.0.0.1:1/") as response:
            return {"status": response.status}

    assert await execute_async([raw_get], tmp_path, {"t": {}}) == []
    assert load(tmp_path, "t")["raw_get_status"].startswith("ERROR ClientConnectorError::")


async def test_timeout_is_recorded_per_task(tmp_path: Path, plain_site) -> None:
    tasks = {
        "slow": {"url": f"{plain_site.url}/delay/3000"},
        "fast": {"url": plain_site.page_url(1)},
    }
    # 1 s: a page of the loopback site takes milliseconds, even on a busy machine (0.3 s was
    # sometimes too little there); the slow one takes 3 s.
    result = await execute_async([scrape], tmp_path, tasks, timeout=1.0)
    assert result == ["fast"]
    assert load(tmp_path, "slow")["scrape_status"] == "ERROR TimeoutError::"


async def test_timeout_covers_the_whole_task(tmp_path: Path) -> None:
    @taskify
    async def step1(context: Context, key: str, status: StatusData) -> dict:
        await asyncio.sleep(0.05)
        return {}

    @taskify
    async def step2(context: Context, key: str, status: StatusData) -> dict:
        await asyncio.sleep(1.0)
        return {}

    await execute_async([step1, step2], tmp_path, {"t": {}}, timeout=0.5)
    status = load(tmp_path, "t")
    assert status["step1_status"] == "SUCCESS"
    assert status["step2_status"] == "ERROR TimeoutError::"


async def test_cancellation_inside_an_executor_is_recorded(tmp_path: Path) -> None:
    @taskify
    async def flaky(context: Context, key: str, status: StatusData) -> dict:
        raise asyncio.CancelledError("the library gave up")

    result = await execute_async([flaky], tmp_path, {"t": {}, "u": {}})
    assert result == []
    assert load(tmp_path, "t")["flaky_status"] == "ERROR CancelledError::the library gave up"


async def test_unexpected_error_stops_the_run_after_saving(tmp_path: Path) -> None:
    @taskify
    async def buggy(context: Context, key: str, status: StatusData) -> dict:
        if key == "k5":
            await asyncio.sleep(0.05)
            raise ValueError("a bug in my parser")
        return {"n": key}

    tasks = {f"k{n}": {} for n in range(10)}
    with pytest.raises(ValueError, match="a bug in my parser"):
        await execute_async([buggy], tmp_path, tasks, max_parallelism=10)

    assert load(tmp_path, "k5")["buggy_status"] == "ERROR ValueError::a bug in my parser"
    # The nine others finished at once, before k5 raised: each is saved as a success.
    for n in set(range(10)) - {5}:
        assert load(tmp_path, f"k{n}")["buggy_status"] == "SUCCESS"
    assert not list(tmp_path.glob("*sf-tmp*"))


async def test_outer_cancellation_records_nothing_and_resumes(tmp_path: Path) -> None:
    started = asyncio.Event()

    @taskify
    async def slow(context: Context, key: str, status: StatusData) -> dict:
        if key == "stuck":
            started.set()
            await asyncio.sleep(60)
        return {}

    run = asyncio.create_task(execute_async([slow], tmp_path, {"quick": {}, "stuck": {}}))
    await started.wait()
    await asyncio.sleep(0.05)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert load(tmp_path, "quick")["slow_status"] == "SUCCESS"
    assert not (tmp_path / "stuck.status.json").exists()


async def test_keys_without_status_are_refused_before_anything_runs(
    tmp_path: Path, plain_site
) -> None:
    await execute_async([scrape], tmp_path, {"a": {"url": plain_site.page_url(1)}})
    with pytest.raises(TaskNotFound, match="'zzz'"):
        await execute_async([scrape], tmp_path, ["a", "zzz"], force_executors=["all"])
    assert plain_site.hits("/page/1") == 1


async def test_changed_params_are_refused_and_kept(tmp_path: Path, plain_site) -> None:
    await execute_async([scrape], tmp_path, {"a": {"url": plain_site.page_url(1)}})
    before = (tmp_path / "a.status.json").read_bytes()
    with pytest.raises(TaskConflict, match="'a'"):
        await execute_async([scrape], tmp_path, {"a": {"url": plain_site.page_url(2)}})
    assert (tmp_path / "a.status.json").read_bytes() == before
    # Params that only change type through JSON (a tuple is stored as a list) are the same.
    await execute_async([scrape], tmp_path, {"b": {"url": plain_site.page_url(3), "t": (1, 2)}})
    assert await execute_async(
        [scrape], tmp_path, {"b": {"url": plain_site.page_url(3), "t": (1, 2)}}
    ) == ["b"]


@pytest.mark.parametrize("bad_key", ["", "a/b", "../x", ".hidden", "x" * 201])
async def test_keys_that_cannot_be_file_names_are_refused(tmp_path: Path, bad_key: str) -> None:
    with pytest.raises(InputError, match="cannot be a file name"):
        await execute_async([scrape], tmp_path, {bad_key: {"url": "http://127.0.0.1:1/"}})
    assert not list(tmp_path.glob("*.status.json"))


async def test_parallelism_is_not_capped_at_100(tmp_path: Path) -> None:
    running = 0
    peak = 0
    gate = asyncio.Event()

    @taskify
    async def hold(context: Context, key: str, status: StatusData) -> dict:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if peak >= 250:
            gate.set()
        await asyncio.wait_for(gate.wait(), timeout=5)
        running -= 1
        return {}

    tasks = {f"t{n}": {} for n in range(300)}
    result = await execute_async([hold], tmp_path, tasks, max_parallelism=250)
    assert len(result) == 300
    assert peak == 250


async def test_workers_are_bounded_by_the_tasks_there_are(tmp_path: Path) -> None:
    """A stream of 3 tasks at parallelism 10,000 starts 3 workers, not 10,000 (``scrapeflow
    run`` streams its URL list: its total is not known to the engine)."""
    tasks_alive: list[int] = []

    @taskify
    async def look(context: Context, key: str, status: StatusData) -> dict:
        tasks_alive.append(len(asyncio.all_tasks()))
        await asyncio.sleep(0.01)
        return {}

    stream = ((f"t{n}", {"n": n}) for n in range(3))
    result = await execute_async([look], tmp_path, stream, max_parallelism=10_000)
    assert result == ["t0", "t1", "t2"]
    # the test's own task, the run's watchdog, and one worker per task
    assert max(tasks_alive) <= 3 + 2


async def test_tasks_are_streamed_not_materialised(tmp_path: Path) -> None:
    pulled = 0
    most_in_flight = 0

    def generate():
        nonlocal pulled
        for n in range(2000):
            pulled += 1
            yield f"t{n}", {"n": n}

    @taskify
    async def work(context: Context, key: str, status: StatusData) -> dict:
        nonlocal most_in_flight
        # Tasks pulled but not finished stay within the worker pool's size.
        finished = progress_seen[-1].done if progress_seen else 0
        most_in_flight = max(most_in_flight, pulled - finished)
        most_in_flight = max(most_in_flight, len(asyncio.all_tasks()))
        await asyncio.sleep(0)
        return {}

    progress_seen: list[RunProgress] = []
    result = await execute_async(
        [work], tmp_path, generate(), max_parallelism=8, on_progress=progress_seen.append
    )
    assert len(result) == 2000
    assert most_in_flight <= 8 + 2
    assert progress_seen[-1].done == 2000 and progress_seen[-1].total is None


async def test_progress_counts_success_skip_and_failure(tmp_path: Path, plain_site) -> None:
    tasks = {"a": {"url": plain_site.page_url(1)}, "b": {"url": f"{plain_site.url}/status/500"}}
    await execute_async([scrape], tmp_path, tasks)
    seen: list[tuple[int, int, int, int]] = []

    def on_progress(p: RunProgress) -> None:
        seen.append((p.done, p.succeeded, p.skipped, p.failed))

    await execute_async([scrape], tmp_path, list(tasks), on_progress=on_progress)
    assert seen[-1] == (2, 0, 1, 1)
    assert len(seen) == 2


async def test_raw_executor_response_is_passed_through(tmp_path: Path) -> None:
    async def raw(context: Context, status: StatusData):
        status["raw_status"] = "SUCCESS"
        status["raw"] = {"mine": 1}
        return status, True

    assert await execute_async([raw], tmp_path, {"t": {}}) == ["t"]
    assert load(tmp_path, "t")["raw"] == {"mine": 1}


async def test_own_http_client_is_used_and_left_open(tmp_path: Path, plain_site) -> None:
    config = HttpConfig(identities="none", max_connections=5)
    async with HttpClient(config) as http:
        tasks = {"echo": {"url": f"{plain_site.url}/echo", "headers": {"X-Mine": "yes"}}}
        assert await execute_async([scrape], tmp_path, tasks, http=http) == ["echo"]
        assert http.stats.hosts[plain_site.url.removeprefix("http://")].ok == 1
        again = await http.get(f"{plain_site.url}/page/1")  # still open after the run
        assert again.status == 200
    echoed = json.loads((tmp_path / "echo.scrape").read_bytes())
    assert echoed["headers"]["X-Mine"] == "yes"
    assert echoed["headers"]["User-Agent"].startswith("Python/")  # identities="none"


async def test_scrape_sends_a_coherent_browser_identity_by_default(
    tmp_path: Path, plain_site
) -> None:
    await execute_async([scrape], tmp_path, {"echo": {"url": f"{plain_site.url}/echo"}})
    headers = json.loads((tmp_path / "echo.scrape").read_bytes())["headers"]
    assert header_problem(headers) is None
    assert "Mozilla/5.0" in headers["User-Agent"]


async def test_bad_arguments_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_parallelism"):
        await execute_async([scrape], tmp_path, {"a": {}}, max_parallelism=0)
    with pytest.raises(ConfigError, match="timeout"):
        await execute_async([scrape], tmp_path, {"a": {}}, timeout=-1)
    with pytest.raises(ConfigError, match="executors is empty"):
        await execute_async([], tmp_path, {"a": {}})
    with pytest.raises(InputError, match="params of task 'a'"):
        await execute_async([scrape], tmp_path, [("a", "not a dict")])


async def test_result_keeps_input_order_when_tasks_finish_out_of_order(tmp_path: Path) -> None:
    @taskify
    async def slower_first(context: Context, key: str, status: StatusData) -> dict:
        await asyncio.sleep(0.01 * (20 - status["params"]["n"]))
        return {}

    tasks = {f"t{n}": {"n": n} for n in range(20)}
    finished: list[str] = []
    result = await execute_async(
        [slower_first], tmp_path, tasks, on_progress=lambda p: finished.append(p.last.key)
    )
    assert finished != list(tasks)  # they did finish out of order
    assert result == list(tasks)


async def test_a_swallowed_deadline_cancel_does_not_leak_into_the_next_task(tmp_path: Path) -> None:
    @taskify
    async def stubborn(context: Context, key: str, status: StatusData) -> dict:
        if key == "a":
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                return {"swallowed": True}  # a body that eats the cancel
        if key == "b":
            await asyncio.sleep(1.0)  # must still time out at 0.3 s
        if key == "c":
            raise asyncio.CancelledError("library gave up")  # not a timeout
        return {}

    tasks = {"a": {}, "b": {}, "c": {}}
    await execute_async([stubborn], tmp_path, tasks, timeout=0.3, max_parallelism=1)
    assert load(tmp_path, "a")["stubborn_status"] == "ERROR TimeoutError::"
    assert load(tmp_path, "b")["stubborn_status"] == "ERROR TimeoutError::"
    assert load(tmp_path, "c")["stubborn_status"] == "ERROR CancelledError::library gave up"


async def test_an_executor_calling_another_keeps_the_task_deadline(tmp_path: Path) -> None:
    @taskify
    async def inner(context: Context, key: str, status: StatusData) -> dict:
        return {}

    @taskify
    async def outer(context: Context, key: str, status: StatusData) -> dict:
        await inner(context, status)
        await asyncio.sleep(2)
        return {}

    await execute_async([outer], tmp_path, {"t": {}}, timeout=0.3)
    assert load(tmp_path, "t")["outer_status"] == "ERROR TimeoutError::"


async def test_cancelling_the_run_during_a_deadline_still_stops_it(tmp_path: Path) -> None:
    reached = asyncio.Event()

    @taskify
    async def slow(context: Context, key: str, status: StatusData) -> dict:
        reached.set()
        try:
            await asyncio.sleep(5)
        finally:
            await asyncio.sleep(0.2)  # cleanup that outlives the deadline and the cancel
        return {}

    run = asyncio.create_task(
        execute_async(
            [slow], tmp_path, {f"t{n}": {} for n in range(6)}, timeout=0.1, max_parallelism=1
        )
    )
    await reached.wait()
    await asyncio.sleep(0.15)  # the watchdog has fired
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert len(list(tmp_path.glob("*.status.json"))) <= 1  # the other tasks never ran


async def test_executor_names_that_would_clash_are_refused(tmp_path: Path) -> None:
    async def params(context, status):
        return {}

    with pytest.raises(ConfigError, match="'params'"):
        await execute_async([params], tmp_path, {"t": {}})
    with pytest.raises(ConfigError, match="'scrape'"):
        await execute_async([scrape, scrape], tmp_path, {"t": {"url": "http://127.0.0.1:1/"}})
    with pytest.raises(ConfigError, match="no usable name"):
        await execute_async(
            [functools.partial(scrape_with_validation, response_callback=None)], tmp_path, {"t": {}}
        )
    assert list(tmp_path.iterdir()) == []


async def test_nan_timeout_and_non_json_params_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        await execute_async([scrape], tmp_path, {"t": {}}, timeout=float("nan"))
    with pytest.raises(InputError, match="params of task 'o' are not JSON"):
        await execute_async(
            [scrape], tmp_path, {"o": {"url": "http://127.0.0.1:1/", "x": object()}}
        )
    assert not list(tmp_path.glob("*.status.json"))


async def test_a_key_given_twice_runs_once_then_is_skipped(tmp_path: Path, plain_site) -> None:
    params = {"url": plain_site.page_url(1)}
    result = await execute_async(
        [scrape], tmp_path, [("k", params), ("k", params)], max_parallelism=2
    )
    assert result == ["k", "k"]
    assert plain_site.hits("/page/1") == 1
    assert load(tmp_path, "k")["scrape_status"] == "SKIPPED"


async def test_force_executors_may_be_the_string_all(tmp_path: Path, plain_site) -> None:
    await execute_async([scrape], tmp_path, {"a": {"url": plain_site.page_url(1)}})
    await execute_async([scrape], tmp_path, ["a"], force_executors="all")
    assert plain_site.hits("/page/1") == 2
