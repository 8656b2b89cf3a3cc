"""``create_app(settings)``: the service. Its lifespan opens the database (migrated), the keys,
events and webhooks tables, the webhook courier and the job queue; routes reach them through
dependencies."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext

from fastapi import FastAPI
from starlette.types import ASGIApp

from scrapeflow.config import Settings
from scrapeflow.http import EgressPolicy
from scrapeflow.server._accesslog import AccessLog
from scrapeflow.server._auth import Authenticate
from scrapeflow.server._gate import FrontGate
from scrapeflow.server._limits import BodyLimit
from scrapeflow.server._metrics import ServiceMetrics
from scrapeflow.server._openapi import install_openapi
from scrapeflow.server._problems import install_problem_handlers
from scrapeflow.server._state import ServiceState
from scrapeflow.server._streams import StreamDisconnects

__all__ = ["create_app"]


class _ServiceApp(FastAPI):
    """FastAPI with :class:`FrontGate` in front of its whole stack (``add_middleware`` puts a
    middleware inside Starlette's error middleware, and that one inside FastAPI's own)."""

    def build_middleware_stack(self) -> ASGIApp:
        return FrontGate(super().build_middleware_stack(), owner=self)


def create_app(settings: Settings) -> FastAPI:
    """The scrapeflow service on ``settings`` (database, banks, limits: docs/configuration.md).

    >>> app = create_app(Settings.load())  # doctest: +SKIP
    >>> # uvicorn.run(app) — or `scrapeflow serve`
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from scrapeflow.banking import migrate
        from scrapeflow.db import QuickReads, create_engine, session_factory
        from scrapeflow.server._courier import Courier
        from scrapeflow.server._daily import daily_refresh
        from scrapeflow.server._events import EventLog
        from scrapeflow.server._fairuse import JobQuota, StreamSlots
        from scrapeflow.server._keyring import KeyRing
        from scrapeflow.server._keys import open_keys
        from scrapeflow.server._timeshare import TimeShare, mapped_siblings
        from scrapeflow.server._watch import ServiceWatchdog
        from scrapeflow.server._webhooks import Webhooks
        from scrapeflow.server._work import job_queue

        await migrate(settings.db_url)
        engine = create_engine(settings.db_url)
        try:
            await open_keys(engine)
            webhooks = Webhooks(engine)
            await webhooks.open()
            events = EventLog(engine, outbox=webhooks)
            # With procrastinate, workers run the jobs; the service only submits them.
            runs_jobs = settings.jobs_backend == "embedded"
            # The courier stops after the queue: the events of the queue's shutdown are queued
            # for delivery like any (and sent at the next start if not now).
            async with (
                events,
                Courier(engine, settings, events),
                QuickReads(engine) as quick,
                KeyRing(engine, reads=quick) as keyring,
                job_queue(settings, events, engine, run_jobs=runs_jobs) as queue,
            ):
                sessions = session_factory(engine)
                scheduler = daily_refresh(settings, engine, sessions, queue)
                app.state.service = ServiceState(
                    settings=settings,
                    engine=engine,
                    sessions=sessions,
                    queue=queue,
                    events=events,
                    webhooks=webhooks,
                    keys=keyring,
                    quick=quick,
                    egress=EgressPolicy.from_settings(settings),
                    scheduler=scheduler,
                    streams=StreamSlots(
                        per_key=settings.max_streams_per_key, total=settings.max_streams
                    ),
                    job_quota=JobQuota(settings.max_jobs_per_key),
                    time_share=TimeShare(settings.key_time_share, siblings=mapped_siblings()),
                )
                async with (
                    ServiceWatchdog(queue, sessions, settings),
                    scheduler or nullcontext(),
                ):
                    # What start-up made lives as long as the service: out of the collector's
                    # reach, a full collection no longer walks it. It took 150-500 ms, with
                    # every request waiting, and a flood of requests set one off every few
                    # seconds (the stalls of honest reads under a stream flood).
                    gc.freeze()
                    yield
        finally:
            await engine.dispose()

    app = _ServiceApp(
        title="scrapeflow",
        version="1",
        summary="Bank aggregation and scraping jobs: refresh, watch, read.",
        lifespan=lifespan,
        # Off unless api_docs: FastAPI's own pages load Swagger UI from a CDN, with no CSP.
        docs_url=None,
        redoc_url=None,
        # No OpenTelemetry here: FastAPI otherwise asks the global providers on every request
        # whether one was configured (about 5% of a refused event stream's CPU).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    install_problem_handlers(app)
    app.add_middleware(StreamDisconnects)  # innermost: the others see a stream that ended
    app.add_middleware(BodyLimit, max_body=settings.api_max_body)
    # Outside BodyLimit: a client without a key is refused before any of its body is read.
    app.add_middleware(Authenticate)
    app.state.metrics = ServiceMetrics()
    # Added last, so outermost: it also logs and counts what BodyLimit refuses.
    app.add_middleware(AccessLog, metrics=app.state.metrics)
    install_openapi(app)
    from scrapeflow.server.routes import (
        banks,
        customers,
        dashboard,
        erasure,
        events,
        exports,
        jobs,
        keys,
        operations,
        readings,
        schedule,
        sync,
        webhooks,
    )

    app.include_router(banks.router)
    app.include_router(customers.router)
    app.include_router(readings.router)
    app.include_router(erasure.router)
    app.include_router(exports.router)
    app.include_router(sync.router)
    app.include_router(jobs.router)
    app.include_router(events.router)
    app.include_router(webhooks.router)
    app.include_router(schedule.router)
    app.include_router(dashboard.router)
    app.include_router(operations.router)
    app.include_router(keys.router)
    if settings.api_docs:
        from scrapeflow.server.routes.apidocs import install_api_docs

        install_api_docs(app)

    return app
