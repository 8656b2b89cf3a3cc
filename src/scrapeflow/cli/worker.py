"""``scrapeflow worker``: runs the service's jobs on this machine, for a service whose
``jobs_backend`` is ``procrastinate`` (any number of workers, on any machines, one PostgreSQL)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from scrapeflow.cli._common import fail, input_errors, out, settings

if TYPE_CHECKING:
    import asyncio

    from sqlalchemy.ext.asyncio import AsyncEngine

    from scrapeflow.config import Settings
    from scrapeflow.server._events import EventLog

__all__ = ["worker"]

_FIRST_PAUSE = 1.0
_MOST_PAUSE = 30.0


def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1_000,
            help="Fetch and run jobs run at once (SCRAPEFLOW_JOB_CONCURRENCY); refreshes "
            "have their own lane (SCRAPEFLOW_REFRESH_CONCURRENCY).",
            show_default="4",
        ),
    ] = None,
) -> None:
    """Run jobs until SIGTERM or Ctrl-C; print a line once it takes jobs.

    Needs ``jobs_backend = "procrastinate"`` and the service's PostgreSQL ``db_url`` (and the
    same vault key, banks and stores: a job may run on any worker). At SIGTERM it takes no new
    job; running ones get 10 s, then go back to the queue for another worker. A database that
    goes away stops its job worker: it starts it again once the database answers. Like the
    service, it keeps the daily schedule: the day's run is planned and each customer's refresh
    queued once, whichever of them looks first, so the run happens while any of them is up.
    """
    import asyncio

    config = settings(
        ctx, job_concurrency=concurrency, flag_names={"job_concurrency": "--concurrency"}
    )
    if config.jobs_backend != "procrastinate":
        fail(
            "a worker runs the jobs of the procrastinate backend: set "
            f"{config.variable('jobs_backend')}=procrastinate (and a PostgreSQL db_url)"
        )
    with input_errors():
        from scrapeflow.jobs import ProcrastinateJobQueue  # noqa: F401  (the extra, or exit 2)

        asyncio.run(_work(config))


async def _work(config: Settings) -> None:
    """Take jobs until SIGTERM or SIGINT. When the job worker stops by itself (the database
    went away: procrastinate's worker does not ride an outage out), start it again, waiting
    1, 2, 4… (at most 30) seconds between tries, until the database answers again."""
    import asyncio
    import contextlib
    import signal

    from scrapeflow._util.logs import get_logger
    from scrapeflow._util.redact import redact
    from scrapeflow.banking import migrate
    from scrapeflow.db import create_engine
    from scrapeflow.server._events import EventLog
    from scrapeflow.server._keys import open_keys
    from scrapeflow.server._webhooks import Webhooks

    log = get_logger(__name__)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await migrate(config.db_url)
    engine = create_engine(config.db_url)
    try:
        await open_keys(engine)  # the webhooks' outbox reads the keys: a worker may start first
        webhooks = Webhooks(engine)  # what an event calls for is written with it, here too
        await webhooks.open()
        pause, first = _FIRST_PAUSE, True
        async with EventLog(engine, outbox=webhooks) as events:
            while not stop.is_set():
                try:
                    ran = await _take_jobs(config, engine, events, stop, announce=first)
                except Exception as exc:  # could not start: the database is still away
                    log.warning("the job worker could not start", error=redact(repr(exc)))
                    ran = False
                if stop.is_set():
                    return
                first = False if ran else first
                pause = _FIRST_PAUSE if ran else min(pause * 2, _MOST_PAUSE)
                log.warning("the job worker stopped: starting it again", seconds=pause)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await stop.wait()
    finally:
        await engine.dispose()


async def _take_jobs(
    config: Settings, engine: AsyncEngine, events: EventLog, stop: asyncio.Event, *, announce: bool
) -> bool:
    """Run the job queue (and the daily schedule) until ``stop``, or until the queue's worker
    ends by itself; True once it was taking jobs."""
    import asyncio
    from contextlib import nullcontext

    from scrapeflow._util.logs import get_logger
    from scrapeflow.db import session_factory
    from scrapeflow.server._daily import daily_refresh
    from scrapeflow.server._work import job_queue

    async with (
        job_queue(config, events, engine, run_jobs=True) as queue,
        # The daily run too: planned once a day whichever process (the service, a worker)
        # looks first, each customer's slot submitted by one of them.
        daily_refresh(config, engine, session_factory(engine), queue) or nullcontext(),
    ):
        if announce:
            out.print(
                f"worker taking jobs ({config.job_concurrency} fetch and run jobs and "
                f"{config.refresh_concurrency} refreshes at once)",
                highlight=False,
                soft_wrap=True,
            )
        else:
            get_logger(__name__).warning("the job worker is taking jobs again")
        asked = asyncio.ensure_future(stop.wait())
        running = getattr(queue, "worker", None)
        waited = {asked} if running is None else {asked, running}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        asked.cancel()
    return True
