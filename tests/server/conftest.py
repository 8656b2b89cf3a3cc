"""A real ``scrapeflow serve`` process on port 0, over a migrated SQLite database, with the
sandbox's banks, and customers whose accesses hold the sandbox's credentials."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from scrapeflow.banking import CredentialVault, migrate
from scrapeflow.db import create_engine
from scrapeflow.sandbox import Sandbox
from scrapeflow.server import create_key
from tests._servers import add_sandbox_customers

BANKS = ("formbank", "apibank", "legacybank")


@dataclass
class Service:
    url: str
    env: dict[str, str]
    db_url: str
    process: subprocess.Popen[str]
    keys: dict[str, str] = field(default_factory=dict)

    def key(self, *scopes: str, customer: str | None = None) -> str:
        """An API key with these scopes (made once per test and scope set)."""
        name = ",".join(sorted(scopes)) + (f"@{customer}" if customer else "")
        if name not in self.keys:
            self.keys[name] = asyncio.run(self._make_key(scopes, customer))
        return self.keys[name]

    async def _make_key(self, scopes: tuple[str, ...], customer: str | None) -> str:
        engine = create_engine(self.db_url)
        try:
            token, _ = await create_key(
                engine, scopes=scopes, customers=[customer] if customer else []
            )
            return token
        finally:
            await engine.dispose()

    def client(self, *scopes: str, customer: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key(*scopes, customer=customer)}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def start_service(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "scrapeflow", "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        process.kill()
        raise AssertionError(f"serve did not start: {line!r} {process.stderr.read()[-2000:]!r}")
    return process, line.split()[-1]


def stop_service(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


async def add_customers(sandbox: Sandbox, db_url: str, key: str, numbers: list[int]) -> None:
    """Customers ``cust-N`` with an access at every bank, holding the sandbox's credentials."""
    await migrate(db_url)
    await add_sandbox_customers(sandbox, db_url, key, numbers, BANKS)


@pytest.fixture
def service(tmp_path: Path, sandbox: Sandbox) -> Iterator[Service]:
    """The service, with customers cust-1, cust-2 (a one-time code at legacybank) and cust-3."""
    manifest = tmp_path / "sandbox.json"
    manifest.write_text(json.dumps(sandbox.manifest()))
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
    vault_key = CredentialVault.generate_key()
    asyncio.run(add_customers(sandbox, db_url, vault_key, [1, 2, 3]))
    env = {
        **os.environ,
        "SCRAPEFLOW_DB_URL": db_url,
        "SCRAPEFLOW_VAULT_KEYS": vault_key,
        "SCRAPEFLOW_SANDBOX_MANIFEST": str(manifest),
        "SCRAPEFLOW_LOG_DIR": str(tmp_path / "logs"),
        "PYTHONUNBUFFERED": "1",
        "SCRAPEFLOW_SCHEDULE": "off",  # no daily run in the middle of a test
    }
    process, url = start_service(env)
    running = Service(url, env, db_url, process)
    try:
        yield running
    finally:
        stop_service(running.process)  # a test may have restarted it
