"""Follow-up jobs: a job queues the next one under a key, and a job run again queues the same
one, never a second; Aerocene's cursor chain as ``feed.page`` jobs, on one process and on two
``scrapeflow worker`` processes through injected 5xx answers and a worker's SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeflow.errors import InputError
from scrapeflow.fetch import FEED_PAGE_KIND, FeedChainJobs, chain_posts
from scrapeflow.http import HttpConfig
from scrapeflow.jobs import (
    EmbeddedJobQueue,
    Job,
    JobContext,
    JobState,
    Lane,
    ProcrastinateJobQueue,
    SqlJobStore,
)
from scrapeflow.sandbox import Sandbox, SandboxConfig
from scrapeflow.sandbox._feed import FeedSite

BOUND = 120.0  # seconds any wait below may take on a loaded machine


def feed_truth(sandbox: Sandbox, profile: str) -> list[str]:
    feed = sandbox.sites["feed"]
    assert isinstance(feed, FeedSite)
    return feed.post_ids(profile)


async def chain_of(queue: Any, first: Job) -> list[Job]:
    """The jobs of a finished chain, first to last, by their ``follow_up`` links."""
    jobs = []
    job: Job | None = await queue.get(first.id)
    while job is not None:
        jobs.append(job)
        following = (job.result or {}).get("follow_up")
        job = None if following is None else await queue.get(following)
    return jobs


async def test_a_job_run_again_queues_the_same_follow_up(sql_url: str) -> None:
    """Each run of ``step`` queues the next step, and the first step queues its follow-up
    twice, as a job run again after a crash would: one job per step, the chain unforked."""
    seen: Counter[int] = Counter()

    async def step(context: JobContext) -> dict[str, Any]:
        n = int(context.params["n"])
        seen[n] += 1
        result: dict[str, Any] = {"n": n}
        if n < 5:
            tries = 2 if n == 1 else 1
            queued = [
                await context.submit("step", {"n": n + 1}, key=f"step-{n + 1}")
                for _ in range(tries)
            ]
            assert len({job.id for job in queued}) == 1
            result["follow_up"] = queued[0].id
        return result

    async with EmbeddedJobQueue(SqlJobStore(sql_url), {"step": step}, poll=0.05) as queue:
        first = await queue.submit("step", {"n": 1})
        async with asyncio.timeout(BOUND):
            while len(await queue.find(kind="step", states=(JobState.SUCCEEDED,))) < 5:
                await asyncio.sleep(0.05)
        jobs = await chain_of(queue, first)
        everything = await queue.find(kind="step")

    assert [job.params["n"] for job in jobs] == [1, 2, 3, 4, 5]
    assert len(everything) == 5 and seen == dict.fromkeys(range(1, 6), 1)
    assert [job.id for job in jobs] == sorted(job.id for job in jobs)  # ids sort in chain order


async def test_a_follow_up_key_is_checked(sql_url: str) -> None:
    problems: list[str] = []

    async def bad(context: JobContext) -> None:
        for key in ("", "k" * 201):
            try:
                await context.submit("bad", key=key)
            except InputError as exc:
                problems.append(str(exc))

    async with EmbeddedJobQueue(SqlJobStore(sql_url), {"bad": bad}, poll=0.05) as queue:
        job = await queue.submit("bad")
        async with asyncio.timeout(BOUND):
            done = await queue.wait(job.id)
        assert done.state is JobState.SUCCEEDED
        assert len(await queue.find(kind="bad")) == 1
    assert problems == ["a follow-up's key is a string of 1 to 200 characters"] * 2


async def test_a_feed_chain_in_one_process_reads_every_post_once(sql_url: str) -> None:
    config = SandboxConfig(hostility="none", latency_ms=(0, 0), customers=10)
    async with Sandbox(config) as sandbox:
        jobs = FeedChainJobs(HttpConfig(max_connections=8))
        kinds = {FEED_PAGE_KIND: jobs.run}
        params = {"url": sandbox.urls["feed"], "profile": "user0001", "first": 50}
        async with EmbeddedJobQueue(SqlJobStore(sql_url), kinds, poll=0.05) as queue:
            first = await queue.submit(FEED_PAGE_KIND, params)
            chain = await wait_chain(queue, first)
            posts = await chain_posts(queue, first)
        await jobs.aclose()
        truth = feed_truth(sandbox, "user0001")

    assert len(truth) == 364 and posts == truth  # 8 pages of 50, none lost or repeated
    assert [job.result["page"] for job in chain if job.result] == list(range(1, 9))
    assert {job.result["chain"] for job in chain if job.result} == {first.id}
    assert all(job.attempts == 1 for job in chain)


async def wait_chain(queue: Any, first: Job) -> list[Job]:
    """The chain from ``first`` once its last page has ended (bounded)."""
    async with asyncio.timeout(BOUND):
        while True:
            chain = await chain_of(queue, first)
            last = chain[-1]
            if last.state.final and (
                last.state is not JobState.SUCCEEDED
                or not last.result
                or last.result.get("follow_up") is None
            ):
                return chain
            await asyncio.sleep(0.2)


async def test_bad_feed_params_fail_the_job_and_queue_nothing(sql_url: str) -> None:
    kinds = {FEED_PAGE_KIND: FeedChainJobs(HttpConfig(max_connections=2)).run}
    async with EmbeddedJobQueue(SqlJobStore(sql_url), kinds, poll=0.05) as queue:
        bad = [
            {"profile": "user0001"},
            {"url": "ftp://x/", "profile": "user0001"},
            {"url": "http://127.0.0.1:9/", "profile": "../etc"},
            {"url": "http://127.0.0.1:9/", "profile": "user0001", "first": 51},
            {"url": "http://127.0.0.1:9/", "profile": "user0001", "page": 2},
        ]
        jobs = [await queue.submit(FEED_PAGE_KIND, params) for params in bad]
        async with asyncio.timeout(BOUND):
            ended = [await queue.wait(job.id) for job in jobs]
        assert len(await queue.find(kind=FEED_PAGE_KIND)) == len(bad)
    assert [job.state for job in ended] == [JobState.FAILED] * len(bad)
    named = ["'url'", "'url'", "'profile'", "'first'", "'after'"]
    for job, name in zip(ended, named, strict=True):
        assert job.error is not None and job.error.startswith("InputError: a feed page's " + name)


# -- across worker processes ------------------------------------------------------------------

PROFILE, FIRST, PAGES = "user0000", 7, 500  # 3,499 posts with seed 0: 500 pages of 7


@pytest.fixture
def feed_sandbox() -> Iterator[Sandbox]:
    """The feed answering 3 requests in 100 with a 500, 502 or 503, each page after 5 ms."""
    config = SandboxConfig(
        hostility="none", switches={"error_rate": 0.03}, latency_ms=(5, 5), customers=10
    )
    with Sandbox.in_thread(config) as sandbox:
        yield sandbox


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("a") as errors:
        worker = subprocess.Popen(
            [sys.executable, "-m", "scrapeflow", "worker", "--concurrency", "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if not line.startswith("worker taking jobs"):
        worker.kill()
        raise AssertionError(f"the worker did not start: {line!r} {log.read_text()[-2000:]}")
    return worker


def stop(worker: subprocess.Popen[str]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    if worker.stdout is not None:
        worker.stdout.close()


async def test_a_500_page_chain_ends_exactly_once_through_5xx_and_a_killed_worker(
    pg_url: str, feed_sandbox: Sandbox, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "SCRAPEFLOW_DB_URL": pg_url,
        "SCRAPEFLOW_JOBS_BACKEND": "procrastinate",
        "SCRAPEFLOW_JOB_HEARTBEAT": "1",
        "SCRAPEFLOW_JOBS_DIR": str(tmp_path / "jobs"),
        "SCRAPEFLOW_LOG_DIR": str(tmp_path / "logs"),
        "PYTHONUNBUFFERED": "1",
    }
    params = {"url": feed_sandbox.urls["feed"], "profile": PROFILE, "first": FIRST}
    async with ProcrastinateJobQueue(
        pg_url, {FEED_PAGE_KIND: FeedChainJobs(HttpConfig()).run}, run_jobs=False
    ) as queue:
        workers = [start_worker(env, tmp_path / f"worker{n}.log") for n in range(2)]
        try:
            first = await queue.submit(FEED_PAGE_KIND, params)
            killed = await kill_the_worker_of_a_page(
                queue,
                workers,
                lambda: start_worker(env, tmp_path / "replacement.log"),
                after_pages=100,
            )
            chain = await wait_chain(queue, first)
            posts = await chain_posts(queue, first)
            pages = await queue.find(kind=FEED_PAGE_KIND, limit=1000)
        finally:
            for worker in workers:
                stop(worker)

    truth = feed_truth(feed_sandbox, PROFILE)
    assert len(truth) == 3499 and posts == truth
    assert len(chain) == PAGES and len(pages) == PAGES  # nothing forked off the chain
    assert Counter(job.params.get("page", 1) for job in pages) == dict.fromkeys(
        range(1, PAGES + 1), 1
    )
    assert all(job.state is JobState.SUCCEEDED for job in pages)
    again = next(job for job in pages if job.id == killed)
    assert again.attempts == 2  # run again on the other worker, after its first one was killed
    feed = feed_sandbox.sites["feed"]
    assert isinstance(feed, FeedSite)
    assert feed.guard.stats.get("errors", 0) >= 5  # the 5xx answers the HTTP layer rode out


async def kill_the_worker_of_a_page(
    queue: ProcrastinateJobQueue,
    workers: list[subprocess.Popen[str]],
    start: Callable[[], subprocess.Popen[str]],
    *,
    after_pages: int,
) -> str:
    """Once ``after_pages`` pages have succeeded, SIGKILL the worker running the current page;
    the id of the page it left running.

    A page takes a few milliseconds, so the one seen running may end before the signal lands:
    then the kill cut nothing, a new worker takes the dead one's place and the next page's
    worker is killed instead."""
    started = time.monotonic()
    while time.monotonic() - started < BOUND:
        done = await queue.find(kind=FEED_PAGE_KIND, states=(JobState.SUCCEEDED,), limit=1000)
        if len(done) >= after_pages:
            pids = {worker.pid: worker for worker in workers}
            for job in await queue.find(kind=FEED_PAGE_KIND, states=(JobState.RUNNING,)):
                pid = int((job.owner or "x:0").split(":")[1])
                if pid in pids:
                    pids[pid].send_signal(signal.SIGKILL)
                    pids[pid].wait()
                    if (await queue.get(job.id)).state is JobState.RUNNING:
                        return job.id
                    stop(pids[pid])  # dead: its pipe closed
                    workers[workers.index(pids[pid])] = start()
                    break
        await asyncio.sleep(0.01)
    raise AssertionError(f"no page was running after {after_pages} pages")


# -- parts: a job waits for the follow-ups it queued ------------------------------------------


class Parts:
    """A ``whole`` job that queues ``n`` ``part`` jobs and joins them; a part sleeps ``pause``
    (or waits until cancelled with ``hang``), and notes which queue process ran it."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.cancelled: set[int] = set()

    def kinds(self, name: str) -> dict[str, Any]:
        async def whole(context: JobContext) -> dict[str, Any]:
            n = int(context.params["n"])
            params = {k: v for k, v in context.params.items() if k != "n"}
            parts = [
                await context.submit("part", params | {"i": i}, key=f"part-{i}") for i in range(n)
            ]
            ended = await context.join(parts)
            return {"parts": [job.result for job in ended], "states": [j.state for j in ended]}

        async def part(context: JobContext) -> dict[str, Any]:
            i = int(context.params["i"])
            try:
                if context.params.get("hang"):
                    await asyncio.Event().wait()
                await asyncio.sleep(float(context.params.get("pause", 0)))
            except asyncio.CancelledError:
                self.cancelled.add(i)
                raise
            self.ran[name] += 1
            return {"i": i, "on": name}

        return {"whole": whole, "part": part}


async def test_a_job_waiting_for_its_parts_runs_them_when_no_slot_is_free(sql_url: str) -> None:
    parts = Parts()
    store = SqlJobStore(sql_url)
    async with EmbeddedJobQueue(store, parts.kinds("one"), concurrency=1, poll=0.05) as queue:
        wholes = [await queue.submit("whole", {"n": 3, "pause": 0.05}) for _ in range(2)]
        async with asyncio.timeout(BOUND):
            ended = [await queue.wait(job.id) for job in wholes]
        every_part = await queue.find(kind="part")

    assert [job.state for job in ended] == [JobState.SUCCEEDED] * 2
    for job in ended:
        assert job.result is not None
        assert [part["i"] for part in job.result["parts"]] == [0, 1, 2]
        assert job.result["states"] == ["succeeded"] * 3
    assert len(every_part) == 6 and parts.ran["one"] == 6


async def test_cancelling_a_job_cancels_the_parts_it_waits_for(sql_url: str) -> None:
    parts = Parts()
    store = SqlJobStore(sql_url)
    async with EmbeddedJobQueue(store, parts.kinds("one"), poll=0.05) as queue:
        whole = await queue.submit("whole", {"n": 2, "hang": True})
        async with asyncio.timeout(BOUND):
            while len(await queue.find(kind="part", states=(JobState.RUNNING,))) < 2:
                await asyncio.sleep(0.05)
            await queue.cancel(whole.id)
            ended = await queue.wait(whole.id)
            every_part = [await queue.wait(job.id) for job in await queue.find(kind="part")]
    assert ended.state is JobState.CANCELLED
    assert [job.state for job in every_part] == [JobState.CANCELLED] * 2
    assert parts.cancelled == {0, 1}


async def test_parts_spread_over_procrastinate_workers_whose_slots_all_wait(pg_url: str) -> None:
    """Two workers of one slot each, two jobs of three parts: both slots hold a waiting job,
    and every part still runs — in its parent's delivery, or on the other worker."""
    parts = Parts()
    timings: dict[str, Any] = {"heartbeat": 0.5, "stalled_after": 2.0, "sweep_every": 1}
    timings |= {"poll": 0.2, "grace": 2.0, "concurrency": 1}
    async with (
        ProcrastinateJobQueue(pg_url, parts.kinds("a"), **timings) as a,
        ProcrastinateJobQueue(pg_url, parts.kinds("b"), **timings),
    ):
        wholes = [await a.submit("whole", {"n": 3, "pause": 0.3}) for _ in range(2)]
        async with asyncio.timeout(BOUND):
            ended = [await a.wait(job.id) for job in wholes]
        every_part = await a.find(kind="part")

    assert [job.state for job in ended] == [JobState.SUCCEEDED] * 2
    for job in ended:
        assert job.result is not None and job.result["states"] == ["succeeded"] * 3
    assert len(every_part) == 6 and all(job.attempts == 1 for job in every_part)
    assert parts.ran["a"] + parts.ran["b"] == 6 and parts.ran["a"] and parts.ran["b"]


async def test_cancelling_a_job_cancels_its_parts_on_any_worker(pg_url: str) -> None:
    parts = Parts()
    timings: dict[str, Any] = {"heartbeat": 0.5, "stalled_after": 2.0, "sweep_every": 1}
    timings |= {"poll": 0.2, "grace": 2.0}
    async with (
        ProcrastinateJobQueue(pg_url, parts.kinds("a"), concurrency=1, **timings) as a,
        ProcrastinateJobQueue(pg_url, parts.kinds("b"), concurrency=4, **timings),
    ):
        whole = await a.submit("whole", {"n": 3, "hang": True})
        async with asyncio.timeout(BOUND):
            while len(await a.find(kind="part", states=(JobState.RUNNING,))) < 3:
                await asyncio.sleep(0.05)
            await a.cancel(whole.id)
            ended = await a.wait(whole.id)
            every_part = [await a.wait(job.id) for job in await a.find(kind="part")]
    assert ended.state is JobState.CANCELLED
    assert [job.state for job in every_part] == [JobState.CANCELLED] * 3
    assert parts.cancelled == {0, 1, 2}


async def test_parts_another_worker_ran_while_this_one_had_no_place_for_them(pg_url: str) -> None:
    """Worker a's only place for parts is held by a job that hangs when its ``whole`` queues
    two parts: a waits for that place to run them, and worker b, started then, runs both. The
    ``whole`` ends succeeded with both parts' results while that place is still held (a join
    that ended with tasks still waiting for a place failed the job)."""
    parts = Parts()
    timings: dict[str, Any] = {"heartbeat": 0.5, "stalled_after": 2.0, "sweep_every": 1}
    timings |= {"poll": 0.2, "grace": 2.0, "concurrency": 1}
    lane = Lane("parts", frozenset({"part"}), 1)
    async with ProcrastinateJobQueue(pg_url, parts.kinds("a"), lanes=[lane], **timings) as a:
        slow = await a.submit("part", {"i": 99, "hang": True})
        async with asyncio.timeout(BOUND):
            while (await a.get(slow.id)).state is not JobState.RUNNING:  # type: ignore[union-attr]
                await asyncio.sleep(0.05)
            whole = await a.submit("whole", {"n": 2})
            while len(await a.find(kind="part", states=(JobState.QUEUED,))) < 2:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # a's join has looked, and waits for the place
            async with ProcrastinateJobQueue(pg_url, parts.kinds("b"), lanes=[lane], **timings):
                ended = await a.wait(whole.id)
            assert (await a.get(slow.id)).state is JobState.RUNNING  # type: ignore[union-attr]
            await a.cancel(slow.id)
            assert (await a.wait(slow.id)).state is JobState.CANCELLED

    assert ended.state is JobState.SUCCEEDED, ended.error
    assert ended.result is not None and ended.result["states"] == ["succeeded"] * 2
    assert [part["on"] for part in ended.result["parts"]] == ["b", "b"]
    assert parts.ran == {"b": 2} and parts.cancelled == {99}
