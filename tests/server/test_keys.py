"""Key lifecycle over HTTP and the CLI: list (never a secret), create with an expiry, rotate with
an overlap, revoke; a revocation by another process refuses the key and closes its open event
stream within a second; key management for an unrestricted admin key only."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from ._shared import module_service
from .conftest import Service

KEY_ENDPOINTS = [
    ("GET", "/v1/keys"),
    ("POST", "/v1/keys"),
    ("GET", "/v1/keys/000000000000"),
    ("DELETE", "/v1/keys/000000000000"),
    ("POST", "/v1/keys/000000000000/rotate"),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with module_service(tmp_path_factory.mktemp("keys"), customers=[1, 2]) as running:
        yield running


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def eventually(check: Callable[[], Any], within: float, what: str) -> float:
    """Seconds until ``check()`` is true; a failure past ``within``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > within:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def new_key(admin: httpx.Client, **body: Any) -> tuple[str, dict[str, Any]]:
    made = admin.post("/v1/keys", json={"scopes": ["read"], **body})
    assert made.status_code == 201, made.text
    return made.json()["token"], made.json()["key"]


def cli(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapeflow", "keys", *args],
        env=service.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(("method", "path"), KEY_ENDPOINTS)
def test_key_management_is_for_an_unrestricted_admin_only(
    service: Service, method: str, path: str
) -> None:
    body = {"scopes": ["read"]} if method == "POST" else None
    assert httpx.request(method, service.url + path, json=body).status_code == 401
    for scopes, customer in ((("read", "refresh", "jobs"), None), (("admin",), "cust-1")):
        with service.client(*scopes, customer=customer) as client:
            refused = client.request(method, path, json=body)
            assert refused.status_code == 403, refused.text
            assert refused.json()["type"] == "forbidden"
    with service.client("admin") as admin:
        assert admin.request(method, path, json=body).status_code not in (401, 403)


def test_a_listing_shows_every_key_and_never_a_secret(service: Service) -> None:
    with service.client("admin") as admin:
        token, made = new_key(admin, name="ana's app", customers=["cust-1"], expires="30d")
        secret = token.split("_", 2)[2]
        assert made["customers"] == ["cust-1"] and made["expires_at"] is not None
        assert httpx.get(f"{service.url}/v1/customers", headers=bearer(token)).status_code == 200
        # The last use is written by the key ring within a second (at most once a minute).
        eventually(
            lambda: admin.get(f"/v1/keys/{made['id']}").json()["last_used_at"] is not None,
            3.0,
            "last use stored",
        )
        listing = admin.get("/v1/keys")
        assert listing.status_code == 200
        shown = {k["id"]: k for k in listing.json()["keys"]}
        assert shown[made["id"]]["name"] == "ana's app"
        assert set(shown[made["id"]]) == {
            "id",
            "name",
            "scopes",
            "customers",
            "created_at",
            "last_used_at",
            "expires_at",
            "revoked",
            "revoked_at",
            "previous_valid_until",
        }
        listed = cli(service, "list")
    assert listed.returncode == 0, listed.stderr
    assert made["id"] in listed.stdout
    for text in (listing.text, listed.stdout, listed.stderr):
        assert secret not in text
        assert hashlib.sha256(secret.encode()).hexdigest() not in text


def test_a_revocation_by_another_process_ends_the_key_within_a_second(service: Service) -> None:
    with service.client("admin") as admin:
        token, made = new_key(admin)
    with httpx.Client(base_url=service.url, headers=bearer(token), timeout=30) as client:
        assert client.get("/v1/customers/cust-1").status_code == 200
        ended: list[float] = []
        with client.stream("GET", "/v1/customers/cust-1/events") as stream:
            assert stream.status_code == 200

            def read() -> None:
                for _ in stream.iter_raw():
                    pass
                ended.append(time.monotonic())

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            revoked = cli(service, "revoke", made["id"])  # another process: only the database
            assert revoked.returncode == 0, revoked.stderr
            done = time.monotonic()
            took = eventually(
                lambda: client.get("/v1/customers/cust-1").status_code == 401,
                1.0,
                "401 after the revocation",
            )
            reader.join(timeout=5)
        assert ended, "the stream never ended"
        assert ended[0] - done < 1.0, f"the stream ended {ended[0] - done:.2f} s after"
        assert took < 1.0
        refused = client.get("/v1/customers/cust-1")
        assert refused.json()["type"] == "unauthenticated"
    with service.client("admin") as admin:
        assert admin.get(f"/v1/keys/{made['id']}").json()["revoked"] is True
        assert admin.delete(f"/v1/keys/{made['id']}").status_code == 204  # idempotent


def test_a_rotation_keeps_the_old_secret_for_the_overlap_only(service: Service) -> None:
    with service.client("admin") as admin:
        old, made = new_key(admin)
        rotated = admin.post(f"/v1/keys/{made['id']}/rotate", json={"overlap": "2s"})
        assert rotated.status_code == 200, rotated.text
        new = rotated.json()["token"]
        assert new != old and new.split("_")[1] == made["id"]
        assert rotated.json()["key"]["previous_valid_until"] is not None
        url = f"{service.url}/v1/customers"
        assert httpx.get(url, headers=bearer(new)).status_code == 200
        assert httpx.get(url, headers=bearer(old)).status_code == 200  # during the overlap
        eventually(lambda: httpx.get(url, headers=bearer(old)).status_code == 401, 4.0, "old ends")
        assert httpx.get(url, headers=bearer(new)).status_code == 200
        # Without an overlap, the secret before stops at once.
        newest = admin.post(f"/v1/keys/{made['id']}/rotate").json()["token"]
        assert httpx.get(url, headers=bearer(new)).status_code == 401
        assert httpx.get(url, headers=bearer(newest)).status_code == 200
        too_long = admin.post(f"/v1/keys/{made['id']}/rotate", json={"overlap": "31d"})
        assert (too_long.status_code, too_long.json()["type"]) == (422, "invalid-input")
        assert admin.delete(f"/v1/keys/{made['id']}").status_code == 204
        gone = admin.post(f"/v1/keys/{made['id']}/rotate")
        assert (gone.status_code, gone.json()["type"]) == (409, "key-not-active")
    rotated_by_cli = cli(service, "rotate", "000000000000")
    assert rotated_by_cli.returncode != 0 and "no active key" in rotated_by_cli.stderr


def test_a_rotation_ends_the_streams_of_the_secret_rotated_away(service: Service) -> None:
    """A leaked secret's open streams end with it: at once without an overlap (the issue: a
    stream outlived its key), at the overlap's end with one."""
    with service.client("admin") as admin:
        old, made = new_key(admin)
        with httpx.Client(base_url=service.url, headers=bearer(old), timeout=30) as client:
            ended: list[float] = []
            with client.stream("GET", "/v1/customers/cust-1/events") as stream:
                assert stream.status_code == 200

                def read() -> None:
                    for _ in stream.iter_raw():
                        pass
                    ended.append(time.monotonic())

                reader = threading.Thread(target=read, daemon=True)
                reader.start()
                rotated = admin.post(f"/v1/keys/{made['id']}/rotate")
                assert rotated.status_code == 200, rotated.text
                done = time.monotonic()
                reader.join(timeout=5)
        assert ended, "the stream of the rotated-away secret never ended"
        assert ended[0] - done < 1.0, f"it ended {ended[0] - done:.2f} s after"
        assert admin.delete(f"/v1/keys/{made['id']}").status_code == 204


def test_a_key_stops_at_its_expiry(service: Service) -> None:
    with service.client("admin") as admin:
        token, _ = new_key(admin, expires="2s")
        for bad in (
            "yesterday",
            "2000-01-01T00:00:00Z",
            "2030-01-01T00:00:00",
            "99999999d",
            "9999999d",
            "9999999w",
            "9999-12-31T23:59:59-01:00",
            "0001-01-01T00:00:00+01:00",
        ):
            refused = admin.post("/v1/keys", json={"scopes": ["read"], "expires": bad})
            assert refused.status_code == 422, (bad, refused.text)
    url = f"{service.url}/v1/customers"
    assert httpx.get(url, headers=bearer(token)).status_code == 200
    eventually(lambda: httpx.get(url, headers=bearer(token)).status_code == 401, 4.0, "expired")


def test_the_cli_makes_an_expiring_key_and_rotates_it_printing_the_token_once(
    service: Service,
) -> None:
    made = cli(service, "create", "--scope", "read", "--expires", "1h", "--name", "cli")
    assert made.returncode == 0, made.stderr
    token = made.stdout.split()[-1]
    assert made.stdout.count(token) == 1 and "expiring" in made.stdout
    key_id = token.split("_")[1]
    rotated = cli(service, "rotate", key_id, "--overlap", "1h")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.split()[-1]
    assert rotated.stdout.count(new) == 1 and token not in rotated.stdout
    url = f"{service.url}/v1/customers"
    for works in (token, new):  # the old one for the overlap's hour
        assert httpx.get(url, headers=bearer(works)).status_code == 200
