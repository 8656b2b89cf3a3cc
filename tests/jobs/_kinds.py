"""Job kinds the job tests run, importable by a queue in another process."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scrapeflow.jobs import JobContext


async def count_to(context: JobContext) -> Mapping[str, Any]:
    """Counts to ``n``, reporting progress; appends one line per attempt to ``marks``."""
    marks = context.params.get("marks")
    if marks:
        with Path(marks).open("a") as file:
            file.write(f"{os.getpid()}\n")
    pause = float(context.params.get("pause", 0))
    n = int(context.params["n"])
    for i in range(1, n + 1):
        context.progress(done=i, total=n)
        await asyncio.sleep(pause)
    return {"counted": n}


async def hang(context: JobContext) -> None:
    """Stores a mark, then waits until cancelled."""
    marks = context.params.get("marks")
    if marks:
        with Path(marks).open("a") as file:
            file.write("stored before the cancel\n")
    await asyncio.Event().wait()


async def explode(context: JobContext) -> None:
    raise RuntimeError("the site changed: http://user:s3cret@bank.example/login")


KINDS = {"count_to": count_to, "hang": hang, "explode": explode}
