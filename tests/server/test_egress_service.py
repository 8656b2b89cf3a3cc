"""The egress policy through the real service, tried as an attacker with an ordinary key would:
webhooks, fetch jobs and run jobs pointed at the service's own network are refused when they
are registered (every spelling of the address), and refused again as they are dialled (a
redirect, a name, a policy narrowed since); nothing an internal service says ever comes back
in a delivery log, a job error or a result; the courier keeps no cookies; the standard proxy
variables are followed. The service allows 127.0.0.2 (the "outside" here) and nothing else."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from scrapeflow.http import FAILURE_CLASSES
from scrapeflow.sandbox import Sandbox
from tests._tinyproxy import require_tinyproxy, run_tinyproxy

from .conftest import Service, running_service, service_database, start_service, stop_service

T = TypeVar("T")
SECRET = "requirepass=hunter2"


@dataclass
class Hit:
    path: str
    peer: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Peer:
    """An HTTP site on ``host``: ``/page`` answers with a secret header and a cookie, ``/hook``
    records webhook deliveries (and sets a cookie), ``/bounce`` redirects to ``bounce_to``."""

    host: str
    bounce_to: str = ""
    hits: list[Hit] = field(default_factory=list)

    def __post_init__(self) -> None:
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                peer.hits.append(Hit(self.path, self.client_address[0], headers, body))
                if self.path.startswith("/bounce"):
                    self.send_response(302)
                    self.send_header("Location", peer.bounce_to)
                else:
                    self.send_response(200)
                    self.send_header("X-Internal-Secret", SECRET)
                    self.send_header("Set-Cookie", f"tenant_session={self.path.strip('/')}")
                    self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Banner:
    """A non-HTTP internal service on 127.0.0.1 (Redis-like): says its banner, hangs up;
    counts the connections it got."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.connections = 0
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with connection:
                connection.settimeout(1)
                try:
                    connection.recv(1024)
                    connection.sendall(f"+INTERNAL-SERVICE v1 {SECRET}\r\n".encode())
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def outside() -> Iterator[Peer]:
    peer = Peer("127.0.0.2")
    yield peer
    peer.close()


@pytest.fixture
def banner() -> Iterator[Banner]:
    internal = Banner()
    yield internal
    internal.close()


@pytest.fixture
def guarded(request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox) -> Iterator[Service]:
    """The service, allowing 127.0.0.2 only."""
    db_url = service_database(request, tmp_path, "embedded")
    env = {"SCRAPEFLOW_EGRESS_ALLOW": "127.0.0.2", "SCRAPEFLOW_WEBHOOK_RETRY_BASE": "0.2"}
    with running_service(tmp_path, sandbox, db_url, customers=[], env=env) as running:
        yield running


def plain(service: Service) -> httpx.Client:
    """A client of the service with no key of its own (each request says its key)."""
    return httpx.Client(base_url=service.url, timeout=30)


def eventually(check: Callable[[], T], what: str, seconds: float = 30.0) -> T:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def spellings(port: int) -> list[str]:
    return [
        f"http://127.0.0.1:{port}/",
        f"http://localhost:{port}/",
        f"http://127.1:{port}/",
        f"http://0x7f.0.0.1:{port}/",
        f"http://2130706433:{port}/",
        f"http://017700000001:{port}/",
        f"http://0.0.0.0:{port}/",
        f"http://[::ffff:127.0.0.1]:{port}/",
        f"http://[::1]:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
    ]


def test_a_blocked_address_is_refused_at_registration_in_every_spelling(
    guarded: Service, banner: Banner
) -> None:
    key = guarded.key("read", "jobs")
    with plain(guarded) as http:
        auth = {"Authorization": f"Bearer {key}"}
        for url in spellings(banner.port):
            for path, body in (
                ("/v1/webhooks", {"url": url}),
                ("/v1/jobs", {"kind": "fetch", "params": {"urls": [url]}}),
                ("/v1/jobs", {"kind": "run", "params": {"tasks": [url]}}),
            ):
                answer = http.post(path, json=body, headers=auth)
                assert answer.status_code == 422, (path, url, answer.text)
                problem = answer.json()
                assert problem["type"] == "egress-blocked", (path, url, problem)
                assert problem["detail"].startswith("blocked by egress policy: ")
        listed = http.get("/v1/webhooks", headers=auth).json()
        jobs = http.get("/v1/jobs", headers=auth).json()["jobs"]
    assert listed == [] and jobs == []  # nothing registered, nothing queued
    assert banner.connections == 0  # and nothing dialled


def results(http: httpx.Client, auth: dict[str, str], job_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=auth).json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    eventually(ended, f"job {job_id} ends")
    found: dict[str, Any] = http.get(f"/v1/jobs/{job_id}/results", headers=auth).json()
    return found


def test_a_redirect_inside_is_refused_as_it_is_dialled_and_nothing_inside_is_echoed(
    guarded: Service, outside: Peer, banner: Banner
) -> None:
    outside.bounce_to = f"http://127.0.0.1:{banner.port}/"
    key = guarded.key("read", "jobs")
    auth = {"Authorization": f"Bearer {key}"}
    with plain(guarded) as http:
        fetch = http.post(
            "/v1/jobs",
            json={"kind": "fetch", "params": {"urls": [f"{outside.url}/bounce"]}},
            headers=auth,
        )
        run = http.post(
            "/v1/jobs",
            json={
                "kind": "run",
                "params": {"tasks": [f"{outside.url}/bounce", f"{outside.url}/page"]},
            },
            headers=auth,
        )
        assert (fetch.status_code, run.status_code) == (202, 202), (fetch.text, run.text)
        fetched = results(http, auth, fetch.json()["id"])
        ran = results(http, auth, run.json()["id"])
        everything = fetched | ran
        listing = http.get("/v1/jobs", headers=auth).text
        jobs = [http.get(f"/v1/jobs/{j.json()['id']}", headers=auth) for j in (fetch, run)]
    assert [j.status_code for j in jobs] == [200, 200]
    (item,) = fetched["items"]
    assert item["outcome"] == "failed"
    assert "blocked by egress policy: loopback address" in item["error"]
    bounced, page = ran["items"]
    assert bounced["state"] == "failed"
    assert "blocked by egress policy: loopback address" in bounced["executors"]["scrape"]["status"]
    # The page's result shows documented headers only: no Set-Cookie, no X-Internal-Secret.
    shown = page["executors"]["scrape"]["output"]["response_headers"]
    assert {k.lower() for k in shown} <= {"content-type", "content-length", "date"}
    assert banner.connections == 0
    for said in (str(everything), listing, *(j.text for j in jobs)):
        assert SECRET not in said and "INTERNAL-SERVICE" not in said


def test_run_tasks_may_not_steer_the_connection(guarded: Service, outside: Peer) -> None:
    key = guarded.key("jobs")
    with plain(guarded) as http:
        for header in ("Host", "Proxy-Authorization", "Transfer-Encoding", "X-Forwarded-For"):
            task = {"key": "t", "params": {"url": f"{outside.url}/page", "headers": {header: "x"}}}
            answer = http.post(
                "/v1/jobs",
                json={"kind": "run", "params": {"tasks": [task]}},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert answer.status_code == 422, answer.text
            assert header in answer.json()["detail"]


def deliveries(http: httpx.Client, auth: dict[str, str], hook: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = http.get(f"/v1/webhooks/{hook}/deliveries", headers=auth).json()[
        "deliveries"
    ]
    return found


def test_webhooks_echo_nothing_keep_no_cookies_and_hear_only_their_keys_jobs(
    guarded: Service, outside: Peer, banner: Banner
) -> None:
    # A "receiver" on the allowed address that is not HTTP at all: its banner must not come
    # back through the delivery log.
    babbler = Banner("127.0.0.2")
    try:
        ana, bob = (asyncio.run(guarded._make_key(("read", "jobs"), None)) for _ in range(2))
        with plain(guarded) as http:
            hooks = {}
            for name, key, url in (
                ("ana", ana, f"{outside.url}/ana"),
                ("bob", bob, f"{outside.url}/bob"),
                ("babble", bob, f"http://127.0.0.2:{babbler.port}/"),
            ):
                made = http.post(
                    "/v1/webhooks",
                    json={"url": url, "events": ["job."]},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert made.status_code == 201, made.text
                hooks[name] = (made.json()["id"], key)
            for key in (ana, bob, ana):  # events for every webhook, in turn
                job = http.post(
                    "/v1/jobs",
                    json={"kind": "run", "params": {"tasks": [f"{outside.url}/page"]}},
                    headers={"Authorization": f"Bearer {key}"},
                )
                results(http, {"Authorization": f"Bearer {key}"}, job.json()["id"])

            def babbled() -> list[dict[str, Any]]:
                hook, key = hooks["babble"]
                return [
                    d
                    for d in deliveries(http, {"Authorization": f"Bearer {key}"}, hook)
                    if d["attempts"] >= 2
                ]

            failed = eventually(babbled, "failed deliveries to the babbler, tried again")
            hook_hits = lambda: [h for h in outside.hits if h.path in ("/ana", "/bob")]  # noqa: E731
            # ana made two jobs, bob one: three events each (queued, running, succeeded).
            eventually(lambda: len(hook_hits()) >= 9, "the job events of ana's and bob's jobs")
            time.sleep(1)  # nothing more may come
    finally:
        babbler.close()
    for delivery in failed:
        assert delivery["last_error"] in FAILURE_CLASSES, delivery
        assert SECRET not in str(delivery) and "INTERNAL" not in str(delivery)
    owners = {"/ana": ana.split("_")[1], "/bob": bob.split("_")[1]}
    for hit in hook_hits():
        assert "cookie" not in hit.headers, hit  # never sent, though every answer set one
        assert hit.headers["user-agent"] == "scrapeflow-webhooks/1"
        # A fetch or run job's events go to its own key's webhooks only.
        assert json.loads(hit.body)["data"]["submitted_by"] == owners[hit.path]
    assert sorted(h.path for h in hook_hits()) == ["/ana"] * 6 + ["/bob"] * 3
    assert banner.connections == 0


def test_a_webhook_is_refused_as_it_is_dialled_once_the_policy_no_longer_allows_it(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> None:
    """Registered while its address was allowed; the operator narrows the policy; its
    deliveries are refused when dialled (a name that resolves to loopback), and it hears
    nothing."""
    inside = Peer("127.0.0.1")
    db_url = service_database(request, tmp_path, "embedded")
    env = {"SCRAPEFLOW_EGRESS_ALLOW": "localhost,127.0.0.2", "SCRAPEFLOW_WEBHOOK_RETRY_BASE": "60"}
    try:
        with running_service(tmp_path, sandbox, db_url, customers=[], env=env) as service:
            key = service.key("read", "jobs")
            auth = {"Authorization": f"Bearer {key}"}
            with plain(service) as http:
                made = http.post(
                    "/v1/webhooks",
                    json={"url": f"http://localhost:{inside.port}/hook", "events": ["job."]},
                    headers=auth,
                )
                assert made.status_code == 201, made.text
            stop_service(service.process)
            service.process, service.url = start_service(
                service.env | {"SCRAPEFLOW_EGRESS_ALLOW": "127.0.0.2"}
            )
            with plain(service) as http:
                job = http.post(
                    "/v1/jobs",
                    json={"kind": "run", "params": {"tasks": ["http://127.0.0.2:9/"]}},
                    headers=auth,
                )
                assert job.status_code == 202, job.text
                hook = made.json()["id"]
                tried = eventually(
                    lambda: [d for d in deliveries(http, auth, hook) if d["attempts"]],
                    "a delivery attempted",
                )
        assert tried[0]["last_error"] == "blocked by egress policy: loopback address"
        assert inside.hits == []
    finally:
        inside.close()


def test_the_courier_goes_through_the_standard_proxy_variables(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, outside: Peer
) -> None:
    require_tinyproxy()
    db_url = service_database(request, tmp_path, "embedded")
    with run_tinyproxy("127.0.0.3") as proxy:
        env = {"SCRAPEFLOW_EGRESS_ALLOW": "127.0.0.2", "HTTP_PROXY": proxy}
        with running_service(tmp_path, sandbox, db_url, customers=[], env=env) as service:
            key = service.key("read", "jobs")
            auth = {"Authorization": f"Bearer {key}"}
            with plain(service) as http:
                made = http.post(
                    "/v1/webhooks",
                    json={"url": f"{outside.url}/hook", "events": ["job."]},
                    headers=auth,
                )
                assert made.status_code == 201, made.text
                http.post(
                    "/v1/jobs",
                    json={"kind": "run", "params": {"tasks": [f"{outside.url}/page"]}},
                    headers=auth,
                )
                hooked = eventually(
                    lambda: [h for h in outside.hits if h.path == "/hook"], "a delivery"
                )
    pages = [h for h in outside.hits if h.path == "/page"]
    assert {h.peer for h in hooked} == {"127.0.0.3"}  # through the proxy's exit address
    assert {h.peer for h in pages} == {"127.0.0.3"}  # the run job's request too
    assert all("via" in h.headers for h in hooked)
