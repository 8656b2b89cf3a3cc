"""``GET /v1/customers/{customer}/sync``: the movements added, modified and removed since the
client's cursor (Plaid's ``/transactions/sync`` shape), so a client never downloads twice."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from scrapeflow.server._deps import State
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import RemovedOut, SyncMovementOut, SyncPage
from scrapeflow.server.routes.customers import CustomerId, CustomerReader

__all__ = ["router", "sync"]

router = APIRouter(prefix="/v1/customers", tags=["customers"])


@router.get("/{customer}/sync", response_model=SyncPage)
async def sync(
    customer: CustomerId,
    state: State,
    key: CustomerReader,
    cursor: Annotated[
        str | None,
        Query(max_length=64, description="next_cursor of the last page; none the first time"),
    ] = None,
    count: Annotated[int, Query(ge=1, le=2000, description="changes per page, about")] = 500,
) -> SyncPage:
    """What changed in the customer's movements since ``cursor``: ``added``, ``modified`` and
    ``removed``. Apply the pages in order and keep the last ``next_cursor``; while
    ``has_more`` is true, ask again at once. A page ends on a whole write batch, so it can hold
    a little more than ``count``."""
    from scrapeflow.banking import movement_changes
    from scrapeflow.errors import InputError

    try:
        changes = await movement_changes(state.sessions, customer, cursor=cursor, count=count)
    except InputError as exc:
        raise Problem(422, "invalid-cursor", str(exc)) from None
    return SyncPage(
        added=[SyncMovementOut.model_validate(m, from_attributes=True) for m in changes.added],
        modified=[
            SyncMovementOut.model_validate(m, from_attributes=True) for m in changes.modified
        ],
        removed=[RemovedOut.model_validate(r, from_attributes=True) for r in changes.removed],
        next_cursor=changes.next_cursor,
        has_more=changes.has_more,
    )
