"""Helpers of several modules' tests: one service for a module's tests, where each test leaves
the others' state alone (starting a service costs seconds; these tests check answers, not
start-up), and the head of a raw HTTP answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scrapeflow.sandbox import Sandbox, SandboxConfig

from .conftest import Service, running_service


@contextmanager
def module_service(
    tmp_path: Path, *, customers: list[int], env: dict[str, str] | None = None
) -> Iterator[Service]:
    """The service (embedded jobs, SQLite) with customers ``cust-N``, and its sandbox."""
    config = SandboxConfig(hostility="none", latency_ms=(0, 2), customers=1000)
    with Sandbox.in_thread(config) as sandbox:
        db_url = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
        with running_service(tmp_path, sandbox, db_url, customers=customers, env=env) as running:
            yield running


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status and headers (names in lower case) of a raw HTTP/1.1 answer's head."""
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers
