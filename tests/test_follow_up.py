"""Follow-up tasks: an executor adds the next page of a cursor chain to the running
``execute_async``; every page is fetched once, a re-added page never forks the chain, and a run
cancelled mid-chain resumes at its last page."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scrapeflow.errors import InputError, TaskConflict
from scrapeflow.executor import Context, execute_async
from scrapeflow.sandbox import Sandbox
from scrapeflow.sandbox._feed import FeedSite

SMALL, TINY = "user0001", "user0023"  # 364 posts (8 pages of 50) and 5 posts with seed 0
FIRST = 50
SHARED = re.compile(r"window\._sharedData = (\{.*?\});</script>")


def load(directory: Path, key: str) -> dict[str, Any]:
    return json.loads((directory / f"{key}.status.json").read_text())


def first_page(profile: str) -> dict[str, Any]:
    return {f"{profile}-p1": {"profile": profile, "page": 1, "after": None}}


def page_keys(profile: str, pages: int) -> list[str]:
    return [f"{profile}-p{n}" for n in range(1, pages + 1)]


class FeedChain:
    """A cursor chain over the sandbox feed's JSON API: the executor ``page`` fetches one page
    and adds the next cursor's page as a follow-up task. ``fetched`` counts the answers each
    page got; ``hold`` makes that page wait (until its run is cancelled) once ``held`` is set."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.url = sandbox.urls["feed"]
        self.fetched: Counter[tuple[str, int]] = Counter()
        self.added: list[tuple[str, bool]] = []
        self.added_params: dict[str, dict[str, Any]] = {}  # the last params each key was added with
        self.hold: int | None = None
        self.held = asyncio.Event()
        self.add_twice = False
        self.running = 0
        self.most_running = 0
        self._token: str | None = None

    async def rhx_gis(self, context: Context) -> str:
        if self._token is None:
            async with context.session.get(f"{self.url}/u/{SMALL}") as response:
                html = await response.text()
            self._token = json.loads(SHARED.search(html).group(1))["rhx_gis"]
        return self._token

    async def page(self, context: Context, key: str, status: dict[str, Any]) -> dict[str, Any]:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            return await self._page(context, status["params"])
        finally:
            self.running -= 1

    async def _page(self, context: Context, params: dict[str, Any]) -> dict[str, Any]:
        profile, n = params["profile"], params["page"]
        if n == self.hold:
            self.held.set()
            await asyncio.Event().wait()  # until the run is cancelled
        variables = json.dumps({"id": profile, "first": FIRST, "after": params["after"]})
        token = await self.rhx_gis(context)
        signature = hashlib.md5(f"{token}:{variables}".encode()).hexdigest()
        async with context.session.get(
            f"{self.url}/graphql/query/",
            params={"variables": variables},
            headers={"X-Instagram-GIS": signature},
        ) as response:
            if response.status != 200:
                raise RuntimeError(f"HTTP response {response.status}")
            body = await response.json()
        self.fetched[profile, n] += 1
        media = body["data"]["user"]["edge_owner_to_timeline_media"]
        info = media["page_info"]
        if info["has_next_page"]:
            key = f"{profile}-p{n + 1}"
            follow_up = {"profile": profile, "page": n + 1, "after": info["end_cursor"]}
            self.added_params[key] = follow_up
            for _ in range(2 if self.add_twice else 1):
                self.added.append((key, await context.add_task(key, follow_up)))
        return {"ids": [edge["node"]["id"] for edge in media["edges"]]}


def truth(sandbox: Sandbox, profile: str) -> list[str]:
    feed = sandbox.sites["feed"]
    assert isinstance(feed, FeedSite)
    return feed.post_ids(profile)


def scraped_ids(directory: Path, profile: str, pages: int) -> list[str]:
    return [i for key in page_keys(profile, pages) for i in load(directory, key)["page"]["ids"]]


async def test_cursor_chain_fetches_every_page_once(tmp_path: Path, sandbox: Sandbox) -> None:
    chain = FeedChain(sandbox)
    tasks = first_page(SMALL) | first_page(TINY)

    result = await execute_async([chain.page], tmp_path, tasks, max_parallelism=1)

    # The input tasks in input order, then the follow-ups in the order they were added.
    assert result == [f"{SMALL}-p1", f"{TINY}-p1", *page_keys(SMALL, 8)[1:]]
    assert chain.fetched == {(SMALL, n): 1 for n in range(1, 9)} | {(TINY, 1): 1}
    assert chain.most_running == 1  # follow-ups wait for a free worker like any task
    assert scraped_ids(tmp_path, SMALL, 8) == truth(sandbox, SMALL)
    assert scraped_ids(tmp_path, TINY, 1) == truth(sandbox, TINY)
    second = load(tmp_path, f"{SMALL}-p2")
    assert second["added_by"] == f"{SMALL}-p1"
    assert second["params"]["page"] == 2 and second["page_status"] == "SUCCESS"
    assert load(tmp_path, f"{SMALL}-p1")["follow_ups"] == [f"{SMALL}-p2"]
    assert "follow_ups" not in load(tmp_path, f"{SMALL}-p8")
    assert "added_by" not in load(tmp_path, f"{SMALL}-p1")

    # Run again: the chain is found through the stored follow-ups, and nothing is fetched.
    again = await execute_async([chain.page], tmp_path, list(tasks))

    assert again == result
    assert all(load(tmp_path, key)["page_status"] == "SKIPPED" for key in page_keys(SMALL, 8))
    assert sum(chain.fetched.values()) == 9


async def test_a_readded_page_never_forks_the_chain(tmp_path: Path, sandbox: Sandbox) -> None:
    chain = FeedChain(sandbox)
    chain.add_twice = True

    result = await execute_async([chain.page], tmp_path, first_page(SMALL))

    assert result == page_keys(SMALL, 8)
    assert chain.added == [(f"{SMALL}-p{n}", added) for n in range(2, 9) for added in (True, False)]
    assert chain.fetched == {(SMALL, n): 1 for n in range(1, 9)}

    # Every page retried (forced): each re-adds its next page with a fresh cursor; the chain
    # stays one chain, each page fetched once more and still named by the same eight files.
    chain.add_twice = False
    chain.added.clear()
    forced = await execute_async([chain.page], tmp_path, first_page(SMALL), force_executors=["all"])

    assert forced == page_keys(SMALL, 8)
    # (The stored chain is known: the pages run side by side, so in any order.)
    assert sorted(chain.added) == [(f"{SMALL}-p{n}", False) for n in range(2, 9)]
    assert chain.fetched == {(SMALL, n): 2 for n in range(1, 9)}
    assert sorted(p.name for p in tmp_path.glob("*.status.json")) == sorted(
        f"{key}.status.json" for key in page_keys(SMALL, 8)
    )
    assert scraped_ids(tmp_path, SMALL, 8) == truth(sandbox, SMALL)


async def test_a_cancelled_chain_resumes_at_its_last_page(tmp_path: Path, sandbox: Sandbox) -> None:
    chain = FeedChain(sandbox)
    chain.hold = 5
    run = asyncio.create_task(execute_async([chain.page], tmp_path, first_page(SMALL)))
    await chain.held.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run

    assert chain.fetched == {(SMALL, n): 1 for n in range(1, 5)}
    # Page 5 was saved by page 4 before it was scheduled: the cancel lost nothing.
    fifth = load(tmp_path, f"{SMALL}-p5")
    assert fifth["added_by"] == f"{SMALL}-p4" and "page_status" not in fifth
    assert not (tmp_path / f"{SMALL}-p6.status.json").exists()

    chain.hold = None
    result = await execute_async([chain.page], tmp_path, first_page(SMALL))

    assert result == page_keys(SMALL, 8)
    assert chain.fetched == {(SMALL, n): 1 for n in range(1, 9)}  # no page fetched twice
    assert [load(tmp_path, key)["page_status"] for key in page_keys(SMALL, 8)] == [
        *["SKIPPED"] * 4,
        *["SUCCESS"] * 4,
    ]
    assert scraped_ids(tmp_path, SMALL, 8) == truth(sandbox, SMALL)


async def test_other_params_for_an_existing_key_are_an_error(tmp_path: Path) -> None:
    async def adder(context: Context, key: str, status: dict[str, Any]) -> dict[str, Any]:
        if key == "parent":
            await context.add_task("taken", {"n": 2})
        return {}

    tasks = {"taken": {"n": 1}, "parent": {}}
    with pytest.raises(TaskConflict, match=r"'taken'.*'parent'"):
        await execute_async([adder], tmp_path, tasks, max_parallelism=1)

    assert load(tmp_path, "taken")["params"] == {"n": 1}
    assert load(tmp_path, "parent")["adder_status"].startswith("ERROR TaskConflict::")

    # The same params: nothing to add, no error; an input task stays the input's.
    async def same(context: Context, key: str, status: dict[str, Any]) -> bool:
        return await context.add_task("taken", {"n": 1}) if key == "other" else False

    tasks = {"taken": {"n": 1}, "other": {}}
    result = await execute_async([same], tmp_path / "b", tasks, max_parallelism=1)
    assert result == ["taken", "other"]
    assert load(tmp_path / "b", "other")["same"] is False
    assert "added_by" not in load(tmp_path / "b", "taken")


@pytest.mark.parametrize(
    ("key", "params", "problem"),
    [
        ("../up", {}, "cannot be a file name"),
        ("ok", {"x": object()}, "not JSON"),
        ("ok", [1], "dict"),
    ],
)
async def test_a_bad_follow_up_is_refused_before_it_is_saved(
    tmp_path: Path, key: str, params: Any, problem: str
) -> None:
    async def adder(context: Context, status: dict[str, Any]) -> None:
        await context.add_task(key, params)

    with pytest.raises(InputError, match=problem):
        await execute_async([adder], tmp_path, {"parent": {}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent.status.json"]


async def test_a_parent_cut_after_adding_relinks_its_follow_up(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    chain = FeedChain(sandbox)
    chain.hold = 5
    run = asyncio.create_task(execute_async([chain.page], tmp_path, first_page(SMALL)))
    await chain.held.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    # As if killed between saving page 5 and saving page 4's own result: page 4 did not
    # succeed and does not list page 5, which is saved with page 4's cursor.
    fourth_path = tmp_path / f"{SMALL}-p4.status.json"
    fourth = json.loads(fourth_path.read_text())
    fourth_path.write_text(json.dumps({"name": fourth["name"], "params": fourth["params"]}))

    chain.hold = None
    result = await execute_async([chain.page], tmp_path, first_page(SMALL))

    assert result == page_keys(SMALL, 8)
    # Page 4 is fetched again (it had not succeeded) and re-adds page 5 with a fresh cursor,
    # which replaces the one page 5 never used; every other page is fetched once.
    assert chain.fetched == {(SMALL, n): 2 if n == 4 else 1 for n in range(1, 9)}
    assert chain.added[-4] == (f"{SMALL}-p5", False)
    assert load(tmp_path, f"{SMALL}-p5")["params"] == chain.added_params[f"{SMALL}-p5"]
    assert load(tmp_path, f"{SMALL}-p4")["follow_ups"] == [f"{SMALL}-p5"]
    assert scraped_ids(tmp_path, SMALL, 8) == truth(sandbox, SMALL)
