"""``GET /v1/banks``: the banks this service can read, for a client's "add an access" form (a
bank that is not here is refused with ``unknown-bank``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from scrapeflow.server._deps import caller_with
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._schemas import BankOut

__all__ = ["list_banks", "router"]

router = APIRouter(prefix="/v1/banks", tags=["customers"])


@router.get("", response_model=list[BankOut])
async def list_banks(key: Annotated[ApiKey, Depends(caller_with(Scope.READ))]) -> list[BankOut]:
    """Every bank scraper installed, by code: its code (what an access's ``bank`` is), its
    name and its country."""
    from scrapeflow.banking import scrapers

    return [
        BankOut(code=code, name=getattr(cls, "title", code), country=cls.country)
        for code, cls in scrapers().items()
    ]
