"""Webhooks over HTTP against the real service: a receiver on loopback gets a refresh's events
signed, a failed delivery comes again with the same id, a key restricted to a customer gets
only that customer's events, the secret is shown once, and the outbox survives a restart. The
refreshes run on each job backend: on procrastinate a worker makes the events (and, in the same
transaction, their deliveries), and the service's courier sends them."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import text

from scrapeflow.banking import BANK_EVENT_NAMES
from scrapeflow.db import create_engine
from scrapeflow.server._events import EVENT_KINDS
from scrapeflow.server._webhooks import backoff

from .conftest import Service, start_service, stop_service
from .test_events import read
from .test_refresh import wait_all_updated

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries 0.2 s apart, doubling: set before the service fixture starts the process."""
    monkeypatch.setenv("SCRAPEFLOW_WEBHOOK_RETRY_BASE", "0.2")


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def payload(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded


class Receiver:
    """A webhook receiver on 127.0.0.1: records every POST, answers ``statuses`` in turn, then
    200 (with a ``Location`` when given, to tempt a redirect)."""

    def __init__(
        self, statuses: tuple[int, ...] = (), *, port: int = 0, location: str | None = None
    ) -> None:
        self.requests: list[Received] = []
        self._statuses = list(statuses)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    status = receiver._statuses.pop(0) if receiver._statuses else 200
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.requests.append(Received(headers, body, status))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def unique(self) -> dict[str, Received]:
        """What a receiver that de-duplicates by id keeps: the first good copy of each id."""
        with self._lock:
            kept: dict[str, Received] = {}
            for request in self.requests:
                if 200 <= request.answered < 300:
                    kept.setdefault(request.payload["id"], request)
            return kept


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver((500,))  # the first delivery fails, the rest succeed
    try:
        yield running
    finally:
        running.close()


def eventually(check: Callable[[], T], what: str, seconds: float = 30.0) -> T:
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def deliveries(client: httpx.Client, hook_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/webhooks/{hook_id}/deliveries", params={"limit": 500})
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["deliveries"]
    return found


def all_delivered(
    client: httpx.Client,
    hook_id: str,
    *,
    last: str = "job.succeeded",
    covering: Collection[int] = (),
) -> list[dict[str, Any]]:
    """The delivery log once the ``last`` event is in it, the events of ids ``covering`` too,
    and everything is delivered."""
    log = deliveries(client, hook_id)
    done = (
        any(d["kind"] == last for d in log)
        and set(covering) <= {d["event_id"] for d in log}
        and all(d["state"] == "delivered" for d in log)
    )
    return log if done else []


def register(client: httpx.Client, url: str, **body: Any) -> dict[str, Any]:
    answer = client.post("/v1/webhooks", json={"url": url, **body})
    assert answer.status_code == 201, answer.text
    assert answer.headers["location"] == f"/v1/webhooks/{answer.json()['id']}"
    created: dict[str, Any] = answer.json()
    return created


def verify(secret: str, request: Received) -> None:
    """What a receiver does: check the signature over "t.body", and that t is recent."""
    fields = dict(part.split("=", 1) for part in request.headers["scrapeflow-signature"].split(","))
    expected = hmac.new(
        secret.encode(), f"{fields['t']}.".encode() + request.body, hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)
    assert abs(time.time() - int(fields["t"])) < 300


def assert_not_at_rest(service: Service, secret: bytes) -> None:
    """``secret`` is nowhere in the service's database: not in its SQLite files (WAL
    included), not in any row of any table of its PostgreSQL database (as text or as bytes)."""
    if service.db_url.startswith("sqlite"):
        database = Path(service.db_url.removeprefix("sqlite+aiosqlite:///"))
        for path in database.parent.glob(database.name + "*"):
            assert secret not in path.read_bytes(), path
        return

    async def rows_holding() -> dict[str, int]:
        engine = create_engine(service.db_url)
        try:
            async with engine.connect() as connection:
                tables = await connection.scalars(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                )
                found: dict[str, int] = {}
                for table in tables.all():
                    holding = await connection.scalar(
                        text(
                            f'SELECT count(*) FROM "{table}" AS r '
                            "WHERE strpos(r::text, :plain) > 0 OR strpos(r::text, :hex) > 0"
                        ),
                        {"plain": secret.decode(), "hex": secret.hex()},
                    )
                    if holding:
                        found[table] = holding
                return found
        finally:
            await engine.dispose()

    assert asyncio.run(rows_holding()) == {}


def finished(client: httpx.Client, job_id: str) -> bool:
    return client.get(f"/v1/jobs/{job_id}").json()["state"] in ("succeeded", "failed")


def test_a_refresh_arrives_signed_and_a_failed_delivery_comes_again_with_its_id(
    job_service: Service, receiver: Receiver
) -> None:
    with job_service.client("read", "refresh") as client:
        hook = register(client, receiver.url)
        secret = hook["secret"]
        assert secret.startswith("whsec_") and len(secret) > 30
        assert hook["events"] is None and hook["url"] == receiver.url

        job = client.post("/v1/customers/cust-1/refresh").json()
        wait_all_updated(client, "cust-1")
        stored = read(client, "/v1/customers/cust-1/events", until="job.succeeded")
        ids = {int(e["id"]) for e in stored}
        log = eventually(
            lambda: all_delivered(client, hook["id"], covering=ids), "every delivery made"
        )

        # The secret is shown once: never in a list, a get or the delivery log.
        for path in ("/v1/webhooks", f"/v1/webhooks/{hook['id']}"):
            shown = client.get(path)
            assert shown.status_code == 200
            assert secret not in shown.text and "secret" not in shown.text
        assert secret not in client.get(f"/v1/webhooks/{hook['id']}/deliveries").text

    # Every stored event of the refresh arrived once (for a receiver that de-duplicates),
    # the job's completion among them, each with the event's stored facts.
    kept = receiver.unique()
    assert {d["event_id"] for d in log} >= ids
    assert {d["id"] for d in log} == set(kept)
    by_kind = {
        r.payload["kind"]: r.payload for r in kept.values() if r.payload["job_id"] == job["id"]
    }
    done = by_kind["job.succeeded"]
    assert set(done) == {"id", "kind", "created", "customer", "job_id", "data"}
    assert done["customer"] == "cust-1" and done["job_id"] == job["id"]
    assert done["data"]["result"]["ok"] is True
    assert datetime.fromisoformat(done["created"]).tzinfo is not None
    assert "bank.all_updated" in by_kind and "bank.accounts" in by_kind

    # Signed with the secret of the create answer; the id in the headers and the body.
    for sent in receiver.requests:
        verify(secret, sent)
        assert sent.headers["content-type"] == "application/json"
        assert sent.headers["scrapeflow-event-id"] == sent.payload["id"]
        assert sent.headers["idempotency-key"] == sent.payload["id"]

    # The first delivery got a 500: it came again with the same id, and the log says so.
    first = receiver.requests[0]
    assert first.answered == 500
    again = [r for r in receiver.requests if r.payload["id"] == first.payload["id"]]
    assert [r.answered for r in again] == [500, 200]
    assert again[0].body == again[1].body  # the same event, byte for byte
    entry = next(d for d in log if d["id"] == first.payload["id"])
    assert entry["attempts"] == 2 and entry["state"] == "delivered"
    assert entry["last_status"] == 200 and entry["delivered_at"] and not entry["next_attempt_at"]
    assert all(d["attempts"] == 1 for d in log if d is not entry)
    assert len(receiver.requests) == len(log) + 1

    assert_not_at_rest(job_service, secret.encode())  # sealed with the vault, at rest too

    # What the receiver got is the customer's stream, whoever ran the refresh: nothing else.
    others = sorted(
        (d["event_id"], d["kind"], r.payload["data"].get("kind"), r.payload["customer"])
        for d in log
        if d["event_id"] not in ids
        for r in [kept[d["id"]]]
    )
    assert others == []  # a refresh spread over bank.access jobs tells only as the refresh


def test_a_key_restricted_to_a_customer_gets_only_that_customers_events(
    job_service: Service, receiver: Receiver
) -> None:
    everything = Receiver()
    try:
        with (
            job_service.client("read", customer="cust-1") as own,
            job_service.client("read") as other,
            job_service.client("admin") as admin,
            job_service.client("refresh", "read") as refresher,
        ):
            mine = register(own, receiver.url, events=["job.", "bank.all_updated"])
            assert mine["events"] == ["job.", "bank.all_updated"]
            register(other, everything.url)

            # Another non-admin key does not see it; an admin key does.
            assert other.get(f"/v1/webhooks/{mine['id']}").status_code == 404
            assert mine["id"] not in {h["id"] for h in other.get("/v1/webhooks").json()}
            assert mine["id"] in {h["id"] for h in admin.get("/v1/webhooks").json()}
            assert admin.get(f"/v1/webhooks/{mine['id']}/deliveries").status_code == 200

            jobs = {
                customer: refresher.post(f"/v1/customers/{customer}/refresh").json()["id"]
                for customer in ("cust-1", "cust-3")
            }
            for job_id in jobs.values():
                eventually(lambda job_id=job_id: finished(refresher, job_id), "the refresh ends")
            # The unrestricted key's receiver saw both refreshes end: their events were made
            # (and, in the same transaction, every delivery they called for).
            eventually(
                lambda: (
                    {
                        r.payload["job_id"]
                        for r in everything.unique().values()
                        if r.payload["kind"] == "job.succeeded"
                    }
                    >= set(jobs.values())  # (the parts of a spread refresh end too: PARTS_TOLD)
                ),
                "both refreshes' completions at the unrestricted receiver",
            )
            log = eventually(lambda: all_delivered(own, mine["id"]), "cust-1's events delivered")
    finally:
        everything.close()

    got = [r.payload for r in receiver.unique().values()]
    assert {p["customer"] for p in got} == {"cust-1"}
    assert {p["job_id"] for p in got} == {jobs["cust-1"]}
    kinds = sorted(p["kind"] for p in got)
    assert kinds == sorted(["job.queued", "job.running", "job.succeeded", "bank.all_updated"])
    assert sorted(d["kind"] for d in log) == kinds


def test_bad_inputs_are_problems(service: Service) -> None:
    def problem(answer: httpx.Response, status: int, type: str) -> None:
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"] == type

    with service.client("read") as client, service.client("read") as same:
        cases: list[tuple[Any, str]] = [
            ({"url": "ftp://example.com/hook"}, "invalid-request"),
            ({"url": "javascript:alert(1)"}, "invalid-request"),
            ({"url": "http://"}, "invalid-request"),
            ({"url": "/relative/hook"}, "invalid-request"),
            ({"url": " http://127.0.0.1:1/hook"}, "invalid-request"),
            ({"url": "http://127.0.0.1:99999/hook"}, "invalid-request"),
            ({"url": "http://127.0.0.1:0/hook"}, "invalid-request"),
            ({"url": "http://a b/hook"}, "invalid-request"),
            ({"url": "http://xn--/hook"}, "invalid-request"),
            ({"url": "http://[::1/hook"}, "invalid-request"),
            ({"url": "http://127.0.0.1/" + "x" * 3000}, "invalid-request"),
            ({"url": "http://127.0.0.1/hook", "events": ["bank.nope"]}, "unknown-event-kind"),
            ({"url": "http://127.0.0.1/hook", "events": ["nope."]}, "unknown-event-kind"),
            ({"url": "http://127.0.0.1/hook", "events": []}, "invalid-request"),
            ({"url": "http://127.0.0.1/hook", "event": ["job."]}, "invalid-request"),
            ({}, "invalid-request"),
            ([], "invalid-request"),
        ]
        for body, type in cases:
            problem(client.post("/v1/webhooks", json=body), 422, type)
        malformed = client.post(
            "/v1/webhooks", content=b'{"url": ', headers={"Content-Type": "application/json"}
        )
        problem(malformed, 422, "malformed-body")  # one type for every unreadable body
        assert client.get("/v1/webhooks").json() == []  # nothing refused was stored

        for method, path in [
            ("GET", "/v1/webhooks/wh_0123456789abcdef"),
            ("DELETE", "/v1/webhooks/wh_0123456789abcdef"),
            ("GET", "/v1/webhooks/wh_0123456789abcdef/deliveries"),
            ("GET", "/v1/webhooks/" + "w" * 300),
        ]:
            problem(client.request(method, path), 404, "webhook-not-found")

        hook = register(client, "https://receiver.example/hook", events=["job.succeeded"])
        for query in (
            "limit=0",
            "limit=501",
            "state=lost",
            "before=0",
            "before=x",
            "before=" + "9" * 30,
        ):
            problem(
                client.get(f"/v1/webhooks/{hook['id']}/deliveries?{query}"), 422, "invalid-request"
            )
        assert same.get(f"/v1/webhooks/{hook['id']}").json() == {
            k: v for k, v in hook.items() if k != "secret"
        }  # a second client of the same key: the same webhook, without its secret
        assert client.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
        problem(client.get(f"/v1/webhooks/{hook['id']}"), 404, "webhook-not-found")
        problem(client.delete(f"/v1/webhooks/{hook['id']}"), 404, "webhook-not-found")


def test_the_outbox_survives_a_restart_while_the_receiver_is_down(job_service: Service) -> None:
    down = Receiver()
    port, url = down.port, down.url
    down.close()  # nothing listens there now: every attempt is refused
    with job_service.client("read", "refresh") as client:
        hook = register(client, url, events=["job."])
        job = client.post("/v1/customers/cust-1/refresh").json()
        eventually(lambda: finished(client, job["id"]), "the refresh ends")
        told = read(client, f"/v1/jobs/{job['id']}/events", until="job.succeeded")
        completion = int(told[-1]["id"])  # the refresh's, not a part's (see PARTS_TOLD)
        eventually(
            lambda: any(
                d["event_id"] == completion and d["attempts"] >= 1
                for d in deliveries(client, hook["id"])
            ),
            "a refused attempt at the completion event",
        )
        log = deliveries(client, hook["id"])
    assert {d["state"] for d in log} == {"pending"}
    assert all(d["last_error"] and d["last_status"] is None for d in log if d["attempts"])
    assert all(d["next_attempt_at"] for d in log)

    stop_service(job_service.process)
    receiver = Receiver(port=port)
    try:
        job_service.process, job_service.url = start_service(job_service.env)
        with job_service.client("read", "refresh") as client:
            after = eventually(lambda: all_delivered(client, hook["id"]), "delivered after restart")
    finally:
        receiver.close()
    assert {d["id"] for d in after} == {d["id"] for d in log}
    kept = receiver.unique()
    assert set(kept) == {d["id"] for d in log}
    refresh = [r.payload["kind"] for r in kept.values() if r.payload["job_id"] == job["id"]]
    assert sorted(refresh) == ["job.queued", "job.running", "job.succeeded"]
    assert {r.payload["kind"] for r in kept.values()} <= {
        "job.queued",
        "job.running",
        "job.succeeded",
    }


def test_a_receiver_that_never_accepts_is_given_up_and_redirects_are_not_followed(
    service: Service,
) -> None:
    target = Receiver()
    mover = Receiver(tuple([307] * 100), location=target.url)  # always "go elsewhere"
    try:
        stop_service(service.process)
        env = {**service.env, "SCRAPEFLOW_WEBHOOK_GIVE_UP": "0.001"}  # 3.6 seconds
        service.process, service.url = start_service(env)
        with service.client("read", "refresh") as client:
            hook = register(client, mover.url, events=["job.succeeded"])
            job = client.post("/v1/customers/cust-1/refresh").json()
            eventually(lambda: finished(client, job["id"]), "the refresh ends")
            log = eventually(
                lambda: [d for d in deliveries(client, hook["id"]) if d["state"] == "failed"],
                "the delivery given up",
            )
    finally:
        mover.close()
        target.close()
    [entry] = log
    assert entry["last_status"] == 307 and entry["last_error"] == "HTTP 307"
    assert entry["attempts"] >= 2 and entry["next_attempt_at"] is None
    assert len(mover.requests) == entry["attempts"]
    assert target.requests == []  # never followed


def test_backoff_doubles_with_jitter_up_to_an_hour() -> None:
    for attempts, full in [(1, 10.0), (2, 20.0), (5, 160.0), (30, 3600.0), (10_000, 3600.0)]:
        waits = [backoff(attempts, 10.0) for _ in range(200)]
        assert all(full / 2 <= w <= full for w in waits)
        assert len(set(waits)) > 1  # jittered


def test_every_event_the_service_makes_is_a_kind_a_webhook_may_ask_for() -> None:
    assert set(BANK_EVENT_NAMES.values()) <= EVENT_KINDS
