"""Live delivery over SSE: a refresh's events in order until "all updated"; a reconnect with
Last-Event-ID mid-refresh loses nothing and repeats nothing; on each job backend."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from scrapeflow.sandbox import Sandbox

from .conftest import BANKS, Service


def events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Parse a text/event-stream: one dict per event (id, event, data)."""
    current: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if current:
                yield current
                current = {}
            continue
        if line.startswith(":"):
            continue  # keep-alive comment
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        current[name] = json.loads(value) if name == "data" else value


def read(
    client: httpx.Client, path: str, *, until: str, stop_after: int | None = None, **headers: str
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    with client.stream("GET", path, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in events(response):
            got.append(event)
            if event["event"] == until or (stop_after is not None and len(got) >= stop_after):
                break
    return got


def test_a_refresh_streams_in_order_and_a_reconnect_resumes_without_gap_or_repeat(
    job_service: Service, sandbox: Sandbox
) -> None:
    """On procrastinate, what the worker tells reaches the service's stream by LISTEN/NOTIFY."""
    for bank in BANKS:
        sandbox.sites[bank].guard.latency_ms = (20.0, 60.0)
    with job_service.client("refresh", "read") as client:
        job = client.post("/v1/customers/cust-1/refresh").json()
        path = "/v1/customers/cust-1/events"
        first = read(client, path, until="job.succeeded", stop_after=4)
        resumed = read(client, path, until="job.succeeded", **{"Last-Event-ID": first[-1]["id"]})
        whole = read(client, path, until="job.succeeded")  # from the start, all stored

    live = first + resumed
    ids = [int(e["id"]) for e in live]
    assert ids == sorted(set(ids))  # increasing, no repeat
    assert [e["id"] for e in live] == [e["id"] for e in whole]  # nothing lost across the cut
    kinds = [e["event"] for e in whole]
    assert kinds[0] == "job.queued"
    assert kinds[1] == "job.running"
    assert kinds[-2:] == ["bank.all_updated", "job.succeeded"]
    assert kinds.count("bank.access_finished") == 3
    assert "bank.accounts" in kinds and "bank.movements" in kinds
    # balances arrive before the refresh ends: the first accounts batch precedes the last access
    assert kinds.index("bank.accounts") < len(kinds) - 1 - kinds[::-1].index("bank.access_finished")
    assert {e["data"]["job_id"] for e in whole} == {job["id"]}
    assert whole[-1]["data"]["result"]["ok"] is True

    with job_service.client("read") as client:
        job_stream = read(client, f"/v1/jobs/{job['id']}/events", until="job.succeeded")
    assert [e["id"] for e in job_stream] == [e["id"] for e in whole]  # and it ends by itself


def test_a_bad_last_event_id_is_a_problem(service: Service) -> None:
    with service.client("read") as client:
        answer = client.get("/v1/customers/cust-1/events", headers={"Last-Event-ID": "abc"})
    assert answer.status_code == 422
    assert answer.json()["type"] == "invalid-request"


def test_after_latest_streams_what_happens_from_now_on_without_the_history(
    service: Service, sandbox: Sandbox
) -> None:
    """A page opened on a customer with a history wants the live events only: ``?after=latest``
    replays nothing and starts with the next refresh's first event."""
    with service.client("refresh", "read") as client:
        assert client.post("/v1/customers/cust-1/refresh").status_code == 202
        history = read(client, "/v1/customers/cust-1/events", until="job.succeeded")
        got: list[dict[str, Any]] = []

        def follow() -> None:
            with service.client("read") as reader:
                got.extend(
                    read(
                        reader,
                        "/v1/customers/cust-1/events?after=latest",
                        until="job.succeeded",
                    )
                )

        follower = threading.Thread(target=follow)
        follower.start()
        time.sleep(1.0)  # the stream is open, at the newest event
        second = client.post("/v1/customers/cust-1/refresh").json()
        follower.join(timeout=60)
        assert got, "nothing streamed"
        assert int(got[0]["id"]) > int(history[-1]["id"])  # nothing of the history
        assert (got[0]["event"], got[-1]["event"]) == ("job.queued", "job.succeeded")
        assert {e["data"]["job_id"] for e in got if "job_id" in e["data"]} == {second["id"]}
        for bad in ("soon", "-1", "1.5"):
            refused = client.get(f"/v1/customers/cust-1/events?after={bad}")
            assert refused.status_code == 422
            assert "(or 'latest')" in refused.json()["detail"]
