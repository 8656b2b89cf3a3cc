"""``/v1/customers/{customer}/…``: status (the seed UI's "all updated"), refresh, accounts,
movements (date filters, cursor pagination)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Literal

import orjson
from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BeforeValidator, Field
from sqlalchemy import bindparam, select

from scrapeflow.banking import BANK_OTP, BANK_REFRESH, movement_position, otp_key, refresh_key
from scrapeflow.db import QuickQuery
from scrapeflow.jobs import Job, JobState, jobs_table
from scrapeflow.server._deps import State, caller_with, check_customer
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import (
    AccessIn,
    AccessOut,
    AccessPatch,
    AccountOut,
    CustomerIn,
    CustomerList,
    CustomerOut,
    CustomerPatch,
    CustomerStatus,
    JobOut,
    MovementPage,
    OneTimeCode,
)
from scrapeflow.server._state import ServiceState

if TYPE_CHECKING:
    from scrapeflow.banking import AccessView, CustomerView

__all__ = [
    "CustomerReader",
    "CustomerViewer",
    "accounts",
    "add_access",
    "add_customer",
    "canonical_customer_id",
    "change_access",
    "customer_read",
    "get_customer",
    "iso_date",
    "known_customer",
    "list_customers",
    "movements",
    "one_time_code",
    "refresh",
    "rename_customer",
    "router",
    "status",
]

router = APIRouter(prefix="/v1/customers", tags=["customers"])


def iso_date(value: object) -> object:
    """Only ``YYYY-MM-DD`` is a date here (pydantic alone also takes ``0`` as 1970-01-01)."""
    if isinstance(value, str) and not _ISO_DATE.fullmatch(value):
        raise ValueError("a date is YYYY-MM-DD")
    return value


_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
Admin = Annotated[ApiKey, Depends(caller_with(Scope.ADMIN))]
CustomerId = Annotated[str, "the customer's external id"]


def _for_customer(scope: Scope, *, look_up: bool = True) -> Callable[..., Awaitable[ApiKey]]:
    """A dependency: the caller's key, allowed ``scope`` and the path's customer, which must
    exist (``look_up``; a route whose own read finds the customer, or 404s, skips the lookup).
    Checked before the body is read, so a caller learns nothing from validation."""
    authenticate = caller_with(scope)

    # A default, not an annotation: annotations are strings here, and a closure's local
    # would not resolve.
    async def dependency(
        customer: str,
        state: State,
        key: ApiKey = Depends(authenticate),  # noqa: B008
    ) -> ApiKey:
        canonical_customer_id(customer)
        check_customer(key, customer)
        if look_up:
            await known_customer(state, customer)
        return key

    return dependency


CustomerReader = Annotated[ApiKey, Depends(_for_customer(Scope.READ))]
CustomerRefresher = Annotated[ApiKey, Depends(_for_customer(Scope.REFRESH))]
CustomerAdmin = Annotated[ApiKey, Depends(_for_customer(Scope.ADMIN))]
CustomerViewer = Annotated[ApiKey, Depends(_for_customer(Scope.READ, look_up=False))]
"""A reader of the customer whose route's read finds it (see :func:`customer_read`)."""


def canonical_customer_id(customer: str) -> None:
    """422 ``invalid-request`` for a path's customer id that no customer can have, or not in
    the form ids are stored in (NFC, no surrounding spaces): such an id is never looked up."""
    from scrapeflow.banking import validate_customer_id
    from scrapeflow.errors import InputError

    try:
        canonical = validate_customer_id(customer)
    except InputError as exc:
        raise Problem(422, "invalid-request", f"path.customer: {exc}") from None
    if canonical != customer:
        raise Problem(
            422,
            "invalid-request",
            "path.customer: not a customer id as stored (NFC, no surrounding spaces)",
        )


@contextlib.contextmanager
def customer_read(customer: str) -> Iterator[None]:
    """Around a read that finds its customer: "no customer" is 404 ``customer-not-found``."""
    from scrapeflow.errors import InputError

    try:
        yield
    except InputError:
        raise Problem(404, "customer-not-found", f"no customer {customer!r}") from None


async def known_customer(state: State, customer: str) -> None:
    from scrapeflow.banking import customer_row_id

    with customer_read(customer):
        await customer_row_id(state.reads, customer)


async def _active_refresh(state: State, customer: str) -> Job | None:
    return await state.queue.active(refresh_key(customer))


OutcomeFilter = Literal["succeeded", "partial", "needs_action", "failed", "none"]


@router.get("", response_model=CustomerList)
async def list_customers(
    state: State,
    key: Reader,
    q: Annotated[
        str, Query(max_length=200, description="a part of the id or the name, any case")
    ] = "",
    outcome: Annotated[
        list[OutcomeFilter] | None,
        Query(description="keep those ending so (repeat for several; none: not refreshed)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> CustomerList:
    """The customers this key may see, by id, a page at a time (``next_cursor``), with their
    outcome and last refresh; searched and filtered by the database."""
    from scrapeflow.banking import Outcome, customer_page

    after = _decode_customer_cursor(cursor) if cursor else None
    wanted = [None if o == "none" else Outcome(o) for o in outcome or ()]
    found = await customer_page(
        state.sessions,
        limit=limit,
        after=after,
        search=q.strip(),
        outcomes=wanted,
        only=sorted(key.customers),
    )
    page = found.customers
    return CustomerList(
        customers=[_customer_out(c) for c in page],
        total=found.total,
        outcomes=found.outcomes,
        next_cursor=_encode_customer_cursor(page[-1].external_id) if found.more else None,
    )


def _encode_customer_cursor(external_id: str) -> str:
    text = json.dumps(["customers", external_id])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode_customer_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        kind, after = json.loads(raw)
        if kind != "customers" or not isinstance(after, str):
            raise ValueError
    except (ValueError, binascii.Error, TypeError, RecursionError):
        raise Problem(422, "invalid-cursor", "cursor is not one this API gave") from None
    return after


def _customer_out(c: CustomerView) -> CustomerOut:
    outcome = None if c.outcome is None else c.outcome.value
    return CustomerOut(
        id=c.external_id,
        name=c.name,
        state=c.state.value,
        outcome=outcome,
        last_refresh_at=c.last_refresh_at,
    )


@router.post("", status_code=201, response_model=CustomerOut)
async def add_customer(body: CustomerIn, state: State, key: Admin) -> CustomerOut:
    """Add a customer (409 when the id is taken). Its id is stored NFC-normalised; a key
    restricted to customers may add only those (403 for any other id, before looking)."""
    from scrapeflow.banking import add_customer as add
    from scrapeflow.banking import find_customer, validate_customer_id
    from scrapeflow.errors import InputError

    try:
        wanted = validate_customer_id(body.id)
    except InputError as exc:
        raise Problem(422, "invalid-request", f"body.id: {exc}") from None
    check_customer(key, wanted)
    async with state.sessions() as session:
        try:
            await find_customer(session, wanted)
        except InputError:
            pass
        else:
            raise Problem(409, "customer-exists", f"customer {wanted!r} already exists")
    await add(state.sessions, wanted, body.name)
    async with state.sessions() as session:
        row = await find_customer(session, wanted)
        return CustomerOut(id=row.external_id, name=row.name, state=row.scrape_state.value)


@router.get("/{customer}", response_model=CustomerOut)
async def get_customer(customer: CustomerId, state: State, key: CustomerViewer) -> CustomerOut:
    from scrapeflow.banking import customer_views

    with customer_read(customer):
        [found] = await customer_views(state.sessions, customer)
    return _customer_out(found)


@router.post("/{customer}/accesses", status_code=201, response_model=AccessOut)
async def add_access(
    customer: CustomerId, body: AccessIn, state: State, key: CustomerAdmin
) -> AccessOut:
    """Add the customer's login at a bank (409 ``access-exists`` when it has it: change its
    password with PATCH). The password is encrypted at once and never returned."""
    from scrapeflow.banking import CredentialVault, accesses_of, scrapers, validate_login
    from scrapeflow.banking import add_access as add
    from scrapeflow.errors import InputError

    if body.bank not in scrapers():
        known = ", ".join(sorted(scrapers()))
        raise Problem(422, "unknown-bank", f"no scraper for bank {body.bank!r} (banks: {known})")
    vault = CredentialVault.from_settings(state.settings)
    try:
        login = validate_login(body.login)
    except InputError as exc:
        raise Problem(422, "invalid-request", f"body.login: {exc}") from None
    for existing in await accesses_of(state.sessions, customer):
        if (existing.bank, existing.login) == (body.bank, login):
            raise Problem(
                409,
                "access-exists",
                f"customer {customer!r} has this login at {body.bank} already (access "
                f"{existing.access_id}): change its password with PATCH "
                f"/v1/customers/{customer}/accesses/{existing.access_id}",
            )
    access_id = await add(
        state.sessions, vault, customer, body.bank, body.login, body.password.get_secret_value()
    )
    access = next(
        a for a in await accesses_of(state.sessions, customer) if a.access_id == access_id
    )
    return _access_out(access)


@router.patch("/{customer}", response_model=CustomerOut)
async def rename_customer(
    customer: CustomerId, body: CustomerPatch, state: State, key: CustomerAdmin
) -> CustomerOut:
    """Change the customer's display name (its id stays)."""
    from scrapeflow.banking import customer_views
    from scrapeflow.banking import rename_customer as rename
    from scrapeflow.errors import InputError

    try:
        await rename(state.sessions, customer, body.name)
    except InputError as exc:
        raise Problem(422, "invalid-request", f"body.name: {exc}") from None
    with customer_read(customer):
        [found] = await customer_views(state.sessions, customer)
    return _customer_out(found)


@router.patch("/{customer}/accesses/{access_id}", response_model=AccessOut)
async def change_access(
    customer: CustomerId,
    access_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    body: AccessPatch,
    state: State,
    key: CustomerAdmin,
) -> AccessOut:
    """Change the access's password (sealed at once, never returned; what the scraper kept of
    the old login, a session waiting for a code, is dropped), disable it (kept with its data,
    left out of refreshes and of the outcome) or enable it again."""
    from scrapeflow.banking import (
        CredentialVault,
        accesses_of,
        change_password,
        enable_access,
        validate_password,
    )
    from scrapeflow.errors import InputError

    password = None if body.password is None else body.password.get_secret_value()
    if password is not None:
        try:
            validate_password(password)
        except InputError as exc:
            raise Problem(422, "invalid-request", f"body.password: {exc}") from None
    try:
        if password is not None:
            vault = CredentialVault.from_settings(state.settings)
            await change_password(state.sessions, vault, customer, access_id, password)
        if body.enabled is not None:
            await enable_access(state.sessions, customer, access_id, body.enabled)
    except InputError:
        raise Problem(
            404, "access-not-found", f"customer {customer!r} has no access {access_id}"
        ) from None
    found = [a for a in await accesses_of(state.sessions, customer) if a.access_id == access_id]
    return _access_out(found[0])


@router.post("/{customer}/accesses/{access_id}/otp", status_code=202, response_model=JobOut)
async def one_time_code(
    customer: CustomerId,
    access_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    body: OneTimeCode,
    state: State,
    key: CustomerRefresher,
) -> JSONResponse:
    """Give the one-time code the bank sent (an access that ended ``two_factor_required``):
    202 with the job that resumes that access's scrape; 409 while a refresh of the customer is
    queued or running (give the code once it has ended)."""
    from scrapeflow.banking import CredentialVault, ScrapeState, accesses_of

    access = next(
        (a for a in await accesses_of(state.sessions, customer) if a.access_id == access_id), None
    )
    if access is None:
        raise Problem(404, "access-not-found", f"customer {customer!r} has no access {access_id}")
    if not access.enabled:
        raise Problem(
            409,
            "access-disabled",
            f"access {access_id} is disabled: enable it (PATCH enabled: true) first",
        )
    if access.state is ScrapeState.IN_PROGRESS or await _active_refresh(state, customer):
        raise Problem(
            409,
            "refresh-in-progress",
            f"a refresh of customer {customer!r} is under way: give the code once it has ended",
        )
    sealed = CredentialVault.from_settings(state.settings).encrypt(body.code).decode()
    job = await state.queue.submit(
        BANK_OTP,
        {"customer": customer, "access_id": access_id, "code_sealed": sealed},
        dedupe_key=otp_key(access_id),
    )
    return JSONResponse(
        JobOut.of(job).model_dump(mode="json"),
        status_code=202,
        headers={"Location": f"/v1/jobs/{job.id}"},
    )


@router.post("/{customer}/refresh", status_code=202, response_model=JobOut)
async def refresh(customer: CustomerId, state: State, key: CustomerRefresher) -> JSONResponse:
    """Start refreshing the customer: 202 with the job at once. A refresh already queued or
    running for this customer is returned instead of a second one."""
    job = await state.queue.submit(
        BANK_REFRESH, {"customer": customer}, dedupe_key=refresh_key(customer)
    )
    return JSONResponse(
        JobOut.of(job).model_dump(mode="json"),
        status_code=202,
        headers={"Location": f"/v1/jobs/{job.id}"},
    )


@router.get("/{customer}/status", response_model=CustomerStatus)
async def status(customer: CustomerId, state: State, key: CustomerViewer) -> CustomerStatus:
    """Per access: state, last result code and counts; the customer's "all updated" flag,
    true once no refresh is queued or running and every access has ended; and the last
    refresh's outcome."""
    from scrapeflow.banking import Outcome, ScrapeState, customer_status, outcome_of

    # The customer and its accesses in one read: a launch claims the customer before its
    # accesses and the watchdog frees both at once, so they are never seen half-updated.
    with customer_read(customer):
        found, accesses = await customer_status(state.reads, customer)
    last = await _last_refresh(state, customer)
    job = None
    if last is not None and last.state in _ACTIVE:  # the whole job, only while it is under way
        job = await state.queue.latest(refresh_key(customer), _EPOCH)
        job = job if job is not None and job.state in _ACTIVE else None
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
        accesses=[_access_out(a) for a in accesses],
    )


_ACTIVE = frozenset({JobState.QUEUED, JobState.RUNNING})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class _LastRefresh:
    state: JobState
    finished_at: datetime | None
    error: str | None


_LAST_REFRESH = QuickQuery(
    select(jobs_table.c.state, jobs_table.c.finished_at, jobs_table.c.error)
    .where(
        jobs_table.c.dedupe_key == bindparam("key"),
        jobs_table.c.created_at >= bindparam("since"),
    )
    .order_by(jobs_table.c.created_at.desc())
    .limit(1)
)
"""The customer's last refresh job, as much as a status needs of it when it has ended."""


async def _last_refresh(state: ServiceState, customer: str) -> _LastRefresh | None:
    if state.quick is None:
        job = await state.queue.latest(refresh_key(customer), _EPOCH)
        return None if job is None else _LastRefresh(job.state, job.finished_at, job.error)
    found = await state.quick.rows(_LAST_REFRESH, {"key": refresh_key(customer), "since": _EPOCH})
    if not found:
        return None
    job_state, finished_at, error = found[0]
    return _LastRefresh(JobState(job_state), finished_at, error)


def _access_out(a: AccessView) -> AccessOut:
    return AccessOut(
        access_id=a.access_id,
        bank=a.bank,
        login=a.login,
        state=a.state.value,
        result=a.result.value if a.result else None,
        detail=a.detail,
        accounts=a.accounts,
        movements=a.movements,
        finished_at=a.finished_at,
        enabled=a.enabled,
    )


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
