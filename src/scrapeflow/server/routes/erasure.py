"""``DELETE /v1/customers/{customer}`` and ``DELETE …/accesses/{access_id}``: erase a customer,
or one access, with everything read through it, in one transaction (see
:mod:`scrapeflow.server._erasure`); the answer is the erasure's record: counts, never data."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from scrapeflow.server._deps import State
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import ErasureOut
from scrapeflow.server.routes.customers import CustomerAdmin, CustomerId

__all__ = ["erase_access", "erase_customer", "router"]

router = APIRouter(prefix="/v1/customers", tags=["customers"])


@router.delete("/{customer}", response_model=ErasureOut)
async def erase_customer(customer: CustomerId, state: State, key: CustomerAdmin) -> ErasureOut:
    """Erase the customer: its accesses (credentials included), accounts, movements, events,
    ended jobs and launch logs; 409 while a refresh of it is queued or running."""
    from scrapeflow.errors import InputError, RefreshInProgress
    from scrapeflow.server._erasure import erase_customer as erase

    try:
        done = await erase(state.engine, customer, by=key.id, log_dir=state.settings.log_dir)
    except RefreshInProgress as exc:
        raise Problem(409, "refresh-in-progress", str(exc)) from None
    except InputError:
        raise Problem(404, "customer-not-found", f"no customer {customer!r}") from None
    return ErasureOut(erased=done.what, at=done.at, counts=done.counts)


@router.delete("/{customer}/accesses/{access_id}", response_model=ErasureOut)
async def erase_access(
    customer: CustomerId,
    access_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    state: State,
    key: CustomerAdmin,
) -> ErasureOut:
    """Erase one access of the customer (its credentials, accounts, movements and the events
    naming it); 409 while a refresh of the customer is queued or running."""
    from scrapeflow.errors import InputError, RefreshInProgress
    from scrapeflow.server._erasure import erase_access as erase

    try:
        done = await erase(state.engine, customer, access_id, by=key.id)
    except RefreshInProgress as exc:
        raise Problem(409, "refresh-in-progress", str(exc)) from None
    except InputError:
        raise Problem(
            404, "access-not-found", f"customer {customer!r} has no access {access_id}"
        ) from None
    return ErasureOut(erased=done.what, at=done.at, counts=done.counts)
