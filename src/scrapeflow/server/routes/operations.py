"""Running the service: ``/healthz`` (the process is up), ``/readyz`` (and its database is usable:
reachable, migrations at the head), ``/metrics`` (Prometheus) and ``/v1/stats`` (the same
numbers as JSON, for the dashboard). See ``docs/operations.md``.

The metrics count over every customer: a key restricted to customers may not read them."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Response
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from scrapeflow._util.logs import get_logger
from scrapeflow._util.redact import redact
from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._metrics import Readings, ServiceMetrics, service_metrics
from scrapeflow.server._problems import PROBLEM_JSON, Problem
from scrapeflow.server._schemas import StatsOut

__all__ = ["healthz", "metrics", "readyz", "router", "stats"]

router = APIRouter(tags=["operations"])
_log = get_logger(__name__)


async def _watcher(key: Annotated[ApiKey, Depends(caller_with(Scope.METRICS))]) -> ApiKey:
    """A dependency: the caller's key, with the ``metrics`` scope and no customer restriction
    (403 otherwise)."""
    if key.customers:
        raise Problem(
            403,
            "forbidden",
            "this key is restricted to customers, and the metrics cover every customer",
        )
    return key


Watcher = Annotated[ApiKey, Depends(_watcher)]
Metrics = Annotated[ServiceMetrics, Depends(service_metrics)]
_READY_TIMEOUT = 5.0
"""Seconds the database has to answer a readiness check."""
_PROBLEM = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (no authentication)."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={
        503: {
            "description": "The database is unreachable, or its migrations are not at the head.",
            "content": _PROBLEM,
        }
    },
)
async def readyz(state: State) -> dict[str, str]:
    """The service can serve: its database answers and its migrations are at the head
    revision (no authentication). Otherwise 503, naming what is wrong (for an unreachable
    database, only that: the driver's reason may name the database's user or host, so it goes
    to the log)."""
    problem = await _unready(state)
    if problem is not None:
        raise Problem(503, "not-ready", problem)
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "The Prometheus text format (OpenMetrics when asked for).",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        401: {"description": "No valid API key.", "content": _PROBLEM},
        403: {
            "description": "The key lacks the metrics scope, or is restricted to customers.",
            "content": _PROBLEM,
        },
        429: {"description": "Too many failed authentications.", "content": _PROBLEM},
    },
)
async def metrics(
    state: State,
    watcher: Watcher,
    service: Metrics,
    accept: Annotated[str, Header(include_in_schema=False)] = "",
) -> Response:
    """Every metric, in the Prometheus text format (scope ``metrics``; Prometheus sends the
    key as ``Authorization: Bearer``)."""
    body, content_type = await service.exposition(state, accept)
    return Response(body, headers={"Content-Type": content_type})


@router.get("/v1/stats", response_model=StatsOut)
async def stats(state: State, watcher: Watcher, service: Metrics) -> StatsOut:
    """The service's numbers as JSON (scope ``metrics``): jobs, customers, live clients, the
    outbox and the write queue, outgoing HTTP, the API, the machine."""
    return _stats_of(await service.read(state))


def _stats_of(readings: Readings) -> StatsOut:
    traffic = readings.traffic.values()
    machine = readings.machine
    return StatsOut.model_validate(
        {
            "jobs": readings.jobs_by_state(),
            "jobs_by_kind": readings.jobs,
            "customers": readings.customers,
            "sse_clients": readings.sse_clients,
            "webhook_backlog": readings.webhook_backlog,
            "write_queue_depth": readings.write_queue_depth,
            "http": {
                "requests": sum(t.requests for t in traffic),
                "retries": sum(t.retries for t in traffic),
                "bans": sum(t.bans + t.captchas for t in traffic),
                "hosts": len(readings.traffic),
            },
            "api": {"requests": readings.api_requests, "errors": readings.api_errors},
            "machine": {
                "cpu_percent": machine.cpu_percent,
                "memory_percent": machine.memory_percent,
                "load": machine.load,
                "rss_bytes": machine.rss_bytes,
            },
            "uptime_seconds": readings.uptime_seconds,
        }
    )


async def _unready(state: State) -> str | None:
    """What keeps the service from serving, or None."""
    from scrapeflow.banking import MIGRATIONS_DIR

    url = state.settings.db_url
    try:
        async with asyncio.timeout(_READY_TIMEOUT), state.engine.connect() as connection:
            current = await connection.run_sync(_revision)
    except TimeoutError:
        _log.warning("database unreachable", reason=f"no answer in {_READY_TIMEOUT:g} s")
        return "database unreachable"
    except (OSError, SQLAlchemyError) as exc:
        _log.warning("database unreachable", reason=_reason(exc, url))
        return "database unreachable"
    head = _head(str(MIGRATIONS_DIR))
    if current == head:
        return None
    if current is None:
        return f"migrations missing: the database has no migration revision, head is {head}"
    if current in _known(str(MIGRATIONS_DIR)):
        return f"migrations behind: at {current}, head is {head}"
    return f"migrations unknown: at {current}, which this version does not hold; head is {head}"


def _revision(connection: Connection) -> str | None:
    if not connection.dialect.has_table(connection, "alembic_version"):
        return None
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    return str(rows[0][0]) if len(rows) == 1 else None


@functools.cache
def _head(script_location: str) -> str:
    from alembic.script import ScriptDirectory

    return ", ".join(sorted(ScriptDirectory(script_location).get_heads()))


@functools.cache
def _known(script_location: str) -> frozenset[str]:
    from alembic.script import ScriptDirectory

    return frozenset(s.revision for s in ScriptDirectory(script_location).walk_revisions())


def _reason(exc: BaseException, url: str) -> str:
    """The error's first line, without the URL's password (a driver may quote its DSN)."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    reason = redact(lines[0] if lines else type(orig).__name__)[:200]
    try:
        password = make_url(url).password
    except ArgumentError:
        password = None
    if password:
        reason = reason.replace(str(password), "***")
    return reason or type(orig).__name__
