"""Errors at the edge: every error a client gets is ``application/problem+json`` (RFC 9457)
with a stable ``type``; a route raises, it never builds an error body by hand."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from scrapeflow.db import connection_lost
from scrapeflow.errors import (
    ConfigError,
    EgressBlocked,
    InputError,
    JobNotFound,
    RefreshInProgress,
    ScrapeflowError,
    UnknownJobKind,
)

__all__ = [
    "MALFORMED_BODY",
    "NOT_UTF8",
    "Problem",
    "database_away",
    "install_problem_handlers",
]

PROBLEM_JSON = "application/problem+json"


class Problem(Exception):
    """An HTTP error for the client: status, a short stable type, and a detail sentence."""

    def __init__(
        self, status: int, type: str, detail: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.type = type
        self.detail = detail
        self.headers = headers or {}


def database_away() -> Problem:
    """503 ``database-unavailable``: the database restarting or out of reach, so the client
    may try again shortly."""
    return Problem(
        503,
        "database-unavailable",
        "the database cannot be reached right now; try again shortly",
        headers={"Retry-After": "5"},
    )


def problem_response(
    status: int, type: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = {"type": type, "title": type.replace("-", " "), "status": status, "detail": detail}
    return JSONResponse(body | extra, status_code=status, media_type=PROBLEM_JSON, headers=headers)


MALFORMED_BODY = "malformed-body"
"""The one problem type of a body that cannot be read as JSON: not UTF-8 text, not JSON, nested
too deep, or sent with a content type other than ``application/json``."""
_FASTAPI_UNPARSABLE = "There was an error parsing the body"
NOT_UTF8 = "the body is not UTF-8"
"""The detail BodyLimit raises for a JSON body that is not UTF-8 (answered as malformed-body)."""


def _unreadable(error: Any) -> bool:
    """Whether a validation error says the body was never JSON: a decoding error, or the raw
    bytes of a body whose content type is not JSON (FastAPI passes them on as they are)."""
    if error.get("type") == "json_invalid":
        return True
    return tuple(error.get("loc", ())) == ("body",) and isinstance(error.get("input"), bytes)


def _malformed_body() -> JSONResponse:
    return problem_response(
        422,
        MALFORMED_BODY,
        "the body is not a JSON document (UTF-8, nested at most a few hundred levels, sent as "
        "Content-Type: application/json)",
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Map our errors, validation errors and HTTP errors to problem+json."""

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc.status, exc.type, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(_unreadable(error) for error in errors):
            return _malformed_body()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return problem_response(
            422,
            "invalid-request",
            f"{where}: {first.get('msg', 'invalid')}",
            errors=[
                {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
                for e in errors[:20]
            ],
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if (exc.status_code, exc.detail) in ((400, _FASTAPI_UNPARSABLE), (422, NOT_UTF8)):
            return _malformed_body()  # too deep for the parser, or not UTF-8 text
        kind = {404: "not-found", 405: "method-not-allowed", 413: "body-too-large"}.get(
            exc.status_code, "http-error"
        )
        return problem_response(exc.status_code, kind, str(exc.detail), dict(exc.headers or {}))

    async def _database_away(request: Request, exc: Exception) -> JSONResponse:
        # The database restarting or out of reach: the client may try again shortly. Any
        # other database error is a bug, and stays a 500.
        if not connection_lost(exc):
            raise exc
        away = database_away()
        return problem_response(away.status, away.type, away.detail, away.headers)

    app.add_exception_handler(DBAPIError, _database_away)
    app.add_exception_handler(ConnectionError, _database_away)

    @app.exception_handler(ScrapeflowError)
    async def _ours(request: Request, exc: ScrapeflowError) -> JSONResponse:
        if isinstance(exc, EgressBlocked):  # a client's URL leads where the service never goes
            return problem_response(
                422, "egress-blocked", str(exc), address_class=exc.address_class
            )
        if isinstance(exc, JobNotFound):
            return problem_response(404, "job-not-found", str(exc))
        if isinstance(exc, UnknownJobKind):
            return problem_response(422, "unknown-job-kind", str(exc))
        if isinstance(exc, RefreshInProgress):
            return problem_response(409, "refresh-in-progress", str(exc))
        if isinstance(exc, ConfigError):  # the service's own settings: not the client's fault
            return problem_response(503, "service-misconfigured", str(exc))
        if isinstance(exc, InputError):
            return problem_response(422, "invalid-input", str(exc))
        return problem_response(400, "bad-request", str(exc))
