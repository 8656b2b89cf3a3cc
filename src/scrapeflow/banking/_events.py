"""What a launch tells the outside world while it runs (the service's live delivery)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["EventKind", "EventSink", "LaunchEvent"]


class EventKind(enum.StrEnum):
    LAUNCH_STARTED = "launch_started"
    ACCOUNTS = "accounts"
    """A batch of accounts (with their balances) landed in the database."""
    MOVEMENTS = "movements"
    """A batch of one account's movements landed."""
    ACCESS_FINISHED = "access_finished"
    LAUNCH_FINISHED = "launch_finished"


@dataclass(frozen=True, slots=True)
class LaunchEvent:
    """One fact of a launch. ``count`` is rows landed (accounts or movements) for batches."""

    kind: EventKind
    launch_id: str
    customer_id: int
    access_id: int | None = None
    bank: str | None = None
    account_ref: str | None = None
    count: int = 0
    stored: int | None = None
    """For a batch: the rows the database holds for it (``count`` is what was read); fewer
    ends the access ``site_changed``."""
    result_code: str | None = None
    """An access's result (``access_finished``)."""
    outcome: str | None = None
    """The refresh's :class:`~scrapeflow.banking.Outcome` (``launch_finished``)."""
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "launch_id": self.launch_id,
            "customer_id": self.customer_id,
            "access_id": self.access_id,
            "bank": self.bank,
            "account_ref": self.account_ref,
            "count": self.count,
            "stored": self.stored,
            "result_code": self.result_code,
            "outcome": self.outcome,
            "at": self.at.isoformat(),
        }


EventSink = Callable[[LaunchEvent], Awaitable[None] | None]
"""Receives every event; a coroutine function is awaited (slow sinks slow the launch)."""
