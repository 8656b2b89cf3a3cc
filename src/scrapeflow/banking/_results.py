"""How a scrape ended (:class:`ResultCode`) and where a scrape stands (:class:`ScrapeState`)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ResultCode", "ScrapeState"]


class ResultCode(StrEnum):
    """The outcome of one access's scrape, stored on the access; ``message`` explains it."""

    SUCCESS = "success"
    WRONG_CREDENTIALS = "wrong_credentials"
    USER_LOCKED = "user_locked"
    TWO_FACTOR_REQUIRED = "two_factor_required"
    BANK_UNAVAILABLE = "bank_unavailable"
    BLOCKED = "blocked"
    TIMEOUT = "timeout"
    SITE_CHANGED = "site_changed"
    UNKNOWN = "unknown"

    @property
    def message(self) -> str:
        """A sentence for the customer or the operator saying what happened and what to do."""
        return _MESSAGES[self]

    @property
    def ok(self) -> bool:
        """Whether the access's data is up to date."""
        return self is ResultCode.SUCCESS


_MESSAGES = {
    ResultCode.SUCCESS: "Accounts and movements were updated.",
    ResultCode.WRONG_CREDENTIALS: "The bank refused the user name or password; update the access.",
    ResultCode.USER_LOCKED: "The bank locked this user; the customer must unlock it at the bank.",
    ResultCode.TWO_FACTOR_REQUIRED: (
        "The bank asks for a one-time code; supply it to resume the scrape."
    ),
    ResultCode.BANK_UNAVAILABLE: "The bank's site is down or in maintenance; try again later.",
    ResultCode.BLOCKED: "The bank blocked our requests (IP or rate limit); retry through a proxy.",
    ResultCode.TIMEOUT: "The scrape did not finish within its time limit and was stopped.",
    ResultCode.SITE_CHANGED: (
        "The bank's pages changed and could not be parsed; the scraper needs a fix."
    ),
    ResultCode.UNKNOWN: "The scrape failed for an unexpected reason; see the launch log.",
}


class ScrapeState(StrEnum):
    """Where the scrape of an access, or of a customer's accesses, stands."""

    IDLE = "idle"
    IN_PROGRESS = "in_progress"
    ALL_UPDATED = "all_updated"
