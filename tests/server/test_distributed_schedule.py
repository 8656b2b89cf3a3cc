"""The daily run on the procrastinate backend: two workers keep the schedule by themselves
(the service is not up yet), and every customer is refreshed once; the service, started
after, finds the day run and runs nothing again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from scrapeflow.jobs import JobState, SqlJobStore
from scrapeflow.sandbox import Sandbox

from .conftest import (
    Service,
    service_env,
    start_service,
    start_worker,
    stop_service,
    stop_worker,
)
from .test_events import read
from .test_schedule import noon_zone, scheduled_refreshes, wait_for

CONCURRENCY = 2
CUSTOMERS = [1, 3, 5]  # none with a two-factor login (n % 4 == 2)


async def refreshes_done(db_url: str, count: int, bound: float = 90) -> None:
    store = SqlJobStore(db_url)
    await store.open()
    try:
        async with asyncio.timeout(bound):
            while True:
                done = await store.find(kind="bank.refresh", states=(JobState.SUCCEEDED,))
                if len(done) >= count:
                    return
                await asyncio.sleep(0.2)
    finally:
        await store.close()


def test_the_daily_run_refreshes_each_customer_once_with_two_workers_up(
    tmp_path: Path, sandbox: Sandbox, pg_url: str
) -> None:
    env = service_env(tmp_path, sandbox, pg_url, customers=CUSTOMERS, backend="procrastinate")
    env |= {
        "SCRAPEFLOW_SCHEDULE": "* * * * *",  # fired less than a minute ago: inside the make-up
        "SCRAPEFLOW_SCHEDULE_TIMEZONE": noon_zone(),
        "SCRAPEFLOW_SCHEDULE_WINDOW": "0.05",  # three customers over three seconds
    }
    # The workers alone plan and run the day: the service starts once they are done.
    workers = [
        start_worker(env, concurrency=CONCURRENCY, log=tmp_path / f"worker{n}.log")
        for n in range(2)
    ]
    asyncio.run(refreshes_done(pg_url, len(CUSTOMERS)))
    process, url = start_service(env)
    service = Service(url, env, pg_url, process)
    try:
        with service.client("read") as client:
            body = wait_for(
                client,
                lambda b: b["last_run"] and b["last_run"]["finished_at"],
                "the run to end",
                bound=90,
            )
            run = body["last_run"]
            assert run["planned"] == run["submitted"] == len(CUSTOMERS)
            assert run["jobs"] == {"succeeded": len(CUSTOMERS)}
            assert scheduled_refreshes(client) == ["cust-1", "cust-3", "cust-5"]
            # What the workers did before any service ran is in the event log all the same.
            stream = "/v1/customers/cust-1/events"
            told = [e["event"] for e in read(client, stream, until="job.succeeded")]
            assert told[:2] == ["job.queued", "job.running"] and "bank.all_updated" in told
            for customer in ("cust-1", "cust-3", "cust-5"):
                status = client.get(f"/v1/customers/{customer}/status").json()
                assert status["all_updated"] is True
                assert {a["result"] for a in status["accesses"]} == {"success"}
            ran_on = {
                job["id"]: job
                for job in client.get("/v1/jobs", params={"kind": "bank.refresh"}).json()["jobs"]
            }
            assert all(job["attempts"] == 1 for job in ran_on.values())
    finally:
        stop_service(service.process)
        codes = [stop_worker(process) for process in workers]
    assert codes == [0, 0]
