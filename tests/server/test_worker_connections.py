"""deployment.md's connection arithmetic, counted: a worker at its busiest (every slot of both
lanes taken, their accesses scraping) holds no more PostgreSQL connections than the page says,
``job_concurrency + refresh_concurrency + 44`` — procrastinate's pool (both lanes and 3), the
events listener, and two engines of 5 + 15 (the worker's, the launcher's)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import asyncpg

from scrapeflow.sandbox import Sandbox

from .conftest import (
    BANKS,
    Service,
    service_env,
    start_service,
    start_worker,
    stop_service,
    stop_worker,
)
from .test_refresh import wait_all_updated

JOB_CONCURRENCY = 4  # the defaults of job_concurrency and refresh_concurrency
REFRESH_CONCURRENCY = 4
CUSTOMERS = [1, 3, 4, 5, 6, 7]


async def connections(dsn: str) -> int:
    """Backends on the test's database now, this one left out."""
    connection = await asyncpg.connect(dsn)
    try:
        count: int = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return count
    finally:
        await connection.close()


def test_a_busy_worker_holds_no_more_connections_than_the_docs_count(
    tmp_path: Path, sandbox: Sandbox, pg_url: str
) -> None:
    env = service_env(tmp_path, sandbox, pg_url, customers=CUSTOMERS, backend="procrastinate")
    dsn = pg_url.replace("postgresql+asyncpg://", "postgresql://")
    for bank in BANKS:  # slow banks: every slot stays busy a while
        sandbox.sites[bank].guard.latency_ms = (200.0, 300.0)
    process, url = start_service(env)
    service = Service(url, env, pg_url, process)
    worker = None
    try:
        time.sleep(6.0)  # the service's own connections opened (its sweep runs every 5 s)
        before = asyncio.run(connections(dsn))
        worker = start_worker(env, concurrency=JOB_CONCURRENCY)
        peak, stop = [0], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], asyncio.run(connections(dsn)))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with service.client("refresh", "read") as client:
                for n in CUSTOMERS:
                    assert client.post(f"/v1/customers/cust-{n}/refresh").status_code == 202
                for n in CUSTOMERS:
                    wait_all_updated(client, f"cust-{n}", seconds=120)
        finally:
            stop.set()
            sampler.join(timeout=10)
    finally:
        if worker is not None:
            stop_worker(worker)
        stop_service(service.process)
    held = peak[0] - before
    documented = JOB_CONCURRENCY + REFRESH_CONCURRENCY + 44
    assert 0 < held <= documented, (held, documented)
