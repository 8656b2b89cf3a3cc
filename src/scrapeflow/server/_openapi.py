"""The OpenAPI description, with the errors the service really answers: every operation lists
its ``application/problem+json`` statuses (FastAPI on its own documents only a JSON 422)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

__all__ = ["install_openapi"]

_PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "A short stable name of the problem."},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "What was wrong, in one sentence."},
        "errors": {
            "type": "array",
            "description": "Each invalid field (validation errors only).",
            "items": {
                "type": "object",
                "properties": {
                    "loc": {"type": "array", "items": {"type": "string"}},
                    "msg": {"type": "string"},
                },
            },
        },
    },
}
_WHY = {
    "400": "The request could not be read.",
    "401": "No valid API key.",
    "403": "The key lacks the scope, or may not touch this customer.",
    "404": "No such customer, access, job or webhook (or not visible to this key).",
    "405": "The path does not take this method.",
    "409": "It exists already, or a refresh of the customer is under way.",
    "413": "The body is over the service's limit.",
    "422": "A parameter or the body is invalid.",
    "429": "Too many failed authentications from this address.",
    "503": "The service's own settings are wrong (not the request).",
}


def _errors_of(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    statuses = ["401", "403", "422", "429", "503"]
    if "{" in path:
        statuses.append("404")
    if "requestBody" in operation:
        statuses += ["400", "413"]
    if method == "post" and path in (
        "/v1/customers",
        "/v1/customers/{customer}/accesses/{access_id}/otp",
    ):
        statuses.append("409")
    return sorted(statuses)


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` document the problem responses of every ``/v1`` operation."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["Problem"] = _PROBLEM
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
        for path, operations in schema.get("paths", {}).items():
            if not path.startswith("/v1/"):
                continue
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                for status in _errors_of(path, method, operation):
                    responses[status] = {"description": _WHY[status], "content": problem}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
