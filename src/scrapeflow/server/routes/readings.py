"""``/v1/customers/{customer}/…`` reads a UI makes all the time: the status (the seed UI's "all
updated"), the accounts and the movements a page at a time (date filters, cursor pagination).

They read through the service's quick reads (:class:`~scrapeflow.db.QuickReads`): compiled
statements on the driver, with no ORM or engine on the way, and a movements page is written as
JSON from its rows.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from collections import Counter
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Annotated

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BeforeValidator, Field
from sqlalchemy import bindparam, select

from scrapeflow.banking import movement_position, refresh_key
from scrapeflow.db import QuickQuery
from scrapeflow.jobs import Job, JobState, jobs_table
from scrapeflow.jobs._jobtable import job_from_row
from scrapeflow.server._deps import State
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import AccountOut, CustomerStatus, JobOut, MovementPage
from scrapeflow.server._state import ServiceState
from scrapeflow.server.routes.customers import (
    CustomerId,
    CustomerViewer,
    access_out,
    customer_read,
    iso_date,
)

__all__ = ["accounts", "movements", "router", "status"]

router = APIRouter(prefix="/v1/customers", tags=["customers"])


@router.get("/{customer}/status", response_model=CustomerStatus)
async def status(customer: CustomerId, state: State, key: CustomerViewer) -> CustomerStatus:
    """Per access: state, last result code and counts; the customer's "all updated" flag,
    true once no refresh is queued or running and every access has ended; and the last
    refresh's outcome."""
    from scrapeflow.banking import Outcome, ScrapeState, customer_status, outcome_of

    # The customer and its accesses in one read: a launch claims the customer before its
    # accesses and the watchdog frees both at once, so they are never seen half-updated. On
    # PostgreSQL the last refresh job is read beside it, not after it: a status waits for one
    # read, not two in a row.
    with customer_read(customer):
        if state.reads_wait:
            (found, accesses), last = await asyncio.gather(
                customer_status(state.reads, customer), _last_refresh(state, customer)
            )
        else:
            found, accesses = await customer_status(state.reads, customer)
            last = await _last_refresh(state, customer)
    job = last if last is not None and last.state in _ACTIVE else None
    busy = job is not None or any(a.state is ScrapeState.IN_PROGRESS for a in accesses)
    codes = [a.result for a in accesses if a.result is not None and a.enabled]
    # A refresh that failed after the accesses last ended (before it read anything: no URL for
    # a bank, the vault's key missing…) is the customer's outcome until the next one ends.
    ended = found.finished_at
    failed = last if last is not None and last.state is JobState.FAILED else None
    if failed is not None and ended is not None and (failed.finished_at or ended) <= ended:
        failed = None
    outcome = Outcome.FAILED if failed else (outcome_of(codes) if codes else None)
    return CustomerStatus(
        customer=customer,
        state=found.state.value,
        all_updated=found.state is ScrapeState.ALL_UPDATED and not busy,
        outcome=None if outcome is None else outcome.value,
        results=dict(Counter(code.value for code in codes)),
        error=None if failed is None else failed.error,
        refresh_job=None if job is None else JobOut.of(job),
        accesses=[access_out(a) for a in accesses],
    )


_ACTIVE = frozenset({JobState.QUEUED, JobState.RUNNING})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_LAST_REFRESH = QuickQuery(
    select(jobs_table)
    .where(
        jobs_table.c.dedupe_key == bindparam("key"),
        jobs_table.c.created_at >= bindparam("since"),
    )
    .order_by(jobs_table.c.created_at.desc())
    .limit(1)
)
"""The customer's last refresh job: one read, whole (a status shows it while it runs)."""
_JOB_COLUMNS = tuple(c.name for c in jobs_table.c)


async def _last_refresh(state: ServiceState, customer: str) -> Job | None:
    if state.quick is None:
        return await state.queue.latest(refresh_key(customer), _EPOCH)
    found = await state.quick.rows(_LAST_REFRESH, {"key": refresh_key(customer), "since": _EPOCH})
    return job_from_row(dict(zip(_JOB_COLUMNS, found[0], strict=True))) if found else None


@router.get("/{customer}/accounts", response_model=list[AccountOut])
async def accounts(customer: CustomerId, state: State, key: CustomerViewer) -> list[AccountOut]:
    """The customer's accounts and balances (money as decimal strings)."""
    from scrapeflow.banking import accounts_of

    with customer_read(customer):
        found = await accounts_of(state.reads, customer)
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
        for a in found
    ]


@router.get("/{customer}/movements", response_model=MovementPage)
async def movements(
    customer: CustomerId,
    state: State,
    key: CustomerViewer,
    since: Annotated[
        date | None, BeforeValidator(iso_date), Query(description="operated on or after")
    ] = None,
    until: Annotated[
        date | None, BeforeValidator(iso_date), Query(description="operated on or before")
    ] = None,
    account: Annotated[list[str] | None, Query(description="bank ref or IBAN")] = None,
    access: Annotated[
        list[Annotated[int, Field(ge=1, le=2**63 - 1)]] | None,
        Query(description="read through this access (a bank ref is unique only within one)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> Response:
    """The customer's movements, newest first, a page at a time (``next_cursor``)."""
    from scrapeflow.banking import movement_page

    if since and until and since > until:
        raise Problem(422, "invalid-request", "since is after until")
    after = _decode_cursor(cursor, customer) if cursor else None
    with customer_read(customer):
        found = await movement_page(
            state.reads,
            customer,
            limit=limit + 1,
            after=after,
            accounts=account or (),
            since=since,
            until=until,
            accesses=access or (),
        )
    page, more = found[:limit], len(found) > limit
    # MovementPage's JSON, written straight from the rows: a page of 200 built as models and
    # validated again by FastAPI cost more CPU than the rest of the request together.
    body = {
        "movements": [
            {
                "access_id": m.access_id,
                "bank": m.bank,
                "account_ref": m.account_ref,
                "account": m.account,
                "key": m.key,
                "operation_date": m.operation_date,
                "value_date": m.value_date,
                "amount": m.amount,
                "currency": m.currency,
                "description": m.description,
                "pending": m.pending,
                "balance_after": m.balance_after,
            }
            for m in page
        ],
        "next_cursor": _encode_cursor(movement_position(page[-1]), customer) if more else None,
    }
    return Response(orjson.dumps(body, default=_decimal_text), media_type="application/json")


def _decimal_text(value: object) -> str:
    """Money in JSON as pydantic writes a ``Decimal``: its exact decimal string."""
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _encode_cursor(position: tuple[int, str, str], customer: str) -> str:
    text = json.dumps([*position, _customer_tag(customer)])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, customer: str) -> tuple[int, str, str]:
    """The position a movements cursor of ``customer`` stands for; 422 ``invalid-cursor`` for
    one this API did not give, or gave for another customer. A cursor from before cursors named
    their customer (three items) is still taken."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        items = json.loads(raw)
        if not isinstance(items, list) or len(items) not in (3, 4):
            raise ValueError
        first, second, third = items[:3]
        if not isinstance(first, int) or not isinstance(second, str) or not isinstance(third, str):
            raise ValueError
        if not -_MAX_ORDINAL <= first <= 0:  # minus a date's ordinal
            raise ValueError
        tag = items[3] if len(items) == 4 else None
    except (ValueError, binascii.Error, TypeError, RecursionError):
        raise Problem(422, "invalid-cursor", "cursor is not one this API gave") from None
    if tag is not None and tag != _customer_tag(customer):
        raise Problem(
            422, "invalid-cursor", "cursor was given for another customer: start without one"
        )
    return first, second, third


_MAX_ORDINAL = date.max.toordinal()


def _customer_tag(customer: str) -> str:
    """A short tag of the customer in its cursors: one customer's cursor is refused for another
    (not a secret: the key decides what a client may read)."""
    return hashlib.sha256(f"scrapeflow movements cursor\0{customer}".encode()).hexdigest()[:12]
