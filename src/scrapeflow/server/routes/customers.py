"""``/v1/customers/{customer}/…``: status (the seed UI's "all updated"), refresh, accounts,
movements (date filters, cursor pagination)."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import date
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from scrapeflow.jobs import ACTIVE_STATES, Job
from scrapeflow.server._deps import State, caller_with, check_customer
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import (
    AccessOut,
    AccountOut,
    CustomerStatus,
    JobOut,
    MovementOut,
    MovementPage,
)
from scrapeflow.server._work import BANK_REFRESH

if TYPE_CHECKING:
    from scrapeflow.banking import MovementView

__all__ = [
    "accounts",
    "known_customer",
    "movements",
    "refresh",
    "refresh_key",
    "router",
    "status",
]

router = APIRouter(prefix="/v1/customers", tags=["customers"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
Refresher = Annotated[ApiKey, Depends(caller_with(Scope.REFRESH))]
CustomerId = Annotated[str, "the customer's external id"]


def refresh_key(customer: str) -> str:
    return f"{BANK_REFRESH}:{customer}"


async def known_customer(state: State, customer: str) -> None:
    from scrapeflow.banking import find_customer
    from scrapeflow.errors import InputError

    async with state.sessions() as session:
        try:
            await find_customer(session, customer)
        except InputError:
            raise Problem(404, "customer-not-found", f"no customer {customer!r}") from None


async def _active_refresh(state: State, customer: str) -> Job | None:
    for job in await state.queue.find(kind=BANK_REFRESH, states=tuple(ACTIVE_STATES), limit=1000):
        if job.params.get("customer") == customer:
            return job
    return None


@router.post("/{customer}/refresh", status_code=202, response_model=JobOut)
async def refresh(customer: CustomerId, state: State, key: Refresher) -> JSONResponse:
    """Start refreshing the customer: 202 with the job at once. A refresh already queued or
    running for this customer is returned instead of a second one."""
    check_customer(key, customer)
    await known_customer(state, customer)
    job = await state.queue.submit(
        BANK_REFRESH, {"customer": customer}, dedupe_key=refresh_key(customer)
    )
    return JSONResponse(
        JobOut.of(job).model_dump(mode="json"),
        status_code=202,
        headers={"Location": f"/v1/jobs/{job.id}"},
    )


@router.get("/{customer}/status", response_model=CustomerStatus)
async def status(customer: CustomerId, state: State, key: Reader) -> CustomerStatus:
    """Per access: state, last result code and counts; and the customer's "all updated" flag,
    true once no refresh is queued or running and every access has ended."""
    from scrapeflow.banking import ScrapeState, accesses_of, find_customer

    check_customer(key, customer)
    await known_customer(state, customer)
    async with state.sessions() as session:
        row = await find_customer(session, customer)
        customer_state = ScrapeState(row.scrape_state)
    accesses = await accesses_of(state.sessions, customer)
    job = await _active_refresh(state, customer)
    busy = job is not None or any(a.state is ScrapeState.IN_PROGRESS for a in accesses)
    return CustomerStatus(
        customer=customer,
        state=customer_state.value,
        all_updated=customer_state is ScrapeState.ALL_UPDATED and not busy,
        refresh_job=None if job is None else JobOut.of(job),
        accesses=[
            AccessOut(
                access_id=a.access_id,
                bank=a.bank,
                login=a.login,
                state=a.state.value,
                result=a.result.value if a.result else None,
                detail=a.detail,
                accounts=a.accounts,
                movements=a.movements,
                finished_at=a.finished_at,
            )
            for a in accesses
        ],
    )


@router.get("/{customer}/accounts", response_model=list[AccountOut])
async def accounts(customer: CustomerId, state: State, key: Reader) -> list[AccountOut]:
    """The customer's accounts and balances (money as decimal strings)."""
    from scrapeflow.banking import accounts_of

    check_customer(key, customer)
    await known_customer(state, customer)
    return [
        AccountOut(
            access_id=a.access_id,
            bank=a.bank,
            bank_ref=a.bank_ref,
            iban=a.iban,
            number=a.number,
            alias=a.alias,
            type=a.type.value,
            currency=a.currency,
            balance=a.balance,
            updated_at=a.updated_at,
        )
        for a in await accounts_of(state.sessions, customer)
    ]


@router.get("/{customer}/movements", response_model=MovementPage)
async def movements(
    customer: CustomerId,
    state: State,
    key: Reader,
    since: Annotated[date | None, Query(description="operated on or after")] = None,
    until: Annotated[date | None, Query(description="operated on or before")] = None,
    account: Annotated[list[str] | None, Query(description="bank ref or IBAN")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> MovementPage:
    """The customer's movements, newest first, a page at a time (``next_cursor``)."""
    from scrapeflow.banking import movements_of

    check_customer(key, customer)
    await known_customer(state, customer)
    if since and until and since > until:
        raise Problem(422, "invalid-request", "since is after until")
    after = _decode_cursor(cursor) if cursor else None
    found = await movements_of(state.sessions, customer, accounts=account or (), since=since)
    ordered = sorted(
        (m for m in found if until is None or m.operation_date <= until),
        key=_position,
    )
    if after is not None:
        ordered = [m for m in ordered if _position(m) > after]
    page = ordered[:limit]
    more = len(ordered) > limit
    return MovementPage(
        movements=[
            MovementOut(
                bank=m.bank,
                account_ref=m.account_ref,
                account=m.account,
                key=m.key,
                operation_date=m.operation_date,
                value_date=m.value_date,
                amount=m.amount,
                currency=m.currency,
                description=m.description,
                pending=m.pending,
                balance_after=m.balance_after,
            )
            for m in page
        ],
        next_cursor=_encode_cursor(_position(page[-1])) if more and page else None,
    )


def _position(movement: MovementView) -> tuple[int, str, str]:
    """Where a movement sits in the order of the pages: newest day first, then account, key."""
    return (-movement.operation_date.toordinal(), movement.account_ref, movement.key)


def _encode_cursor(position: tuple[int, str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(position)).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[int, str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        first, second, third = json.loads(raw)
        if not isinstance(first, int) or not isinstance(second, str) or not isinstance(third, str):
            raise ValueError
        return first, second, third
    except (ValueError, binascii.Error, TypeError):
        raise Problem(422, "invalid-cursor", "cursor is not one this API gave") from None
