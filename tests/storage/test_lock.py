"""The shard lock: one run of a (fetch id, offset, limit) at a time, held by another process for
real, on local disk and for S3 (whose lock lives in the spool directory, beside the log)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from scrapeflow.errors import StoreUnavailable
from scrapeflow.storage import FetchInProgress, ShardLock
from tests._s3 import Target

HOLDER = textwrap.dedent(
    """
    import asyncio, json, sys
    from scrapeflow.storage import BlobStore, ShardLock
    url, options = sys.argv[1], json.loads(sys.argv[2]) or None
    lock = ShardLock(BlobStore(url, "gofetch", storage_options=options), "48213", 0, 500)
    lock.acquire()
    print("locked", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    """
)


def test_a_shard_held_by_another_process_is_refused_until_it_exits(target: Target) -> None:
    import json

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, target.url, json.dumps(target.options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(FetchInProgress) as refused:
            ShardLock(target.store(), "48213", 0, 500).acquire()
        message = str(refused.value)
        assert message.startswith("fetch 48213 (offset 0, limit 500) is already running")
        assert f"by pid {holder.pid}" in message
        # Other shards of the same fetch id (gofetch's fan-out) are not locked out.
        with ShardLock(target.store(), "48213", 500, 500):
            pass
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()
    with ShardLock(target.store(), "48213", 0, 500) as lock:  # its exit released it
        assert lock.fd is not None
        assert os.stat(lock.path).st_mode & 0o777 == 0o600


def test_a_released_lock_leaves_no_file_and_can_be_taken_again(target: Target) -> None:
    lock = ShardLock(target.store(), "7", 0, 10).acquire()
    path = lock.path
    with pytest.raises(FetchInProgress, match="fetch 7 "):
        ShardLock(target.store(), "7", 0, 10).acquire()
    lock.release()
    assert not os.path.exists(path)
    ShardLock(target.store(), "7", 0, 10).acquire().release(remove=False)
    assert os.path.exists(path)  # kept when asked: a crashed run's file is simply reused
    ShardLock(target.store(), "7", 0, 10).acquire().release()


def test_a_lock_that_cannot_be_created_is_store_unavailable(tmp_path) -> None:
    from scrapeflow.storage import BlobStore

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="cannot create directory"):
        ShardLock(BlobStore(str(blocker), "gofetch"), "7", 0, 10).acquire()
    assert blocker.read_text() == "not a directory"
