"""Input edges: every integer a client gives (cursor, limit, page, path) is range-checked and
every unreadable body is one documented problem, never a 5xx; authentication comes before the
body is read; the interactive docs are off by default."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest

from ._shared import module_service
from .conftest import Service

PAST_64_BITS = 2**64


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with module_service(tmp_path_factory.mktemp("edges"), customers=[1]) as running:
        yield running


def problem(answer: httpx.Response, status: int, type: str) -> None:
    assert answer.status_code == status, (answer.request.url, answer.text)
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"] == type, (answer.request.url, answer.text)


def test_integers_past_their_range_are_422_never_a_5xx(service: Service) -> None:
    huge = str(PAST_64_BITS)
    cases = [
        ("/v1/customers/cust-1/sync", {"cursor": b64(f"v1:{huge}")}, "invalid-cursor"),
        ("/v1/customers/cust-1/sync", {"cursor": b64(f"v2:{huge}:abc")}, "invalid-cursor"),
        ("/v1/customers/cust-1/sync", {"cursor": b64("v1:-1")}, "invalid-cursor"),
        ("/v1/customers/cust-1/sync", {"count": huge}, "invalid-request"),
        ("/v1/customers/cust-1/movements", {"cursor": b64(f'[-{huge}, "a", "b"]')}, None),
        ("/v1/customers/cust-1/movements", {"cursor": b64(f'[{huge}, "a", "b"]')}, None),
        ("/v1/customers/cust-1/movements", {"cursor": b64("[" * 300)}, None),
        ("/v1/customers/cust-1/movements", {"limit": huge}, "invalid-request"),
        ("/v1/customers/cust-1/movements", {"limit": "-1"}, "invalid-request"),
        ("/v1/jobs", {"limit": huge}, "invalid-request"),
        ("/v1/schedule", {"runs": huge}, "invalid-request"),
        (f"/v1/keys/{huge}", {}, "invalid-request"),
    ]
    with service.client("admin") as admin:
        hook = admin.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook"}).json()["id"]
        cases += [
            (f"/v1/webhooks/{hook}/deliveries", {"before": huge}, "invalid-request"),
            (f"/v1/webhooks/{hook}/deliveries", {"limit": huge}, "invalid-request"),
        ]
        for path, params, type in cases:
            problem(admin.get(path, params=params), 422, type or "invalid-cursor")
        otp = admin.post(f"/v1/customers/cust-1/accesses/{huge}/otp", json={"code": "123456"})
        problem(otp, 422, "invalid-request")
        for after in (huge, "-1", "1e3"):
            with admin.stream(
                "GET", "/v1/customers/cust-1/events", headers={"Last-Event-ID": after}
            ) as stream:
                assert stream.status_code == 422, after


MALFORMED = [
    (b"\xff\xfe{\x00}\x00", "application/json"),  # not UTF-8
    (b"[" * 1000 + b"]" * 1000, "application/json"),  # 1,000 deep
    (b'{"id": ', "application/json"),  # not JSON
    (b"id=ana", "application/x-www-form-urlencoded"),  # not JSON's type
    (b'{"id": "ana"}', "text/plain"),  # JSON, said to be text
]


def test_every_malformed_body_is_one_problem_type(service: Service) -> None:
    with service.client("admin") as admin:
        for path in ("/v1/customers", "/v1/webhooks", "/v1/keys", "/v1/jobs"):
            for body, content_type in MALFORMED:
                answer = admin.post(path, content=body, headers={"Content-Type": content_type})
                problem(answer, 422, "malformed-body")
        assert [c["id"] for c in admin.get("/v1/customers").json()["customers"]] == ["cust-1"]


def test_authentication_comes_before_the_body_is_read(service: Service) -> None:
    for path in ("/v1/customers", "/v1/webhooks", "/v1/jobs", "/v1/customers/cust-1/accesses"):
        for body, content_type in MALFORMED:
            for auth in ({}, {"Authorization": "Bearer sf_000000000000_wrong"}):
                answer = httpx.post(
                    service.url + path,
                    content=body,
                    headers={"Content-Type": content_type, **auth},
                )
                assert answer.status_code in (401, 429), (path, answer.text)
                assert answer.json()["type"] in ("unauthenticated", "too-many-failed-attempts")


def test_the_interactive_docs_are_off_by_default(service: Service) -> None:
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert httpx.get(service.url + path).status_code == 404, path
    spec = httpx.get(f"{service.url}/openapi.json")
    assert spec.status_code == 200 and spec.json()["openapi"].startswith("3.")
