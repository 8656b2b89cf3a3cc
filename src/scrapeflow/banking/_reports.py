"""What a launch is allowed (:class:`LaunchLimits`) and what it reports (:class:`LaunchReport`,
one :class:`AccessReport` per access)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scrapeflow.banking._results import Outcome, ResultCode, outcome_of

__all__ = ["AccessReport", "LaunchLimits", "LaunchReport"]


@dataclass(frozen=True, slots=True)
class LaunchLimits:
    """How much runs at once, and for how long."""

    per_bank: int = 50
    """Accesses scraped at once at one bank (all customers together)."""
    overall: int = 200
    """Accesses scraped at once in all."""
    access_timeout: float = 300.0
    """Seconds one access's scrape may take before it ends with the timeout code."""
    heartbeat: float = 30.0
    """Seconds between two heartbeats of the accesses a launcher holds."""

    def __post_init__(self) -> None:
        if min(self.per_bank, self.overall) < 1 or min(self.access_timeout, self.heartbeat) <= 0:
            raise ValueError("launch limits must be positive")


@dataclass(slots=True)
class AccessReport:
    """How one access's scrape ended."""

    access_id: int
    bank: str
    code: ResultCode
    detail: str = ""
    accounts: int = 0
    """Accounts read."""
    movements: int = 0
    """Movements read."""
    accounts_stored: int = 0
    """Accounts the database holds for what was read (fewer: ``site_changed``)."""
    movements_stored: int = 0
    """Movements the database holds for what was read."""
    seconds: float = 0.0
    balances_seconds: float | None = None
    """From the launch's start to the last accounts batch (balances) landing."""

    @property
    def message(self) -> str:
        return self.code.message


@dataclass(slots=True)
class LaunchReport:
    """What one refresh did."""

    launch_id: str
    customer_id: int
    external_id: str
    accesses: list[AccessReport] = field(default_factory=list)
    seconds: float = 0.0
    log_file: Path | None = None
    refused: str | None = None
    """Why the customer was not refreshed at all (already being refreshed), else None."""

    @property
    def ok(self) -> bool:
        return self.refused is None and all(a.code.ok for a in self.accesses)

    @property
    def outcome(self) -> Outcome | None:
        """How the refresh ended, from its accesses' results; None when it was refused (the
        refresh that holds the customer tells its own)."""
        if self.refused is not None:
            return None
        return outcome_of(a.code for a in self.accesses)

    @property
    def balances_seconds(self) -> float | None:
        """When the last balance of the customer landed (None: no access got that far)."""
        times = [a.balances_seconds for a in self.accesses if a.balances_seconds is not None]
        return max(times) if times else None
