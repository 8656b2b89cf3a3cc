"""The ``run`` job on the procrastinate backend keeps its task statuses in the service's
PostgreSQL database (namespace: the job id), so a job run again on another machine after a
crash skips what succeeded, and its results are read from there. The embedded backend keeps
its status files."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeflow.config import Settings
from scrapeflow.executor import Context
from scrapeflow.executors import ExecutorRegistry, RunJobs
from scrapeflow.sandbox import Sandbox
from scrapeflow.statusdb import SqlStatusStore
from tests._servers import RunningSite
from tests.server.conftest import Service, running_service
from tests.server.test_jobs_api import all_results, wait_ended

JOB = "job-7f3a"
HELD_BOUND = 30.0


class Marks:
    """A registered executor, ``mark``, that records which "machine" ran each task; tasks whose
    params say ``hold`` wait (until the job is cancelled) while ``holding`` is set."""

    def __init__(self) -> None:
        self.machine = "first"
        self.holding = True
        self.held = asyncio.Event()
        self.ran: list[str] = []
        self.registry = ExecutorRegistry(entry_points=False)
        self.registry.register("mark", lambda: self.mark)

    async def mark(self, context: Context, key: str, status: dict[str, Any]) -> dict[str, Any]:
        if status["params"].get("hold") and self.holding:
            self.held.set()
            await asyncio.Event().wait()
        self.ran.append(key)
        return {"machine": self.machine}


def settings(tmp_path: Path, db_url: str, backend: str, machine: str) -> Settings:
    return Settings.load(
        flags={
            "db_url": db_url,
            "jobs_backend": backend,
            "jobs_dir": tmp_path / machine / "jobs",
        }
    )


PARAMS: dict[str, Any] = {
    "tasks": [{"key": f"t{n}", "params": {"n": n}} for n in range(6)]
    + [{"key": "slow", "params": {"n": 6, "hold": True}}],
    "executors": ["mark"],
    "parallelism": 2,
}
KEYS = [f"t{n}" for n in range(6)] + ["slow"]


async def succeeded(jobs: RunJobs) -> list[str]:
    """The keys of the tasks of job ``JOB`` that succeeded, as its results read them."""
    outcomes = await jobs.outcomes(JOB, PARAMS, active=True, start=0, limit=100)
    return [o.key for o in outcomes if o.state == "succeeded"]


async def test_a_run_job_resumes_on_another_machine_from_the_database(
    tmp_path: Path, pg_url: str
) -> None:
    marks = Marks()
    first = RunJobs.from_settings(
        settings(tmp_path, pg_url, "procrastinate", "first"), registry=marks.registry
    )
    running = asyncio.create_task(first.run(JOB, PARAMS, lambda **counts: None))
    await asyncio.wait_for(marks.held.wait(), HELD_BOUND)
    async with asyncio.timeout(HELD_BOUND):  # the other tasks saved, "slow" held
        while len(await succeeded(first)) < len(KEYS) - 1:
            await asyncio.sleep(0.02)
    running.cancel()  # the first machine dies with the job half done
    with pytest.raises(asyncio.CancelledError):
        await running
    done_first = await succeeded(first)
    assert done_first == KEYS[:-1]
    middle = await first.outcomes(JOB, PARAMS, active=True, start=0, limit=100)
    assert middle[-1].key == "slow" and middle[-1].state == "pending"

    # Another machine: another jobs_dir (nothing of the first's disk), the same database.
    marks.machine, marks.holding = "second", False
    second = RunJobs.from_settings(
        settings(tmp_path, pg_url, "procrastinate", "second"), registry=marks.registry
    )
    counts: dict[str, int] = {}
    summary = await second.run(JOB, PARAMS, lambda **moved: counts.update(moved))
    assert summary["skipped"] == len(done_first)
    assert summary["succeeded"] == len(KEYS) - len(done_first)
    assert sorted(marks.ran) == sorted(KEYS)  # every task ran once, over both machines

    outcomes = await second.outcomes(JOB, PARAMS, active=False, start=0, limit=100)
    assert [o.key for o in outcomes] == KEYS
    assert {o.state for o in outcomes} == {"succeeded"}
    machines = {o.key: o.executors["mark"].output["machine"] for o in outcomes}
    assert machines == {k: "first" if k in done_first else "second" for k in KEYS}
    for machine in ("first", "second"):  # no status file on either disk
        assert not list((tmp_path / machine).rglob("*.status.json"))
    async with SqlStatusStore(pg_url, namespace=JOB) as store:
        assert sorted(await store.keys()) == sorted(KEYS)


async def test_the_embedded_backend_keeps_status_files(tmp_path: Path, sqlite_url: str) -> None:
    marks = Marks()
    marks.holding = False
    jobs = RunJobs.from_settings(
        settings(tmp_path, sqlite_url, "embedded", "local"), registry=marks.registry
    )
    assert jobs.status_db is None
    await jobs.run(JOB, PARAMS, lambda **counts: None)
    files = jobs.directory(JOB)
    assert sorted(p.name for p in files.glob("*.status.json")) == sorted(
        f"{k}.status.json" for k in KEYS
    )
    (files / "t1.status.json").write_text("{cut")
    outcomes = await jobs.outcomes(JOB, PARAMS, active=False, start=0, limit=3)
    assert [o.state for o in outcomes] == ["succeeded", "unreadable", "succeeded"]


@pytest.fixture
def distributed(tmp_path: Path, sandbox: Sandbox, pg_url: str) -> Iterator[Service]:
    """The service on procrastinate, with a worker process that runs the jobs."""
    env = {"SCRAPEFLOW_JOBS_DIR": str(tmp_path / "jobs")}
    with running_service(
        tmp_path, sandbox, pg_url, customers=[], backend="procrastinate", env=env
    ) as running:
        yield running


def test_a_run_job_on_workers_reads_its_results_from_the_database(
    distributed: Service, plain_site: RunningSite, tmp_path: Path
) -> None:
    tasks = [{"key": f"page{n}", "params": {"url": plain_site.page_url(n)}} for n in (1, 2, 3)]
    with distributed.client("jobs", "read") as client:
        created = client.post("/v1/jobs", json={"kind": "run", "params": {"tasks": tasks}})
        assert created.status_code == 202, created.text
        job = wait_ended(client, created.json()["id"])
        assert job["state"] == "succeeded", (job["error"], job["result"])
        items = all_results(client, job["id"], limit=2)
    assert [item["key"] for item in items] == ["page1", "page2", "page3"]
    for item in items:
        assert item["state"] == "succeeded"
        assert item["executors"]["scrape"]["status"] == "SUCCESS"
        assert item["executors"]["scrape"]["output"]["http_status"] == 200
    directory = tmp_path / "jobs" / "run" / job["id"]
    assert not list(directory.glob("*.status.json"))  # the statuses are in the database
    assert sorted(p.name for p in directory.glob("*.scrape")) == [
        f"page{n}.scrape" for n in (1, 2, 3)
    ]

    async def stored() -> dict[str, Any]:
        async with SqlStatusStore(distributed.db_url, namespace=job["id"]) as store:
            return await store.load_many(["page1", "page2", "page3"])

    statuses = asyncio.run(stored())
    assert {key: status["scrape_status"] for key, status in statuses.items()} == {
        f"page{n}": "SUCCESS" for n in (1, 2, 3)
    }


def test_a_run_job_in_batches_spreads_them_and_reads_back_in_order(
    distributed: Service, plain_site: RunningSite
) -> None:
    tasks = [{"key": f"page{n}", "params": {"url": plain_site.page_url(n)}} for n in range(5)]
    with distributed.client("jobs", "read") as client:
        created = client.post(
            "/v1/jobs", json={"kind": "run", "params": {"tasks": tasks, "batches": 2}}
        )
        assert created.status_code == 202, created.text
        job = wait_ended(client, created.json()["id"])
        assert job["state"] == "succeeded", (job["error"], job["result"])
        items = all_results(client, job["id"], limit=2)
        runs = client.get("/v1/jobs", params={"kind": "run"}).json()["jobs"]
        # A listing holds summaries: each batch's tasks are in its own view.
        views = [client.get(f"/v1/jobs/{run['id']}").json() for run in runs]
    result = job["result"]
    assert (result["tasks"], result["succeeded"], result["failed"]) == (5, 5, 0)
    assert len(result["batches"]) == 2
    assert {run["id"] for run in runs} == {job["id"], *result["batches"]}
    batch_sizes = sorted(len(view["params"]["tasks"]) for view in views if view["id"] != job["id"])
    assert batch_sizes == [2, 3]
    assert [item["key"] for item in items] == [f"page{n}" for n in range(5)]
    assert [item["index"] for item in items] == list(range(5))
    assert {item["state"] for item in items} == {"succeeded"}
