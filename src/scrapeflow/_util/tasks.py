"""Background tasks of a service part (a scheduler, a watchdog, a courier): stopping one."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["stop_task"]


async def stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait until it has ended (None: nothing to stop). What it raised
    besides the cancellation propagates; a caller being cancelled meanwhile still is."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
