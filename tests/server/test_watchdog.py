"""The service runs the bank watchdog itself: an access a dead launch left in progress is reset
without anyone running ``scrapeflow bank watchdog``, and the customer is refreshed again."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from scrapeflow.banking import Access, Customer, ScrapeState
from scrapeflow.db import create_engine

from .conftest import Service, start_service, stop_service
from .test_refresh import wait_all_updated


async def strand(db_url: str, customer: str) -> None:
    """What a launch killed mid-scrape leaves: the customer and its accesses in progress, their
    last heartbeat an hour old."""
    old = datetime.now(UTC) - timedelta(hours=1)
    engine = create_engine(db_url)
    try:
        async with engine.begin() as connection:
            owner = (
                await connection.execute(
                    update(Customer)
                    .where(Customer.external_id == customer)
                    .values(
                        scrape_state=ScrapeState.IN_PROGRESS,
                        heartbeat_at=old,
                        heartbeat_seconds=1.0,
                    )
                    .returning(Customer.id)
                )
            ).scalar_one()
            await connection.execute(
                update(Access)
                .where(Access.customer_id == owner)
                .values(
                    scrape_state=ScrapeState.IN_PROGRESS,
                    scrape_started_at=old,
                    heartbeat_at=old,
                    heartbeat_seconds=1.0,
                )
            )
    finally:
        await engine.dispose()


def test_the_service_resets_what_a_dead_launch_left_in_progress(job_service: Service) -> None:
    """On procrastinate too: the launch a dead worker left is the service's watchdog's to reset
    (workers run no watchdog), and a worker runs the next refresh."""
    stop_service(job_service.process)
    asyncio.run(strand(job_service.db_url, "cust-1"))
    env = {**job_service.env, "SCRAPEFLOW_WATCHDOG_MINUTES": "0.05"}  # a pass every second
    job_service.process, job_service.url = start_service(env)
    with job_service.client("refresh", "read") as client:
        deadline = time.monotonic() + 20
        while True:
            status = client.get("/v1/customers/cust-1/status").json()
            if all(a["state"] != "in_progress" for a in status["accesses"]):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert {a["result"] for a in status["accesses"]} == {"timeout"}
        assert status["state"] != "in_progress"
        job = client.post("/v1/customers/cust-1/refresh").json()
        status = wait_all_updated(client, "cust-1")
        assert {a["result"] for a in status["accesses"]} == {"success"}
        assert client.get(f"/v1/jobs/{job['id']}").json()["state"] == "succeeded"
