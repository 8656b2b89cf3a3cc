"""What the steps of one launch share: its id, log, day and codes, what its accesses began and
what its writes lost (:class:`Launch`); a launch spread over workers (:class:`SpreadLaunch`)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from scrapeflow.banking._events import EventKind, LaunchEvent
from scrapeflow.banking._launchlog import LaunchLog
from scrapeflow.banking._results import Outcome
from scrapeflow.banking._state import ClaimedAccess
from scrapeflow.errors import ResultsNotStored

__all__ = ["Launch", "SpreadLaunch"]


@dataclass(frozen=True, slots=True)
class Launch:
    """What the steps of one launch share."""

    id: str
    customer_id: int
    log: LaunchLog
    started: float
    """``time.monotonic()`` at the launch's start (balances are timed from it)."""
    today: date
    """The day the launch reads movements up to (the incremental window's end)."""
    otp: Mapping[int, str]
    """One-time codes by access id."""
    begun: set[int] = field(default_factory=set)
    """Ids of the claimed accesses whose scraper task began: each stores its own end. One whose
    task was cancelled before it began never runs a line of it, so the launch ends it."""
    lost: list[BaseException] = field(default_factory=list)
    """The launch's writes that failed (a batch, an access's end, the customer's): what is
    stored is then not what the banks said, and the launch must run again."""

    def check_stored(self, what: str) -> None:
        """Raise :class:`ResultsNotStored` if a write of the launch failed."""
        if self.lost:
            raise ResultsNotStored(
                f"{what} could not store all it read ({len(self.lost)} writes failed)"
            ) from self.lost[0]

    @classmethod
    def open(
        cls,
        log_dir: Path | None,
        customer_id: int,
        external_id: str,
        launch_id: str | None = None,
        **rest: Any,
    ) -> Launch:
        launch_id = launch_id or secrets.token_hex(4)
        log = LaunchLog(log_dir, external_id=external_id, launch_id=launch_id)
        return cls(launch_id, customer_id, log, **rest)

    def event(
        self, kind: EventKind, job: ClaimedAccess | None = None, **fields: Any
    ) -> LaunchEvent:
        if job is None:
            return LaunchEvent(kind, self.id, self.customer_id, **fields)
        return LaunchEvent(kind, self.id, self.customer_id, job.access_id, job.bank, **fields)


@dataclass(slots=True)
class SpreadLaunch:
    """A launch whose accesses are scraped by parts, on any worker
    (:meth:`Launcher.spread_launch`)."""

    id: str
    customer_id: int
    external_id: str
    accesses: tuple[int, ...]
    """The customer's accesses, by id, when the launch started."""
    day: date
    """The launch's day, the same for every part: each counts its movements' window from it
    (a part run after midnight reads the window its launch began with, as one launch in one
    process does), and no part asks the launcher's clock again."""
    outcome: Outcome | None = None
    """Set by the caller once the parts ended: how the refresh ended."""

    def event(self, kind: EventKind, **fields: Any) -> LaunchEvent:
        return LaunchEvent(kind, self.id, self.customer_id, **fields)
