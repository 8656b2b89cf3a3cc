"""Each key's share of a ``serve`` process's time, against a real service: a key alone is
never held however hard it asks; a key that asks without pause while another key reads is
made to wait, and past the bound told 429 ``too-many-requests`` with ``Retry-After``, while
the other key's reads are all answered."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from scrapeflow.sandbox import Sandbox

from ._shared import parse_head
from .conftest import Service, running_service, service_database

AT_ONCE = 200
"""Requests a flooding key keeps in flight."""


@pytest.fixture
def narrow_share(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox
) -> Iterator[Service]:
    """The service with a 250th of the default share per key (0.002 s a second instead of 0.5):
    a flood from the test's one core reaches the 10 s bound on waiting in a second or two
    instead of a minute."""
    db_url = service_database(request, tmp_path, "embedded")
    env = {"SCRAPEFLOW_KEY_TIME_SHARE": "0.002"}
    with running_service(tmp_path, sandbox, db_url, customers=[1, 2], env=env) as running:
        yield running


async def flood(url: str, token: str, seconds: float, statuses: Counter[str]) -> list[str]:
    """``AT_ONCE`` connections reading a status with ``token`` again as soon as answered, for
    ``seconds``; the Retry-After values of refusals. Raw sockets, the request written once: an
    HTTP client's own CPU for 200 loops would take the test's core from the other key's reads
    it measures."""
    where = urlsplit(url)
    request = (
        f"GET /v1/customers/cust-1/status HTTP/1.1\r\nHost: {where.netloc}\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode()
    retry_after: list[str] = []
    end = time.monotonic() + seconds

    async def loop() -> None:
        reader, writer = await asyncio.open_connection(where.hostname, where.port)
        try:
            while time.monotonic() < end:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status, headers = parse_head(head)
                body = await reader.readexactly(int(headers["content-length"]))
                statuses[str(status)] += 1
                if status == 429:
                    assert headers["content-type"] == "application/problem+json"
                    assert json.loads(body)["type"] == "too-many-requests"
                    retry_after.append(headers["retry-after"])
        finally:
            writer.close()

    await asyncio.gather(*(loop() for _ in range(AT_ONCE)))
    return retry_after


def test_a_key_alone_is_never_held_on_the_defaults(service: Service) -> None:
    statuses: Counter[str] = Counter()
    retry_after = asyncio.run(flood(service.url, service.key("read"), 4.0, statuses))
    assert retry_after == []
    assert set(statuses) == {"200"}
    assert statuses["200"] > AT_ONCE


def test_a_flooding_key_waits_its_turn_while_another_key_reads(narrow_share: Service) -> None:
    flooding = narrow_share.key("read")
    honest = narrow_share.key("read", customer="cust-2")
    statuses: Counter[str] = Counter()
    honest_statuses: Counter[int] = Counter()

    async def honest_reads(seconds: float) -> None:
        headers = {"Authorization": f"Bearer {honest}"}
        async with httpx.AsyncClient(base_url=narrow_share.url, headers=headers) as http:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                answer = await http.get("/v1/customers/cust-2/status", timeout=30)
                honest_statuses[answer.status_code] += 1
                await asyncio.sleep(0.05)

    async def scenario() -> list[str]:
        # The other key reads first: the process is shared from the flood's first request.
        reading = asyncio.ensure_future(honest_reads(7.0))
        async with asyncio.timeout(30):
            while not honest_statuses:
                await asyncio.sleep(0.01)
        retry_after = await flood(narrow_share.url, flooding, 6.0, statuses)
        await reading
        return retry_after

    retry_after = asyncio.run(scenario())
    seen = (statuses, honest_statuses)
    assert statuses["429"] > 0, seen  # past the bound: refused, told when to come back
    assert statuses["200"] > 0, statuses  # and served its share meanwhile
    assert all(value.isdigit() and int(value) >= 1 for value in retry_after)
    # The other key was never refused nor held past its reads' timeout.
    assert set(honest_statuses) == {200}, honest_statuses
    assert honest_statuses[200] > 10

    # The refusals are for the flooding key only, not its address: a third key asks at once.
    with narrow_share.client("read", customer="cust-1") as third:
        assert third.get("/v1/customers/cust-1/status").status_code == 200
