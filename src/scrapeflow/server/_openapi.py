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
    "409": (
        "It exists already, a refresh of the customer is under way, or the key is revoked or "
        "expired."
    ),
    "413": "The body is over the service's limit.",
    "422": (
        "A parameter, cursor or the body is invalid (invalid-request, invalid-cursor), or the "
        "body is not a JSON document (malformed-body)."
    ),
    "429": "Too many failed authentications from this address (a valid key is never refused).",
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
        "/v1/customers/{customer}/accesses",
        "/v1/customers/{customer}/accesses/{access_id}/otp",
        "/v1/keys/{key_id}/rotate",
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
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                if not path.startswith("/v1/"):
                    # FastAPI's 422 names the schema removed above (ReDoc fails on it).
                    if "422" in responses:
                        responses["422"] = {"description": _WHY["422"], "content": problem}
                    continue
                for status in _errors_of(path, method, operation):
                    responses[status] = {"description": _WHY[status], "content": problem}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
