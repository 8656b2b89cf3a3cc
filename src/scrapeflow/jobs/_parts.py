"""A job split into parts: each part a follow-up job of its own that any worker may take, the
job waiting for them all (what a fetch job's shards and a run job's batches are)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scrapeflow.jobs._model import Job, JobState, follow_up_id
from scrapeflow.jobs._runner import JobContext

__all__ = ["even_slices", "part_ids", "run_parts"]


def even_slices(count: int, parts: int) -> list[range]:
    """The index ranges of ``parts`` parts of a list of ``count`` items: contiguous, in order,
    as even as can be, none empty (so at most ``count`` of them)."""
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    slices, start = [], 0
    for n in range(parts):
        stop = start + size + (1 if n < extra else 0)
        slices.append(range(start, stop))
        start = stop
    return slices


def _key(prefix: str, n: int) -> str:
    return f"{prefix}-{n}"


def part_ids(job_id: str, prefix: str, count: int) -> list[str]:
    """The ids of the ``count`` parts :func:`run_parts` queues for job ``job_id`` (ids are made
    from the job's and the part's key: reading a part needs no lookup)."""
    return [follow_up_id(job_id, _key(prefix, n)) for n in range(count)]


async def run_parts(
    context: JobContext, kind: str, params: Sequence[Mapping[str, Any]], *, prefix: str
) -> list[Job]:
    """Queue one ``kind`` job per item of ``params`` as follow-ups of the running job (keys
    ``{prefix}-0``, ``{prefix}-1``…), wait for them (running those still queued here), and
    return them ended, in order. Raises :class:`RuntimeError` naming the first part that did
    not succeed (the job fails with it; the parts that did keep what they did)."""
    queued = [
        await context.submit(kind, part, key=_key(prefix, n)) for n, part in enumerate(params)
    ]
    ended = await context.join(queued)
    for n, job in enumerate(ended):
        if job.state is not JobState.SUCCEEDED:
            raise RuntimeError(f"{prefix} {n} (job {job.id}) {job.state.value}: {job.error}")
    return ended
