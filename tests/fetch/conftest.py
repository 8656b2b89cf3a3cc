"""Fixtures for the fetcher: the sandbox site, S3 (moto's server, shared with the storage
tests), and the machine's real Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scrapeflow.sandbox import PlainSite, SiteConfig, serve_in_thread
from tests.storage.conftest import Target, make_s3_target, s3_endpoint  # noqa: F401 - fixtures

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS settings from the machine; dummy credentials; no instance-metadata lookups."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "FETCH_", "CONCURRENT_")) or name in ("MAX_CPUS", "REDIS_URL"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def site() -> Iterator[str]:
    with serve_in_thread(PlainSite(SiteConfig(pages=2000)).app) as url:
        yield url


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "local":
        root = tmp_path / "store"
        return Target(kind="local", url=str(root), root=root)
    return make_s3_target(request.getfixturevalue("s3_endpoint"))


@pytest.fixture
def redis_stream() -> Iterator[redis.Redis]:
    """The machine's Redis. Missing: the test fails under CI, is skipped elsewhere."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        if os.environ.get("CI") == "true":
            pytest.fail("Redis is not running on 127.0.0.1:6379 (see the env skill's machine page)")
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    yield client
    client.close()
