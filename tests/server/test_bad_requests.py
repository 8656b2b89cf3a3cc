"""Bad requests on every endpoint that takes a body or an id: a 4xx problem naming what is
wrong, and nothing stored changes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from .conftest import Service

# Every endpoint that reads a JSON body.
BODIES = [
    "/v1/customers",
    "/v1/customers/cust-1/accesses",
    "/v1/customers/cust-1/accesses/1/otp",
    "/v1/jobs",
    "/v1/webhooks",
]
# Every endpoint that names something by id, with an id that does not exist.
UNKNOWN = [
    ("GET", "/v1/customers/nobody", "customer-not-found"),
    ("GET", "/v1/customers/nobody/status", "customer-not-found"),
    ("GET", "/v1/customers/nobody/accounts", "customer-not-found"),
    ("GET", "/v1/customers/nobody/movements", "customer-not-found"),
    ("GET", "/v1/customers/nobody/sync", "customer-not-found"),
    ("GET", "/v1/customers/nobody/events", "customer-not-found"),
    ("POST", "/v1/customers/nobody/refresh", "customer-not-found"),
    ("POST", "/v1/customers/cust-1/accesses/999/otp", "access-not-found"),
    ("GET", "/v1/jobs/0000000000000000000000000000", "job-not-found"),
    ("GET", "/v1/jobs/0000000000000000000000000000/results", "job-not-found"),
    ("GET", "/v1/jobs/0000000000000000000000000000/events", "job-not-found"),
    ("POST", "/v1/jobs/0000000000000000000000000000/cancel", "job-not-found"),
]


def problem(answer: httpx.Response, status: int | tuple[int, ...]) -> dict[str, object]:
    statuses = status if isinstance(status, tuple) else (status,)
    assert answer.status_code in statuses, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = answer.json()
    assert body["status"] == answer.status_code and body["detail"]
    return body


def snapshot(client: httpx.Client) -> tuple[object, ...]:
    """What a client can see is stored."""
    return (
        client.get("/v1/customers").json(),
        client.get("/v1/customers/cust-1/status").json()["accesses"],
        client.get("/v1/jobs").json()["jobs"],
        client.get("/v1/webhooks").json(),
    )


@pytest.fixture
def admin(service: Service) -> Iterator[httpx.Client]:
    with service.client("admin") as client:
        yield client


def test_malformed_and_mistyped_bodies_are_refused_and_store_nothing(admin: httpx.Client) -> None:
    before = snapshot(admin)
    json_header = {"content-type": "application/json"}
    for path in BODIES:  # one service for all: each request is refused, so none sees another
        for body in (b"{", b"[1, 2", b"\xff\xfe", b"null", b"[]", b'"text"', b"42"):
            problem(admin.post(path, content=body, headers=json_header), 422)
        for wrong in ({"id": 5}, {"bank": ["formbank"]}, {"code": 123456}, {"kind": 1}, {"url": 7}):
            problem(admin.post(path, json=wrong), 422)
    assert snapshot(admin) == before


def test_an_oversized_body_is_refused_and_never_kept(admin: httpx.Client) -> None:
    before = snapshot(admin)
    huge = b'{"id": "' + b"x" * 2_000_000 + b'"}'

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        yield b'{"id": "'
        for _ in range(40):
            yield b"x" * 65_536
        yield b'"}'

    json_header = {"content-type": "application/json"}
    for path in BODIES:
        declared = problem(admin.post(path, content=huge, headers=json_header), 413)
        assert declared["type"] == "body-too-large", path
        chunked = problem(admin.post(path, content=chunks(), headers=json_header), 413)
        assert chunked["type"] == "body-too-large", path
    assert snapshot(admin) == before


def test_unknown_ids_are_not_found(admin: httpx.Client) -> None:
    for method, path, type in UNKNOWN:
        body = {"code": "123456"} if "otp" in path else None
        with admin.stream(method, path, json=body) as answer:
            answer.read()
            assert problem(answer, 404)["type"] == type, path
