"""A job: one unit of work the service runs — a bank refresh, a fetch, an engine run."""

from __future__ import annotations

import enum
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "ACTIVE_STATES",
    "Job",
    "JobScope",
    "JobState",
    "JobTally",
    "customer_of",
    "follow_up_id",
    "new_job_id",
]


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
    submitted_by: str | None = None
    """The id of the API key that submitted it (None: the service's own work); a part of a
    job (a follow-up) has its job's."""
    customer: str | None = None
    """The customer it works for: its params' ``customer`` (a bank job's), else its job's."""
    cost: int = 1
    """What it takes of its key's quota of active jobs: 1, plus the parts it will queue; a
    part takes nothing (its job counted it)."""

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
            "submitted_by": self.submitted_by,
            "customer": self.customer,
        }


def customer_of(params: dict[str, Any]) -> str | None:
    """The customer a job's params name (``customer``), if any.

    >>> customer_of({"customer": "ana", "access_id": 3}), customer_of({"urls": []})
    ('ana', None)
    """
    customer = params.get("customer")
    return customer if isinstance(customer, str) and customer else None


@dataclass(frozen=True, slots=True)
class JobScope:
    """The jobs one caller may see and cancel: every job (``everything``), else those its key
    submitted (``submitted_by``) and those of ``customer_kinds`` (a customer's refreshes)
    working for one of ``customers`` (None: any customer). A store filters a listing by it
    in its query; :meth:`allows` judges one job the same way.

    >>> scope = JobScope(submitted_by="k1", customer_kinds=frozenset({"bank.refresh"}),
    ...                  customers=frozenset({"ana"}))
    >>> from datetime import UTC, datetime
    >>> ana = Job("j", "bank.refresh", {"customer": "ana"}, JobState.QUEUED, datetime.now(UTC),
    ...           customer="ana")
    >>> scope.allows(ana), scope.allows(Job("f", "fetch", {}, JobState.QUEUED, ana.created_at))
    (True, False)
    """

    everything: bool = False
    submitted_by: str | None = None
    customer_kinds: frozenset[str] = frozenset()
    customers: frozenset[str] | None = None

    def allows(self, job: Job) -> bool:
        """Whether the caller may see ``job``."""
        if self.everything:
            return True
        if self.submitted_by is not None and job.submitted_by == self.submitted_by:
            return True
        if job.kind not in self.customer_kinds:
            return False
        customer = job.customer or customer_of(job.params)
        return customer is not None and (self.customers is None or customer in self.customers)


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
