"""``/v1/customers`` and ``/v1/customers/{customer}/…``: the customers and their accesses
(list, add, rename, change), a refresh, a one-time code; the reads a UI makes all the time
(status, accounts, movements) are in :mod:`~scrapeflow.server.routes.readings`."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from scrapeflow.banking import BANK_OTP, BANK_REFRESH, otp_key, refresh_key
from scrapeflow.jobs import Job
from scrapeflow.server._deps import State, caller_with, check_customer
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import (
    AccessIn,
    AccessOut,
    AccessPatch,
    CustomerIn,
    CustomerList,
    CustomerOut,
    CustomerPatch,
    JobOut,
    OneTimeCode,
)

if TYPE_CHECKING:
    from scrapeflow.banking import AccessView, CustomerView

__all__ = [
    "CustomerReader",
    "CustomerViewer",
    "access_out",
    "add_access",
    "add_customer",
    "canonical_customer_id",
    "change_access",
    "customer_read",
    "get_customer",
    "iso_date",
    "known_customer",
    "list_customers",
    "one_time_code",
    "refresh",
    "rename_customer",
    "router",
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

    # The caller is found here, not as a dependency of its own: each level of dependencies
    # costs FastAPI a resolution on every request.
    async def dependency(customer: str, state: State, request: Request) -> ApiKey:
        key = await authenticate(request)
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
    return access_out(access)


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
    return access_out(found[0])


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


def access_out(a: AccessView) -> AccessOut:
    return AccessOut(
        access_id=a.access_id,
        bank=a.bank,
        login=a.login,
        state=a.state.value,
        result=a.result.value if a.result else None,
        detail=a.detail,
        accounts=a.accounts,
        movements=a.movements,
        accounts_stored=a.accounts_stored,
        movements_stored=a.movements_stored,
        finished_at=a.finished_at,
        enabled=a.enabled,
    )
