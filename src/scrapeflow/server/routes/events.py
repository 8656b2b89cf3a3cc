"""Server-sent events: ``/v1/customers/{customer}/events`` and ``/v1/jobs/{job_id}/events``.

Each event carries its stored id; reconnecting with ``Last-Event-ID`` (or ``?after=``) resumes
right after it: no gap, no duplicate. An id is digits, at most 2**63-1 (422 ``invalid-request``
otherwise, before the stream starts). A job's stream ends with its final ``job.*`` event; a
customer's stream goes on until the client leaves (keep-alive comments keep proxies open), or
until the key is revoked or expires (the stream then ends within a second).

Fair use: a key holds at most ``max_streams_per_key`` streams open, the service
``max_streams`` (429 ``too-many-streams`` with ``Retry-After`` beyond, before the stream
starts). An idle stream holds no database connection. A stream that fails after it started
(its 200 already sent) ends with a ``stream.failed`` event, and counts as an error in
``/v1/stats``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent

from scrapeflow._util.logs import get_logger
from scrapeflow.server._deps import State, caller_with, check_customer
from scrapeflow.server._events import Event
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._metrics import ServiceMetrics, service_metrics
from scrapeflow.server._problems import Problem
from scrapeflow.server.routes.customers import CustomerReader
from scrapeflow.server.routes.jobs import visible_job

__all__ = ["MAX_EVENT_ID", "customer_events", "job_events", "router"]

_log = get_logger(__name__)

MAX_EVENT_ID = 2**63 - 1
"""The largest event id there can be (the database's BIGINT)."""

router = APIRouter(tags=["events"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
# Checked by _start, not by FastAPI: a dependency's invalid parameter does not stop the ones
# after it (the job's look-up would answer 404 first).
LastEventId = Annotated[
    str | None, Header(alias="Last-Event-ID", description="resume after this event id")
]
After = Annotated[
    str | None,
    Query(
        description="resume after this event id (digits, at most 2**63-1), or 'latest': only "
        "what happens from now on, no replay",
        examples=["42", "latest"],
    ),
]
_LATEST = -1
"""``?after=latest``: the start is the newest event stored when the stream opens."""
Metrics = Annotated[ServiceMetrics, Depends(service_metrics)]


def _start(last_event_id: str | None, after: str | None) -> int:
    """The id to resume after: ``?after=``, else ``Last-Event-ID``, else 0 (``_LATEST``
    for ``?after=latest``, resolved when the stream opens)."""
    if after is not None:
        return _LATEST if after == "latest" else _event_id("after", after)
    if last_event_id is None or not last_event_id.strip():
        return 0
    return _event_id("Last-Event-ID", last_event_id.strip())


def _event_id(name: str, given: str) -> int:
    # isascii: str.isdigit also takes "²" and other digits int() refuses or reads otherwise
    valid = 0 < len(given) <= 19 and given.isascii() and given.isdigit()
    if not valid or int(given) > MAX_EVENT_ID:
        latest = " (or 'latest')" if name == "after" else ""
        raise Problem(
            422,
            "invalid-request",
            f"{name} must be an event id{latest}: digits, at most 2**63-1",
        )
    return int(given)


def _sse(event: Event) -> ServerSentEvent:
    return ServerSentEvent(id=str(event.id), event=event.kind, data=event.as_dict())


async def _readable_job(job_id: str, state: State, key: Reader) -> str:
    return (await visible_job(state, key, job_id)).id


def _start_from(last_event_id: LastEventId = None, after: After = None) -> int:
    return _start(last_event_id, after)


async def _customer_stream_slot(customer: str, state: State, key: Reader) -> AsyncIterator[None]:
    """A stream's place among the key's and the service's, held until the stream ends. Taken
    before the customer is looked up: a refused stream costs no database read."""
    check_customer(key, customer)
    with state.streams.taken(key.id):
        yield


async def _job_stream_slot(state: State, key: Reader) -> AsyncIterator[None]:
    """As :func:`_customer_stream_slot`: taken before the job is looked up."""
    with state.streams.taken(key.id):
        yield


async def _key_ends(revoked: asyncio.Event, key: ApiKey) -> None:
    """Returns once the key may no longer read: revoked, or its secret's time is up (an
    expiry, or the overlap of a rotation for a secret rotated away)."""
    if key.valid_until is None:
        await revoked.wait()
        return
    left = (key.valid_until - datetime.now(UTC)).total_seconds()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(left, 0.0)):
            await revoked.wait()


async def _stream_ends(key_ends: Coroutine[Any, Any, None], closing: asyncio.Event) -> None:
    """Returns once the key may no longer read or the service starts to stop (a stream left
    open would hold the shutdown for uvicorn's whole graceful wait)."""
    ends = [asyncio.ensure_future(key_ends), asyncio.ensure_future(closing.wait())]
    try:
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in ends:
            task.cancel()
        await asyncio.gather(*ends, return_exceptions=True)


async def _events(
    state: State,
    key: ApiKey,
    metrics: ServiceMetrics,
    start: int,
    *,
    customer: str | None = None,
    job_id: str | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """The stream's events until it ends, the client leaves or the key is revoked."""
    # Held while the stream is (see KeyRing): set on a revocation, an expiry, or a rotation
    # that drops the secret this stream was opened with.
    revoked = state.keys.revoked_signal(key.id, key.secret_sha256)
    if start == _LATEST:
        start = await state.events.last_id()
    with metrics.streaming():
        try:
            async for event in state.events.stream(
                start,
                customer=customer,
                job_id=job_id,
                until=_stream_ends(_key_ends(revoked, key), state.closing),
            ):
                yield _sse(event)
        except Exception as exc:  # after the 200: the client is told, and stats count it
            metrics.stream_failed()
            _log.warning("an event stream failed", error=type(exc).__name__)
            # Not "error": a browser's EventSource gives that name to its own connection errors.
            yield ServerSentEvent(
                event="stream.failed",
                data={
                    "type": "stream-failed",
                    "detail": "the stream failed; reconnect with Last-Event-ID to resume",
                },
            )


@router.get("/v1/customers/{customer}/events", response_class=EventSourceResponse)
async def customer_events(
    customer: str,
    _slot: Annotated[None, Depends(_customer_stream_slot)],
    key: CustomerReader,  # checked before the stream starts: after, errors can't be 4xx
    state: State,
    start: Annotated[int, Depends(_start_from)],
    metrics: Metrics,
) -> AsyncIterator[ServerSentEvent]:
    """Everything that happens to the customer, live: refresh jobs queued, started and ended,
    accounts and movements batches as they land, each access's end, "all updated"."""
    async for sent in _events(state, key, metrics, start, customer=customer):
        yield sent


@router.get("/v1/jobs/{job_id}/events", response_class=EventSourceResponse)
async def job_events(
    start: Annotated[int, Depends(_start_from)],  # a bad id is a 422, whatever the job
    _slot: Annotated[None, Depends(_job_stream_slot)],
    job_id: Annotated[str, Depends(_readable_job)],
    key: Reader,
    state: State,
    metrics: Metrics,
) -> AsyncIterator[ServerSentEvent]:
    """One job's events, live, until it ends."""
    async for sent in _events(state, key, metrics, start, job_id=job_id):
        yield sent
