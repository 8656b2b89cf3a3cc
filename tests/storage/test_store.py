"""BlobStore: layout, dedup, atomic puts, errors a user can act on, no credential ever shown."""

from __future__ import annotations

import asyncio
import hashlib
import re
import traceback

import pytest

from scrapeflow.errors import (
    ConfigError,
    InputError,
    ObjectNotFound,
    StorageError,
    StoreUnavailable,
)
from scrapeflow.storage import BlobStore, StoredContent, sha384_hex
from tests.storage.conftest import PROGRAM, Target, make_s3_target

BODY = b"<html><body>the same page, byte for byte</body></html>"


async def test_put_stores_the_body_unchanged_under_its_sha384(
    target: Target, store: BlobStore
) -> None:
    stored = await store.put(BODY)

    checksum = hashlib.sha384(BODY).hexdigest()
    assert stored == StoredContent(checksum, store.location(checksum), created=True)
    assert target.object_keys() == [f"{PROGRAM}/sha384_content/{checksum}"]
    assert target.read(f"{PROGRAM}/sha384_content/{checksum}") == BODY
    assert await store.get(checksum) == BODY
    assert await store.exists(checksum)


async def test_location_is_the_object_a_user_can_open(target: Target, store: BlobStore) -> None:
    checksum = sha384_hex(BODY)
    if target.kind == "local":
        assert store.location(checksum) == f"{target.root}/{PROGRAM}/sha384_content/{checksum}"
    else:
        expected = f"s3://{target.bucket}/crawls/{PROGRAM}/sha384_content/{checksum}"
        assert store.location(checksum) == expected


async def test_identical_content_is_stored_once(target: Target, store: BlobStore) -> None:
    first = await store.put(BODY)
    second = await store.put(bytearray(BODY))

    assert first.created and not second.created
    assert second.checksum == first.checksum and second.location == first.location
    assert target.object_keys() == [f"{PROGRAM}/sha384_content/{first.checksum}"]


async def test_concurrent_puts_of_one_body_create_it_exactly_once(target: Target) -> None:
    stores = [target.store() for _ in range(4)]
    try:
        results = await asyncio.gather(*(s.put(BODY) for s in stores for _ in range(5)))
    finally:
        await asyncio.gather(*(s.aclose() for s in stores))

    assert sum(r.created for r in results) == 1
    assert target.read(f"{PROGRAM}/sha384_content/{sha384_hex(BODY)}") == BODY


async def test_a_large_body_round_trips(target: Target, store: BlobStore) -> None:
    body = bytes(range(256)) * 12_000  # 3 MB: hashed and written off the event loop locally

    stored = await store.put(body)

    assert stored.checksum == hashlib.sha384(body).hexdigest()
    assert await store.get(stored.checksum) == body
    assert not any(".sf-tmp-" in key for key in target.object_keys())


async def test_programs_are_kept_apart(target: Target) -> None:
    async with target.store("alpha") as alpha, target.store("beta") as beta:
        stored = await alpha.put(BODY)
        assert not await beta.exists(stored.checksum)
        with pytest.raises(ObjectNotFound, match=f"no content {stored.checksum}"):
            await beta.get(stored.checksum)


async def test_missing_content_is_object_not_found(store: BlobStore) -> None:
    checksum = sha384_hex(b"never stored")

    assert not await store.exists(checksum)
    with pytest.raises(ObjectNotFound) as caught:
        await store.get(checksum)
    assert isinstance(caught.value, KeyError)
    assert str(caught.value) == f"no content {checksum} in {store.root}/{PROGRAM}"


async def test_a_malformed_checksum_is_refused(store: BlobStore) -> None:
    with pytest.raises(InputError, match="is not a SHA-384 checksum"):
        await store.get("../../etc/passwd")
    with pytest.raises(InputError, match="is not a SHA-384 checksum"):
        store.location("ABC")


async def test_put_refuses_text(store: BlobStore) -> None:
    with pytest.raises(InputError, match="put\\(\\) takes bytes, not str"):
        await store.put("<html>")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://files.example/store", "has scheme 'ftp'; supported: a local path, file://, s3://"),
        ("memory://x", "has scheme 'memory'"),
        ("", "store URL is empty"),
        ("s3://", "names no bucket"),
    ],
)
def test_a_bad_store_url_is_a_config_error_naming_it(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BlobStore(url, PROGRAM)


def test_a_bad_program_name_is_refused(tmp_path) -> None:
    with pytest.raises(
        ConfigError, match=re.escape("program '../up' is not usable in a storage path")
    ):
        BlobStore(str(tmp_path), "../up")


def test_storage_options_on_a_local_store_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="storage_options apply to s3:// stores only"):
        BlobStore(str(tmp_path), PROGRAM, storage_options={"key": "k"})


def test_credentials_in_the_url_are_refused_without_being_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        BlobStore("s3://AKIDLEAK:hunter2secret@bucket/prefix", PROGRAM)

    message = str(caught.value)
    assert "holds credentials" in message
    assert "hunter2secret" not in message and "AKIDLEAK" not in message


def test_file_urls_and_plain_paths_name_the_same_store(tmp_path) -> None:
    assert BlobStore(f"file://{tmp_path}", PROGRAM).root == str(tmp_path)
    assert BlobStore(str(tmp_path), PROGRAM).root == str(tmp_path)


async def test_a_missing_bucket_is_a_clear_store_unavailable(s3_endpoint: str) -> None:
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    async with BlobStore("s3://no-such-bucket/p", PROGRAM, storage_options=options) as store:
        for attempt in (store.check(), store.put(BODY), store.get(sha384_hex(BODY))):
            with pytest.raises(StoreUnavailable) as caught:
                await attempt
            assert str(caught.value) == (
                f"S3 bucket 'no-such-bucket' does not exist (endpoint {s3_endpoint})"
            )


async def test_an_unwritable_directory_is_store_unavailable(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")

    store = BlobStore(str(blocker / "store"), PROGRAM)
    with pytest.raises(StoreUnavailable, match="cannot create directory"):
        await store.put(BODY)


async def test_credentials_never_appear_in_reprs_or_errors(s3_endpoint: str) -> None:
    key, secret = "AKIAEXAMPLEKEY0SHOWN", "Sup3r/Secret+Value-never-shown"
    target = make_s3_target(s3_endpoint)
    options = {"endpoint_url": s3_endpoint, "key": key, "secret": secret}
    shown: list[str] = []
    async with BlobStore(target.url, PROGRAM, storage_options=options) as store:
        shown += [repr(store), str(store), repr(store._backend)]
        await store.put(BODY)  # the credentials work
        with pytest.raises(ObjectNotFound) as missing:
            await store.get(sha384_hex(b"absent"))
        shown.append("".join(traceback.format_exception(missing.value)))
    async with BlobStore("s3://no-such-bucket", PROGRAM, storage_options=options) as store:
        with pytest.raises(StorageError) as unavailable:
            await store.put(BODY)
        shown.append("".join(traceback.format_exception(unavailable.value)))
    with pytest.raises(ConfigError) as bad_option:
        BlobStore(target.url, PROGRAM, storage_options={**options, "no_such_option": secret})
    shown.append("".join(traceback.format_exception(bad_option.value)))

    assert shown[0] == f"BlobStore('s3://{target.bucket}/crawls', program='gofetch')"
    for text in shown:
        assert key not in text and secret not in text
