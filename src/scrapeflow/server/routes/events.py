"""Server-sent events: ``/v1/customers/{customer}/events`` and ``/v1/jobs/{job_id}/events``.

Each event carries its stored id; reconnecting with ``Last-Event-ID`` (or ``?after=``) resumes
right after it: no gap, no duplicate. A job's stream ends with its final ``job.*`` event; a
customer's stream goes on until the client leaves (keep-alive comments keep proxies open).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent

from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._events import Event
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._metrics import ServiceMetrics, service_metrics
from scrapeflow.server._problems import Problem
from scrapeflow.server.routes.customers import CustomerReader
from scrapeflow.server.routes.jobs import visible_job

__all__ = ["customer_events", "job_events", "router"]

router = APIRouter(tags=["events"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID", max_length=20)]
After = Annotated[int | None, Query(ge=0, description="resume after this event id")]
Metrics = Annotated[ServiceMetrics, Depends(service_metrics)]


def _start(last_event_id: str | None, after: int | None) -> int:
    if after is not None:
        return after
    if last_event_id is None or not last_event_id.strip():
        return 0
    if not last_event_id.strip().isdigit():
        raise Problem(422, "invalid-request", "Last-Event-ID must be an event id (digits)")
    return int(last_event_id)


def _sse(event: Event) -> ServerSentEvent:
    return ServerSentEvent(id=str(event.id), event=event.kind, data=event.as_dict())


async def _readable_job(job_id: str, state: State, key: Reader) -> str:
    return (await visible_job(state, key, job_id)).id


def _start_from(last_event_id: LastEventId = None, after: After = None) -> int:
    return _start(last_event_id, after)


@router.get("/v1/customers/{customer}/events", response_class=EventSourceResponse)
async def customer_events(
    customer: str,
    key: CustomerReader,  # checked before the stream starts: after, errors can't be 4xx
    state: State,
    start: Annotated[int, Depends(_start_from)],
    metrics: Metrics,
) -> AsyncIterator[ServerSentEvent]:
    """Everything that happens to the customer, live: refresh jobs queued, started and ended,
    accounts and movements batches as they land, each access's end, "all updated"."""
    with metrics.streaming():
        async for event in state.events.stream(start, customer=customer):
            yield _sse(event)


@router.get("/v1/jobs/{job_id}/events", response_class=EventSourceResponse)
async def job_events(
    job_id: Annotated[str, Depends(_readable_job)],
    state: State,
    start: Annotated[int, Depends(_start_from)],
    metrics: Metrics,
) -> AsyncIterator[ServerSentEvent]:
    """One job's events, live, until it ends."""
    with metrics.streaming():
        async for event in state.events.stream(start, job_id=job_id):
            yield _sse(event)
