"""Fair use of event streams, against a real ``scrapeflow serve``: one key's flood of streams is
refused past its cap while another key's reads stay quick; an idle stream reads nothing from
the database until its customer has news; a revoked key's stream closes within a second; ids
out of range are a 422, and a stream that fails after its 200 is counted in ``/v1/stats``."""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from asyncio.subprocess import PIPE
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from sqlalchemy import text

from scrapeflow.db import create_engine
from scrapeflow.sandbox import Sandbox
from scrapeflow.server._keys import revoke_key, split_token
from tests._servers import unavailable

from ._shared import parse_head
from .conftest import Service, running_service

FLOOD = 1_500
HONEST = 4
QUIET = 2.0
"""Seconds the same reads are measured before the flood."""
"""The other key's readers, each reading again as soon as answered (a few hundred reads in
all during the flood: their p99 is not one outlier)."""
PER_KEY = 20  # the default max_streams_per_key
AT_ONCE = FLOOD
"""Requests of the flood in flight at a time: all of them. The first refusals are answered at
once; once the key has been refused more often than its cap, the rest are held for their
``Retry-After`` (5 s), so the flood's connections wait instead of asking again."""


@dataclass
class Stream:
    """A raw HTTP/1.1 request for an event stream: its status, headers, and the open socket."""

    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    buffer: bytes = b""

    async def body(self) -> bytes:
        return await self.reader.readexactly(int(self.headers["content-length"]))

    async def chunk(self) -> bytes | None:
        """The next chunk of the answer's body (chunked encoding); None once it ended."""
        size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
        data = await self.reader.readexactly(size + 2)  # and its CRLF
        return data[:-2] if size else None

    def close(self) -> None:
        self.writer.close()


async def open_stream(url: str, path: str, token: str, *, last_event_id: str = "") -> Stream:
    where = urlsplit(url)
    connecting = asyncio.open_connection(where.hostname, where.port)
    reader, writer = await asyncio.wait_for(connecting, 30)
    extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\nAuthorization: Bearer {token}\r\n"
        f"Accept: text/event-stream\r\n{extra}\r\n".encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    return Stream(*parse_head(head), reader, writer)


async def next_event(stream: Stream, seconds: float) -> dict[str, str]:
    """The next SSE event (its fields), skipping keep-alive comments."""
    async with asyncio.timeout(seconds):
        while True:
            while b"\n\n" not in stream.buffer:
                chunk = await stream.chunk()
                if chunk is None:
                    raise AssertionError("the stream ended")
                stream.buffer += chunk.replace(b"\r\n", b"\n")
            block, _, stream.buffer = stream.buffer.partition(b"\n\n")
            fields: dict[str, str] = {}
            for line in block.decode().splitlines():
                if line and not line.startswith(":"):
                    name, _, value = line.partition(":")
                    fields[name] = value.strip()
            if "event" in fields or "data" in fields:
                return fields


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def flood() -> None:
    """The attacker, in a process of its own (``python -c``, argv: URL, token): open
    :data:`FLOOD` streams, :data:`AT_ONCE` at a time; print the statuses and one refusal as a
    JSON line; hold the streams it got until its stdin closes. It says ``ready`` once started
    (importing takes a loaded machine's CPU for a while: not the service's doing), and floods
    once told a line."""
    url, token = sys.argv[1], sys.argv[2]
    # 1,500 sockets: past a soft limit of 1,024 open files, as the service's own CLI does.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < FLOOD + 100 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FLOOD + 100, hard))

    async def run() -> None:
        gate = asyncio.Semaphore(AT_ONCE)
        held: list[Stream] = []
        statuses: list[int] = []
        refused_after: list[float] = []
        refusal: dict[str, Any] = {}

        async def one() -> None:
            async with gate:
                started = time.monotonic()
                stream = await open_stream(url, "/v1/customers/cust-1/events", token)
                statuses.append(stream.status)
                if stream.status == 429:
                    refused_after.append(time.monotonic() - started)
                if stream.status == 200:
                    held.append(stream)
                    return
                if not refusal:
                    refusal.update(headers=stream.headers, body=(await stream.body()).decode())
                stream.close()

        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # go
        await asyncio.gather(*(one() for _ in range(FLOOD)))
        report = {"statuses": statuses, "refusal": refusal, "refused_after": refused_after}
        print(json.dumps(report), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for stream in held:
            stream.close()

    asyncio.run(run())


async def honest_reads(client: httpx.AsyncClient, until: asyncio.Future[Any]) -> list[float]:
    """The seconds each read took: :data:`HONEST` readers, each reading again as soon as
    answered, until ``until`` is done."""
    latencies: list[float] = []

    async def reader() -> None:
        while not until.done():
            started = time.perf_counter()
            answer = await client.get("/v1/customers/cust-2/accounts")
            latencies.append(time.perf_counter() - started)
            assert answer.status_code == 200, answer.text

    await asyncio.gather(*(reader() for _ in range(HONEST)))
    return latencies


def test_a_flood_of_streams_is_refused_past_the_cap_while_others_read_quickly(
    service: Service,
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 100:
        unavailable(f"the flood needs {FLOOD + 100} open files; this machine allows {hard}")
    attacker, honest = service.key("read", customer="cust-1"), service.key("read")
    code = "from tests.server.test_fair_streams import flood; flood()"

    async def scenario() -> None:
        async with httpx.AsyncClient(
            base_url=service.url, headers={"Authorization": f"Bearer {honest}"}, timeout=30
        ) as client:
            await asyncio.gather(  # connected: no setup measured
                *(client.get("/v1/customers/cust-2/accounts") for _ in range(HONEST))
            )
            attack = await asyncio.create_subprocess_exec(
                sys.executable, "-c", code, service.url, attacker, stdin=PIPE, stdout=PIPE
            )
            assert attack.stdout is not None and attack.stdin is not None
            try:
                await scenario_under(attack, client)
            finally:
                attack.stdin.close()
                try:
                    await asyncio.wait_for(attack.wait(), 30)
                finally:  # a test that failed while the flood ran leaves no attacker behind
                    if attack.returncode is None:
                        attack.kill()
                        await attack.wait()
        deadline = time.monotonic() + 20  # an attempt the key makes too soon is held 5 s
        while True:
            again = await open_stream(service.url, "/v1/customers/cust-1/events", attacker)
            again.close()
            if again.status == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert again.status == 200

    async def scenario_under(attack: asyncio.subprocess.Process, client: httpx.AsyncClient) -> None:
        """The honest key's reads while the flood runs, then what the flood got."""
        assert attack.stdout is not None
        assert await asyncio.wait_for(attack.stdout.readline(), 60) == b"ready\n"
        quiet = await honest_reads(client, asyncio.ensure_future(asyncio.sleep(QUIET)))
        assert attack.stdin is not None
        attack.stdin.write(b"go\n")
        told = asyncio.ensure_future(attack.stdout.readline())
        latencies = await honest_reads(client, told)
        assert len(latencies) >= 40, latencies  # measured all along the flood
        report = json.loads(await told)
        statuses = report["statuses"]
        assert statuses.count(200) == PER_KEY, statuses.count(200)
        assert statuses.count(429) == FLOOD - PER_KEY
        refusal = report["refusal"]
        assert refusal["headers"]["content-type"] == "application/problem+json"
        assert int(refusal["headers"]["retry-after"]) >= 1
        assert json.loads(refusal["body"])["type"] == "too-many-streams"
        # What broke was a stall: reads timed out at 20 s once the streams ran the pool dry.
        # The 250 ms is measured on a quiet machine by bench/abuse.py; here, beside
        # another test worker on two cores, the flood's own client and answers take CPU from
        # the readers whatever the service does (3x the quiet p99 failed at 360 ms against
        # 355 in a full run), so the bound is a second, or five times the quiet p99.
        bound = max(1.0, 5 * p99(quiet))
        assert p99(latencies) < bound, (bound, " ".join(str(round(x * 1000)) for x in latencies))
        # The key kept asking: past its first refusals, the rest were held for their
        # Retry-After (one to two of them) before they were sent.
        assert max(report["refused_after"]) >= int(refusal["headers"]["retry-after"]) - 0.5
        # While the attacker holds its streams, it gets no more; once they end, it does.
        extra = await open_stream(service.url, "/v1/customers/cust-1/events", attacker)
        extra.close()
        assert extra.status == 429

    asyncio.run(scenario())


OUT_OF_RANGE = [
    ("9223372036854775808", ""),  # 2**63: past the database's BIGINT
    ("99999999999999999999", ""),
    ("-1", ""),
    ("12a", ""),
    ("²", ""),  # a digit to str.isdigit, not to int()
    ("", "?after=9223372036854775808"),
    ("", "?after=-1"),
    ("", "?after=1e3"),
    ("", "?after="),
]


def test_an_event_id_out_of_range_is_a_422_before_the_stream(service: Service) -> None:
    with service.client("read") as client:
        for header, query in OUT_OF_RANGE:
            headers = {"Last-Event-ID": header.encode()} if header else {}
            for path in ("/v1/customers/cust-1/events", "/v1/jobs/0123456789abcdef/events"):
                answer = client.get(path + query, headers=headers)
                assert answer.status_code == 422, (header, query, path, answer.text)
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["type"] == "invalid-request"
        with client.stream(
            "GET", "/v1/customers/cust-1/events", headers={"Last-Event-ID": str(2**63 - 1)}
        ) as top:
            assert top.status_code == 200  # the largest id there can be is fine
        with service.client("metrics") as watcher:
            assert watcher.get("/v1/stats").json()["api"]["errors"] == 0


@pytest.fixture
def pg_service(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> Iterator[Service]:
    """The service over PostgreSQL (its streams are woken by LISTEN/NOTIFY)."""
    pg_url: str = request.getfixturevalue("pg_url")
    with running_service(tmp_path, sandbox, pg_url, customers=[1, 2]) as running:
        yield running


async def stream_reads(db_url: str) -> list[tuple[int, str]]:
    """What each connection to the database last ran, if it read a customer's events: its
    backend and the time its query started."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT pid, query_start::text FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND query LIKE '%FROM scrapeflow_events%' "
                    "AND query LIKE '%scrapeflow_events.customer =%'"
                )
            )
            return [(row[0], row[1]) for row in rows]
    finally:
        await engine.dispose()


def test_idle_streams_read_nothing_until_their_customer_has_news(pg_service: Service) -> None:
    token = pg_service.key("read", "refresh")

    async def scenario() -> None:
        streams = [
            await open_stream(pg_service.url, "/v1/customers/cust-1/events", token)
            for _ in range(10)
        ]
        try:
            assert [s.status for s in streams] == [200] * 10
            await asyncio.sleep(1.0)  # each has read the log once, and waits
            seen: set[tuple[int, str]] = set(await stream_reads(pg_service.db_url))
            before = len(seen)
            for _ in range(40):  # 4 s: a stream polling each second would read 40 times
                seen |= set(await stream_reads(pg_service.db_url))
                await asyncio.sleep(0.1)
            assert len(seen) - before <= 1, sorted(seen)
            async with httpx.AsyncClient(
                base_url=pg_service.url, headers={"Authorization": f"Bearer {token}"}
            ) as client:
                refresh = (await client.post("/v1/customers/cust-1/refresh")).json()
            for stream in streams:  # woken by the news, at once
                event = await next_event(stream, 5)
                assert event["event"] == "job.queued"
                assert orjson.loads(event["data"])["job_id"] == refresh["id"]
        finally:
            for stream in streams:
                stream.close()

    asyncio.run(scenario())


def test_a_revoked_key_s_stream_closes_within_a_second(service: Service) -> None:
    token = service.key("read")

    async def scenario() -> None:
        stream = await open_stream(service.url, "/v1/customers/cust-1/events", token)
        assert stream.status == 200
        await asyncio.sleep(0.5)
        ids = split_token(token)
        assert ids is not None
        engine = create_engine(service.db_url)  # as another process revoking it would
        try:
            assert await revoke_key(engine, ids[0])
        finally:
            await engine.dispose()
        revoked_at = time.monotonic()
        async with asyncio.timeout(5):
            while await stream.chunk() is not None:
                pass  # keep-alive comments, until the answer's last chunk
        assert time.monotonic() - revoked_at < 1.0
        stream.close()

    asyncio.run(scenario())


def test_a_stream_that_fails_after_it_started_is_counted_in_stats(pg_service: Service) -> None:
    token = pg_service.key("read")
    pg_service.key("metrics")  # made now: the scenario's loop cannot run another

    async def scenario() -> None:
        stream = await open_stream(pg_service.url, "/v1/customers/cust-1/events", token)
        assert stream.status == 200
        engine = create_engine(pg_service.db_url)
        try:
            async with engine.begin() as connection:  # the log out of reach, then news
                await connection.execute(
                    text("ALTER TABLE scrapeflow_events RENAME TO scrapeflow_events_away")
                )
                payload = orjson.dumps({"from": "test", "customers": ["cust-1"], "jobs": []})
                await connection.execute(
                    text("SELECT pg_notify('scrapeflow_events', :payload)"),
                    {"payload": payload.decode()},
                )
            event = await next_event(stream, 10)
            assert event["event"] == "stream.failed"
            assert orjson.loads(event["data"])["type"] == "stream-failed"
            async with engine.begin() as connection:
                await connection.execute(
                    text("ALTER TABLE scrapeflow_events_away RENAME TO scrapeflow_events")
                )
        finally:
            await engine.dispose()
            stream.close()
        with pg_service.client("metrics") as watcher:
            assert watcher.get("/v1/stats").json()["api"]["errors"] == 1

    asyncio.run(scenario())
