"""Storage fixtures: every test runs on local disk and on a real S3 server on loopback (moto's
server mode, one per session, a fresh bucket per test). Nothing reaches AWS."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from scrapeflow.storage import BlobStore

PROGRAM = "gofetch"


@pytest.fixture(autouse=True)
def aws_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS settings from the machine; dummy credentials; no instance-metadata lookups; the
    default spool directory inside the test's tmp_path."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, a free port, for the whole session."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    if server._server is not None:
        server._server.server_close()


@dataclass
class Target:
    """Where a test's store lives, and a view of its raw objects to check the layout."""

    kind: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    root: Path | None = None
    bucket: str = ""
    prefix: str = ""
    endpoint: str = ""

    def store(self, program: str = PROGRAM, **options: Any) -> BlobStore:
        return BlobStore(self.url, program, storage_options={**self.options, **options} or None)

    def s3_client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def object_keys(self) -> list[str]:
        """Every object under the store root, as a path relative to it, sorted."""
        if self.root is not None:
            return sorted(
                p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file()
            )
        client = self.s3_client()
        try:
            keys = []
            for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}/"
            ):
                keys += [o["Key"].removeprefix(f"{self.prefix}/") for o in page.get("Contents", [])]
            return sorted(keys)
        finally:
            client.close()

    def read(self, key: str) -> bytes:
        """The raw bytes of one object (bypassing scrapeflow)."""
        if self.root is not None:
            return (self.root / key).read_bytes()
        client = self.s3_client()
        try:
            body = client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")["Body"]
            with body:
                return body.read()
        finally:
            client.close()


def make_s3_target(endpoint: str) -> Target:
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    try:
        client.create_bucket(Bucket=bucket)
    finally:
        client.close()
    return Target(
        kind="s3",
        url=f"s3://{bucket}/crawls",
        options={"endpoint_url": endpoint, "key": "testing", "secret": "testing"},
        bucket=bucket,
        prefix="crawls",
        endpoint=endpoint,
    )


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """The store's location: a directory, or a fresh bucket with a prefix on the S3 server."""
    if request.param == "local":
        root = tmp_path / "store"
        return Target(kind="local", url=str(root), root=root)
    return make_s3_target(request.getfixturevalue("s3_endpoint"))


@pytest.fixture
def s3_target(s3_endpoint: str) -> Target:
    """A fresh bucket on the S3 server, for behaviours only S3 has (spooling, compaction)."""
    return make_s3_target(s3_endpoint)


@pytest.fixture
async def store(target: Target) -> AsyncIterator[BlobStore]:
    async with target.store() as store:
        yield store
