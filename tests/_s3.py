"""Where a storage test's blobs live: a local directory or a bucket on the loopback S3 server.

Shared by the storage and fetch tests; the fixtures that hand these out (``target``,
``s3_target``, ``s3_endpoint``) are in ``tests/_servers.py``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from scrapeflow.storage import BlobStore

__all__ = ["PROGRAM", "Target", "local_target", "make_s3_target"]

PROGRAM = "gofetch"


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
        return _client(self.endpoint)

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


def local_target(root: Path) -> Target:
    """A store in the directory ``root``."""
    return Target(kind="local", url=str(root), root=root)


def make_s3_target(endpoint: str) -> Target:
    """A store under the prefix ``crawls`` of a fresh bucket on the S3 server at ``endpoint``."""
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    client = _client(endpoint)
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


def _client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
