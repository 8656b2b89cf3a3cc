"""Stopping a background task (``scrapeflow._util.tasks.stop_task``): the task ends, what it
raised besides its cancellation propagates, and a caller cancelled while it waits stays
cancelled — else a shutdown that cancels each task once (``asyncio.run``'s, pytest-asyncio's)
waits forever for a caller that carried on."""

from __future__ import annotations

import asyncio

import pytest

from scrapeflow._util.tasks import stop_task


async def test_the_task_ends_and_the_caller_goes_on() -> None:
    task = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)
    await stop_task(task)
    assert task.cancelled()
    await stop_task(None)  # nothing to stop


async def test_what_the_task_raised_while_stopping_propagates() -> None:
    async def breaks_on_stop() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("its cleanup failed") from None

    task = asyncio.create_task(breaks_on_stop())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="its cleanup failed"):
        await stop_task(task)


async def test_a_caller_cancelled_while_it_waits_is_cancelled() -> None:
    cleaning = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaning.set()
            await asyncio.sleep(0.5)  # its cleanup takes a while

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    after: list[str] = []

    async def caller() -> None:
        await stop_task(task)
        after.append("carried on")  # what a swallowed cancellation would let it do
        await asyncio.Event().wait()

    stopping = asyncio.create_task(caller())
    await cleaning.wait()
    stopping.cancel()  # as a shutdown does, once
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await stopping
    assert after == []
    assert stopping.cancelled()
