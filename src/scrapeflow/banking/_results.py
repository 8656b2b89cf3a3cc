"""How a scrape ended (:class:`ResultCode`), how a customer's refresh ended (:class:`Outcome`)
and where a scrape stands (:class:`ScrapeState`)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = ["NEEDS_A_PERSON", "Outcome", "ResultCode", "ScrapeState", "outcome_of"]


class ResultCode(StrEnum):
    """The outcome of one access's scrape, stored on the access; ``message`` explains it."""

    SUCCESS = "success"
    WRONG_CREDENTIALS = "wrong_credentials"
    USER_LOCKED = "user_locked"
    TWO_FACTOR_REQUIRED = "two_factor_required"
    NOT_APPROVED = "not_approved"
    CONSENT_EXPIRED = "consent_expired"
    BANK_UNAVAILABLE = "bank_unavailable"
    BLOCKED = "blocked"
    TIMEOUT = "timeout"
    SITE_CHANGED = "site_changed"
    NOT_STORED = "not_stored"
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
    ResultCode.NOT_APPROVED: (
        "The bank asked the customer to approve the login in its app and no approval came "
        "(rejected, or not in time); refresh again when the customer can approve."
    ),
    ResultCode.CONSENT_EXPIRED: (
        "The customer's consent to read this bank has expired (banks ask for it again every "
        "90 or 180 days); the next refresh asks the customer to approve it again."
    ),
    ResultCode.BANK_UNAVAILABLE: "The bank's site is down or in maintenance; try again later.",
    ResultCode.BLOCKED: "The bank blocked our requests (IP or rate limit); retry through a proxy.",
    ResultCode.TIMEOUT: "The scrape did not finish within its time limit and was stopped.",
    ResultCode.SITE_CHANGED: (
        "The bank's pages changed and could not be parsed; the scraper needs a fix."
    ),
    ResultCode.NOT_STORED: (
        "What the bank showed could not be stored (the service's database failed); the next "
        "refresh reads it again."
    ),
    ResultCode.UNKNOWN: "The scrape failed for an unexpected reason; see the launch log.",
}


NEEDS_A_PERSON = frozenset(
    {
        ResultCode.TWO_FACTOR_REQUIRED,
        ResultCode.NOT_APPROVED,
        ResultCode.CONSENT_EXPIRED,
        ResultCode.WRONG_CREDENTIALS,
        ResultCode.USER_LOCKED,
    }
)
"""The results only the customer can clear: a code to type, an approval to give in the bank's
app, a password to fix, a user to unlock at the bank."""


class Outcome(StrEnum):
    """How a customer's refresh ended, from its accesses' results (see :func:`outcome_of`)."""

    SUCCEEDED = "succeeded"
    """Every access read."""
    PARTIAL = "partial"
    """Some accesses read, some not (the bank down, a site changed…); none waits for a person."""
    NEEDS_ACTION = "needs_action"
    """An access waits for the customer: a one-time code, a password, an unlock at the bank."""
    FAILED = "failed"
    """Nothing read: every access failed, or the refresh could not start."""


def outcome_of(codes: Iterable[ResultCode]) -> Outcome:
    """The outcome of a refresh whose accesses ended with ``codes``. An access waiting for a
    person makes it ``needs_action`` whatever the others did; a refresh of no access read
    nothing it had to, and ``succeeded``.

    >>> outcome_of([ResultCode.SUCCESS, ResultCode.BANK_UNAVAILABLE])
    <Outcome.PARTIAL: 'partial'>
    >>> outcome_of([ResultCode.SUCCESS, ResultCode.TWO_FACTOR_REQUIRED])
    <Outcome.NEEDS_ACTION: 'needs_action'>
    """
    codes = list(codes)
    if any(code in NEEDS_A_PERSON for code in codes):
        return Outcome.NEEDS_ACTION
    read = sum(code.ok for code in codes)
    if read == len(codes):
        return Outcome.SUCCEEDED
    return Outcome.FAILED if read == 0 else Outcome.PARTIAL


class ScrapeState(StrEnum):
    """Where the scrape of an access, or of a customer's accesses, stands."""

    IDLE = "idle"
    IN_PROGRESS = "in_progress"
    ALL_UPDATED = "all_updated"
