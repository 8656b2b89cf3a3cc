"""``GET /v1/customers/{customer}/movements/export``: the customer's movements as a file, in
the command line's formats (CSV, OFX 2.2, JSON), filtered as the movements list is."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BeforeValidator, Field

from scrapeflow.server._deps import State
from scrapeflow.server._problems import Problem
from scrapeflow.server.routes.customers import CustomerId, CustomerViewer, customer_read, iso_date

__all__ = ["export_movements", "router"]

router = APIRouter(prefix="/v1/customers", tags=["customers"])

_MEDIA = {"csv": "text/csv", "ofx": "application/x-ofx", "json": "application/json"}


@router.get(
    "/{customer}/movements/export",
    response_class=Response,
    responses={200: {"content": {media: {} for media in _MEDIA.values()}}},
)
async def export_movements(
    customer: CustomerId,
    state: State,
    key: CustomerViewer,
    format: Annotated[Literal["csv", "ofx", "json"], Query(description="the file's format")],
    since: Annotated[
        date | None, BeforeValidator(iso_date), Query(description="operated on or after")
    ] = None,
    until: Annotated[
        date | None, BeforeValidator(iso_date), Query(description="operated on or before")
    ] = None,
    account: Annotated[list[str] | None, Query(description="bank ref or IBAN")] = None,
    access: Annotated[
        list[Annotated[int, Field(ge=1, le=2**63 - 1)]] | None,
        Query(description="read through this access"),
    ] = None,
) -> Response:
    """Every movement of the customer that matches, newest first, as one file to save
    (``Content-Disposition: attachment``). OFX holds booked movements only, one statement per
    account, as ``scrapeflow bank movements --format ofx`` does."""
    from scrapeflow.banking import accounts_of, movements_of, to_csv, to_json, to_ofx

    if since and until and since > until:
        raise Problem(422, "invalid-request", "since is after until")
    with customer_read(customer):
        moves = await movements_of(
            state.sessions,
            customer,
            accounts=account or (),
            since=since,
            until=until,
            accesses=access or (),
        )
        accounts = await accounts_of(state.sessions, customer)
    if format == "csv":
        text = to_csv(moves, movements=True)
    elif format == "json":
        text = to_json(moves) + "\n"
    else:
        wanted = {"".join(a.split()).upper() for a in account or ()}
        chosen = [
            a
            for a in accounts
            if (not account or a.bank_ref in account or (a.iban or "") in wanted)
            and (not access or a.access_id in access)
        ]
        text = to_ofx(chosen, moves)
    name = f"{customer}-movements.{format}".encode("ascii", "replace").decode()
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in name)
    return Response(
        text,
        media_type=_MEDIA[format],
        headers={"Content-Disposition": f'attachment; filename="{safe}"'},
    )
