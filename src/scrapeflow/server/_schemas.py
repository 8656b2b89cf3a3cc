"""The API's response bodies (the OpenAPI schema at ``/docs`` is built from them)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, Field, SecretStr

from scrapeflow.jobs import Job

__all__ = [
    "AccessIn",
    "AccessOut",
    "AccountOut",
    "CustomerIn",
    "CustomerOut",
    "CustomerStatus",
    "JobList",
    "JobOut",
    "MovementOut",
    "MovementPage",
    "OneTimeCode",
]


class JobOut(BaseModel):
    id: str
    kind: str
    params: dict[str, Any]
    state: str
    progress: dict[str, int]
    result: dict[str, Any] | None
    error: str | None
    attempts: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls(
            id=job.id,
            kind=job.kind,
            params=job.params,
            state=job.state.value,
            progress=job.progress,
            result=job.result,
            error=job.error,
            attempts=job.attempts,
            cancel_requested=job.cancel_requested,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
        )


class JobList(BaseModel):
    jobs: list[JobOut]
    next_before: str | None
    """Pass as ``before`` for the next (older) page; null at the end."""


class AccessOut(BaseModel):
    access_id: int
    bank: str
    login: str
    state: str
    result: str | None
    detail: str | None
    accounts: int
    movements: int
    finished_at: datetime | None


class CustomerStatus(BaseModel):
    customer: str
    state: str
    all_updated: bool
    """True once the last refresh has ended for every access (the seed's UI flag)."""
    refresh_job: JobOut | None
    """The refresh queued or running for this customer, if any."""
    accesses: list[AccessOut]


class AccountOut(BaseModel):
    access_id: int
    bank: str
    bank_ref: str
    iban: str | None
    number: str | None
    alias: str
    type: str
    currency: str
    balance: Decimal
    updated_at: datetime


class MovementOut(BaseModel):
    bank: str
    account_ref: str
    account: str
    key: str
    operation_date: date
    value_date: date
    amount: Decimal
    currency: str
    description: str
    pending: bool
    balance_after: Decimal | None


class MovementPage(BaseModel):
    movements: list[MovementOut]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null at the end."""


class CustomerIn(BaseModel):
    id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")]
    """Your id for the customer."""
    name: Annotated[str, Field(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")] = ""


class CustomerOut(BaseModel):
    id: str
    name: str
    state: str


class AccessIn(BaseModel):
    bank: Annotated[str, Field(min_length=1, max_length=40)]
    """A registered bank scraper's code (formbank, apibank, legacybank, …)."""
    login: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
    password: Annotated[SecretStr, Field(min_length=1, max_length=1024)]
    """Write-only: encrypted at once, never returned, never logged."""


class OneTimeCode(BaseModel):
    code: Annotated[str, Field(pattern=r"^[0-9]{4,10}$")]
    """The code the bank sent the customer (4-10 digits)."""
