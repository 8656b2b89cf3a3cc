"""S3 backend on s3fs's async API (one aiobotocore client per store, bound to its event loop).

S3 cannot append, so a line set (an index key) is a *base object* plus *line objects*:

* ``add_line`` PUTs the line as its own object ``{key}.d/{tag}-{time_ns}-{uuid4}`` with
  ``If-None-Match: *``: a fresh name on every machine, and nothing is ever overwritten. Two
  writers of one key touch two different objects, so no line can be lost.
* ``read_lines`` lists ``{key}.d/``, reads those objects (one that has vanished meanwhile was
  folded into the base by a compaction, which wrote the base before deleting it), and reads the
  base *last*, so every line is seen at least once.
* ``compact_lines`` notes the base's ETag, lists and reads the line objects, writes base + lines
  as the new base with ``If-Match`` (``If-None-Match: *`` when there was no base), then deletes
  only the line objects it read. A line added during the compaction is not among them and stays;
  a concurrent compaction makes the conditional write fail, and this one then deletes nothing.
  Between the write and the deletes a line is in both places, hence the exact-duplicate rule
  of :mod:`scrapeflow.storage`.

Credentials live only inside the s3fs client: never in a repr, a log line or a message (every
message is scrubbed of the configured key, secret and token as a second guard).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
import uuid
from typing import Any

import s3fs

from scrapeflow._util.redact import redact
from scrapeflow.errors import ConfigError, StorageError, StoreUnavailable
from scrapeflow.storage._types import split_lines

__all__ = ["S3Backend"]

_FORCED = {"asynchronous": True, "skip_instance_cache": True, "use_listings_cache": False}
_SECRET_OPTIONS = ("key", "secret", "token", "password", "username")
_SECRET_CLIENT_KWARGS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
_DENIED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "403",
    "AllAccessDisabled",
}
# A conditional write refused: the base changed (or vanished) since its ETag was taken.
_LOST_RACE = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409"}
_READ_CONCURRENCY = 32
_DELETE_BATCH = 1000


class S3Backend:
    """Objects under ``s3://bucket/prefix``. See the module docstring for the line sets."""

    def __init__(self, path: str, shown_url: str, options: dict[str, Any]) -> None:
        bucket, _, prefix = path.strip("/").partition("/")
        if "@" in bucket:
            raise ConfigError(
                f"store URL {shown_url} holds credentials: pass them in storage_options "
                "(key, secret) or the AWS_* environment variables, never in the URL"
            )
        if not bucket:
            raise ConfigError(f"store URL {shown_url} names no bucket: use s3://bucket/prefix")
        self.bucket = bucket
        self._key_prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.root = f"s3://{bucket}/{self._key_prefix}".rstrip("/")
        self._secrets = _secret_values(options)
        client_kwargs = options.get("client_kwargs") or {}
        self._endpoint = redact(
            str(
                options.get("endpoint_url")
                or client_kwargs.get("endpoint_url")
                or os.environ.get("AWS_ENDPOINT_URL_S3")
                or os.environ.get("AWS_ENDPOINT_URL")
                or "AWS"
            )
        )
        unknown = sorted(set(options) - _accepted_options())
        if unknown:
            raise ConfigError(
                f"store {self.root}: unknown storage_options {unknown}; s3fs accepts "
                "endpoint_url, key, secret, token, client_kwargs, config_kwargs, …"
            )
        try:
            self._fs = s3fs.S3FileSystem(**{**options, **_FORCED})
        except Exception as exc:  # a misspelt option: name the type only, values may be secret
            raise ConfigError(
                f"store {self.root}: storage_options not accepted by s3fs ({type(exc).__name__}; "
                f"options given: {sorted(options)})"
            ) from None
        self._checked = False
        self._check_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"S3Backend({self.root!r}, endpoint={self._endpoint!r})"

    def location(self, key: str) -> str:
        return f"{self.root}/{key}"

    def local_path(self, key: str) -> None:
        return None

    def _object_key(self, key: str) -> str:
        return f"{self._key_prefix}{key}"

    def _path(self, key: str) -> str:
        return f"{self.bucket}/{self._key_prefix}{key}"

    # -- plain objects -------------------------------------------------------------------------

    async def check(self) -> None:
        await self._check_bucket()

    async def exists(self, key: str) -> bool:
        await self._check_bucket()
        try:
            await self._fs._call_s3("head_object", Bucket=self.bucket, Key=self._object_key(key))
        except FileNotFoundError:
            return False
        except Exception as exc:
            raise self._error("look up", key, exc) from exc
        return True

    async def read(self, key: str) -> bytes | None:
        await self._check_bucket()
        try:
            data: bytes = await self._fs._cat_file(self._path(key))
        except FileNotFoundError as exc:
            if _code(exc) == "NoSuchBucket":
                raise self._error("read", key, exc) from exc
            return None
        except Exception as exc:
            raise self._error("read", key, exc) from exc
        return data

    async def create(self, key: str, data: bytes) -> bool:
        if await self.exists(key):  # a HEAD saves uploading a body that is already there
            return False
        try:
            await self._fs._pipe_file(self._path(key), data, IfNoneMatch="*")
        except Exception as exc:
            if _lost_race(exc):
                return False  # another writer won the race with the same bytes
            raise self._error("write", key, exc) from exc
        return True

    async def replace(self, key: str, data: bytes) -> None:
        await self._check_bucket()
        try:
            await self._fs._pipe_file(self._path(key), data)
        except Exception as exc:
            raise self._error("write", key, exc) from exc

    async def upload(self, path: str, key: str) -> None:
        await self._check_bucket()
        try:
            await self._fs._put_file(path, self._path(key))
        except Exception as exc:
            raise self._error("upload", key, exc) from exc

    async def download(self, key: str, path: str) -> bool:
        if not await self.exists(key):
            return False
        try:
            await self._fs._get_file(self._path(key), path)
        except FileNotFoundError as exc:
            if _code(exc) == "NoSuchBucket":
                raise self._error("download", key, exc) from exc
            return False
        except Exception as exc:
            raise self._error("download", key, exc) from exc
        return True

    async def list_names(self, key: str) -> list[str]:
        await self._check_bucket()
        try:
            entries = await self._fs._lsdir(self._path(key), refresh=True)
        except FileNotFoundError as exc:
            if _code(exc) == "NoSuchBucket":
                raise self._error("list", key, exc) from exc
            return []
        except Exception as exc:
            raise self._error("list", key, exc) from exc
        return sorted(e["name"].rsplit("/", 1)[-1] for e in entries if e.get("type") == "file")

    # -- line sets -----------------------------------------------------------------------------

    async def add_line(self, key: str, line: bytes, tag: str) -> None:
        name = f"{tag}-{time.time_ns():019d}-{uuid.uuid4().hex}"
        await self._check_bucket()
        try:
            await self._fs._pipe_file(self._path(f"{key}.d/{name}"), line, IfNoneMatch="*")
        except Exception as exc:
            raise self._error("add a line to", key, exc) from exc

    async def read_lines(self, key: str) -> list[bytes]:
        names = await self.list_names(f"{key}.d")
        parts = await self._read_many([f"{key}.d/{name}" for name in names])
        base = await self.read(key)  # last: see the module docstring
        lines = split_lines(base or b"")
        for part in parts:
            lines.extend(split_lines(part or b""))
        return lines

    async def compact_lines(self, key: str) -> int:
        await self._check_bucket()
        path = self._path(key)
        try:
            etag: str | None = (await self._fs._info(path, refresh=True))["ETag"]
        except FileNotFoundError:
            etag = None
        except Exception as exc:
            raise self._error("compact", key, exc) from exc
        names = await self.list_names(f"{key}.d")
        if not names:
            return 0
        # The base is read after its ETag was taken: if it changed in between, the conditional
        # write below fails, so a newer base is never overwritten by an older one plus lines.
        base = await self.read(key) if etag is not None else b""
        parts = await self._read_many([f"{key}.d/{name}" for name in names])
        folded = [name for name, part in zip(names, parts, strict=True) if part is not None]
        merged: list[bytes] = split_lines(base or b"")
        for part in parts:
            merged.extend(split_lines(part or b""))
        body = b"".join(line + b"\n" for line in dict.fromkeys(merged))
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:  # one PUT whatever the size, so the condition is always sent
            await self._fs._call_s3(
                "put_object", Bucket=self.bucket, Key=self._object_key(key), Body=body, **condition
            )
        except Exception as exc:
            if _lost_race(exc):
                return 0  # another compaction won; it owns the line objects it read
            raise self._error("compact", key, exc) from exc
        await self._delete([f"{key}.d/{name}" for name in folded])
        return len(folded)

    async def _read_many(self, keys: list[str]) -> list[bytes | None]:
        limit = asyncio.Semaphore(_READ_CONCURRENCY)

        async def one(key: str) -> bytes | None:
            async with limit:
                return await self.read(key)

        return list(await asyncio.gather(*(one(k) for k in keys)))

    async def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start : start + _DELETE_BATCH]
            objects = [{"Key": self._object_key(k)} for k in batch]
            try:
                await self._fs._call_s3(
                    "delete_objects",
                    Bucket=self.bucket,
                    Delete={"Objects": objects, "Quiet": True},
                )
            except Exception as exc:
                raise self._error("delete line objects of", keys[0], exc) from exc

    # -- lifecycle and errors ------------------------------------------------------------------

    async def _check_bucket(self) -> None:
        """Once per store: a missing bucket is one clear error, not a "not found" per object."""
        if self._checked:
            return
        async with self._check_lock:
            if not self._checked:  # another task may have checked while this one waited
                await self._head_bucket()
                self._checked = True

    async def _head_bucket(self) -> None:
        try:
            await self._fs._call_s3("head_bucket", Bucket=self.bucket)
        except FileNotFoundError as exc:
            raise StoreUnavailable(
                f"S3 bucket {self.bucket!r} does not exist (endpoint {self._endpoint})"
            ) from exc
        except Exception as exc:
            raise self._error("open", "", exc) from exc

    async def aclose(self) -> None:
        fs = self._fs
        creator = getattr(fs, "_s3creator", None)
        if getattr(fs, "_s3", None) is not None and creator is not None:
            await creator.__aexit__(None, None, None)
            fs._s3 = None

    def _error(self, action: str, key: str, exc: BaseException) -> StorageError:
        where = self.location(key) if key else self.root
        code = _code(exc)
        if code == "NoSuchBucket":
            return StoreUnavailable(
                f"S3 bucket {self.bucket!r} does not exist (endpoint {self._endpoint})"
            )
        if isinstance(exc, PermissionError) or code in _DENIED:
            return StoreUnavailable(
                f"cannot {action} {where}: access denied ({code or 'forbidden'}); "
                "check the credentials and the bucket policy"
            )
        detail = self._scrub(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, ConnectionError | TimeoutError) or "Connect" in type(exc).__name__:
            return StoreUnavailable(f"cannot reach S3 endpoint {self._endpoint}: {detail}")
        return StorageError(f"cannot {action} {where}: {detail}")

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return redact(text)


@functools.cache
def _accepted_options() -> frozenset[str]:
    """What S3FileSystem takes: its own parameters, fsspec's and the aiobotocore session's."""
    from aiobotocore.session import AioSession
    from fsspec.spec import AbstractFileSystem

    names: set[str] = set()
    for function in (s3fs.S3FileSystem.__init__, AbstractFileSystem.__init__, AioSession.__init__):
        names.update(
            p.name
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        )
    return frozenset(names | {"use_listings_cache", "listings_expiry_time", "max_paths"})


def _lost_race(exc: BaseException) -> bool:
    """A conditional write was refused (``If-None-Match``/``If-Match`` did not hold)."""
    return isinstance(exc, FileExistsError) or _code(exc) in _LOST_RACE


def _code(exc: BaseException) -> str:
    """The S3 error code behind ``exc`` (s3fs keeps botocore's ClientError as the cause)."""
    for err in (exc, exc.__cause__, exc.__context__):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code", ""))
    return ""


def _secret_values(options: dict[str, Any]) -> list[str]:
    values = [options.get(name) for name in _SECRET_OPTIONS]
    client_kwargs = options.get("client_kwargs") or {}
    values += [client_kwargs.get(name) for name in _SECRET_CLIENT_KWARGS]
    # Longest first, so a secret that contains another is masked whole.
    return sorted({v for v in values if isinstance(v, str) and len(v) >= 4}, key=len, reverse=True)
