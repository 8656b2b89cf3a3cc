"""A job: one unit of work the service runs — a bank refresh, a fetch, an engine run."""

from __future__ import annotations

import enum
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["ACTIVE_STATES", "Job", "JobState", "JobTally", "follow_up_id", "new_job_id"]


class JobState(enum.StrEnum):
    """Where a job stands. ``queued`` and ``running`` are active; the rest are final."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self not in ACTIVE_STATES


ACTIVE_STATES = frozenset({JobState.QUEUED, JobState.RUNNING})


def new_job_id() -> str:
    """A unique id that sorts by creation time: 12 hex digits of milliseconds, 16 random."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


def follow_up_id(parent_id: str, key: str) -> str:
    """The id of the follow-up job that job ``parent_id`` queues under ``key``: always the same
    for the same two, so a job run again after a crash queues the job it queued before, not a
    second one (a chain never forks). It sorts just after its parent (one millisecond later).
    """
    try:
        born = int(parent_id[:12], 16) + 1
    except ValueError:  # not an id this module made: any time will do, the digest decides
        born = 0
    digest = hashlib.sha256(f"{parent_id}\0{key}".encode()).hexdigest()[:16]
    return f"{born:012x}{digest}"


@dataclass(slots=True)
class Job:
    """A job as stored: what to do (``kind``, ``params``), where it stands, and what it did.

    ``dedupe_key``: at most one active (queued or running) job holds a given key; submitting
    another returns that one (a second refresh of a customer gets the refresh under way).
    """

    id: str
    kind: str
    params: dict[str, Any]
    state: JobState
    created_at: datetime
    dedupe_key: str | None = None
    progress: dict[str, int] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: str | None = None
    attempts: int = 0
    cancel_requested: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    heartbeat_at: datetime | None = None
    owner: str | None = None
    """The queue process running it (while running)."""

    def as_dict(self) -> dict[str, Any]:
        """The job as JSON-ready values (times in ISO 8601, UTC)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "params": self.params,
            "state": self.state.value,
            "dedupe_key": self.dedupe_key,
            "progress": dict(self.progress),
            "result": self.result,
            "error": self.error,
            "attempts": self.attempts,
            "cancel_requested": self.cancel_requested,
            "created_at": _iso(self.created_at),
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "heartbeat_at": _iso(self.heartbeat_at),
        }


@dataclass(slots=True)
class JobTally:
    """How many jobs of a set are in each state, and when the last of them ended."""

    counts: dict[JobState, int] = field(default_factory=dict)
    last_finished_at: datetime | None = None

    def add(self, state: JobState, count: int, finished_at: datetime | None) -> None:
        self.counts[state] = self.counts.get(state, 0) + count
        if finished_at is not None and (
            self.last_finished_at is None or finished_at > self.last_finished_at
        ):
            self.last_finished_at = finished_at

    @property
    def active(self) -> int:
        """Jobs queued or running."""
        return sum(n for state, n in self.counts.items() if state in ACTIVE_STATES)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
