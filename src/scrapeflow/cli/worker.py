"""``scrapeflow worker``: runs the service's jobs on this machine, for a service whose
``jobs_backend`` is ``procrastinate`` (any number of workers, on any machines, one PostgreSQL)."""

from __future__ import annotations

import asyncio
import signal
from contextlib import nullcontext
from typing import TYPE_CHECKING, Annotated

import typer

from scrapeflow.cli._common import fail, input_errors, out, settings

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = ["worker"]


def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1_000,
            help="Jobs run at once (SCRAPEFLOW_JOB_CONCURRENCY).",
            show_default="4",
        ),
    ] = None,
) -> None:
    """Run jobs until SIGTERM or Ctrl-C; print a line once it takes jobs.

    Needs ``jobs_backend = "procrastinate"`` and the service's PostgreSQL ``db_url`` (and the
    same vault key, banks and stores: a job may run on any worker). At SIGTERM it takes no new
    job; running ones get 10 s, then go back to the queue for another worker. Like the
    service, it keeps the daily schedule: the day's run is planned and each customer's refresh
    queued once, whichever of them looks first, so the run happens while any of them is up.
    """
    config = settings(
        ctx, job_concurrency=concurrency, flag_names={"job_concurrency": "--concurrency"}
    )
    if config.jobs_backend != "procrastinate":
        fail(
            "a worker runs the jobs of the procrastinate backend: set "
            f"{config.variable('jobs_backend')}=procrastinate (and a PostgreSQL db_url)"
        )
    with input_errors():
        stopped = asyncio.run(_work(config))
    if not stopped:
        fail("the worker stopped by itself (see the log above)", code=1)


async def _work(config: Settings) -> bool:
    from scrapeflow.banking import migrate
    from scrapeflow.db import create_engine, session_factory
    from scrapeflow.server._daily import daily_refresh
    from scrapeflow.server._events import EventLog
    from scrapeflow.server._webhooks import Webhooks
    from scrapeflow.server._work import job_queue

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await migrate(config.db_url)
    engine = create_engine(config.db_url)
    try:
        webhooks = Webhooks(engine)  # what an event calls for is written with it, here too
        await webhooks.open()
        events = EventLog(engine, outbox=webhooks.enqueue)
        async with (
            events,
            job_queue(config, events, engine, run_jobs=True) as queue,
            # The daily run too: planned once a day whichever process (the service, a worker)
            # looks first, each customer's slot submitted by one of them.
            daily_refresh(config, engine, session_factory(engine), queue) or nullcontext(),
        ):
            out.print(
                f"worker taking jobs ({config.job_concurrency} at once)",
                highlight=False,
                soft_wrap=True,
            )
            asked = asyncio.ensure_future(stop.wait())
            running = getattr(queue, "worker", None)
            waited = {asked} if running is None else {asked, running}
            await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            asked.cancel()
            return stop.is_set()
    finally:
        await engine.dispose()
