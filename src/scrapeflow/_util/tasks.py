"""Background tasks of a service part (a scheduler, a watchdog, a courier): stopping one."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["reraise_if_cancelling", "stop_task"]


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended (None: nothing to stop). What it raised
    besides the cancellation propagates; a caller being cancelled meanwhile still is.

    The usual ``with suppress(CancelledError): await task`` swallows the caller's own
    cancellation too, when it lands during the wait: the caller then carries on as if nothing
    had been asked, and a shutdown that cancels each task once (``asyncio.run``'s) can wait
    forever for it."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        reraise_if_cancelling()


def reraise_if_cancelling() -> None:
    """In an ``except CancelledError`` that waited for another task: raise again when the
    current task was cancelled itself, not only the task it waited for."""
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        raise  # the CancelledError being handled
