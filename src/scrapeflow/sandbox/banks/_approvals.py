"""Decoupled approvals: the push notification a bank sends to its customer's phone.

The bank starts one when a login needs the customer's say; the scraper polls it until the
customer approves or rejects it, or it expires. In the sandbox the customer is simulated: by
default an approval is granted ``approve_after_seconds`` after it was sent (a person tapping
"Approve"); with that set below zero nobody answers until the admin API decides::

    GET  /__admin/approvals              the approvals waiting: {"approvals": [{"id", "username",
                                         "age_seconds", "expires_in"}]}
    POST /__admin/approvals/{username}   {"decision": "approve" | "reject"}: decide the user's
                                         latest waiting approval; 404 when none waits
    GET  /__admin/approval               {"approve_after_seconds", "ttl_seconds",
                                         "poll_interval_seconds"}
    POST /__admin/approval               change some of them (all or none; 400 names the culprit)

Times are real seconds (as sessions and tokens are), not sandbox time.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from aiohttp import web

from scrapeflow.sandbox._guards import ADMIN_PREFIX
from scrapeflow.sandbox._site import SandboxState, SiteSettings, admin_json, require_admin

__all__ = ["Approval", "ApprovalSettings", "ApprovalStatus", "Approvals"]

_MAX_WAITING = 50_000


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


@dataclass
class ApprovalSettings(SiteSettings):
    """``approve_after_seconds``: the simulated customer approves this long after the push
    (below zero: never by itself, only through the admin API). ``ttl_seconds``: an approval
    nobody answered expires. ``poll_interval_seconds``: how often a client may ask; asking
    sooner is answered ``slow_down``."""

    what: ClassVar[str] = "approval setting"
    approve_after_seconds: float = 1.0
    ttl_seconds: float = 120.0
    poll_interval_seconds: float = 1.0

    def check(self) -> None:
        if self.ttl_seconds <= 0 or self.poll_interval_seconds <= 0:
            raise ValueError("ttl_seconds and poll_interval_seconds must be above 0")


@dataclass
class Approval:
    """One push sent to ``customer``'s phone."""

    id: str
    customer: int
    username: str
    created: float = field(default_factory=time.monotonic)
    decision: ApprovalStatus | None = None
    last_poll: float = 0.0


class Approvals:
    """The approvals a bank has sent, and the simulated customers who answer them."""

    def __init__(self, state: SandboxState, bank: str) -> None:
        self.state = state
        self.bank = bank
        self.settings = ApprovalSettings()
        self._sent: dict[str, Approval] = {}

    def send(self, customer: int, username: str) -> Approval:
        if len(self._sent) >= _MAX_WAITING:
            self._forget_old()
        approval = Approval(id=secrets.token_urlsafe(12), customer=customer, username=username)
        self._sent[approval.id] = approval
        return approval

    def get(self, approval_id: str) -> Approval | None:
        return self._sent.get(approval_id)

    def status(self, approval: Approval) -> ApprovalStatus:
        if approval.decision is not None:
            return approval.decision
        age = time.monotonic() - approval.created
        s = self.settings
        if 0 <= s.approve_after_seconds <= age and s.approve_after_seconds < s.ttl_seconds:
            return ApprovalStatus.APPROVED
        if age >= s.ttl_seconds:
            return ApprovalStatus.EXPIRED
        return ApprovalStatus.PENDING

    def expires_in(self, approval: Approval) -> float:
        return max(0.0, self.settings.ttl_seconds - (time.monotonic() - approval.created))

    def polled_too_soon(self, approval: Approval) -> bool:
        """Whether this poll came sooner than half the interval after the previous one (the
        poll is counted either way)."""
        now = time.monotonic()
        too_soon = now - approval.last_poll < self.settings.poll_interval_seconds / 2
        approval.last_poll = now
        return too_soon

    def waiting(self) -> list[Approval]:
        return [a for a in self._sent.values() if self.status(a) is ApprovalStatus.PENDING]

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - self.settings.ttl_seconds * 2
        for key in [k for k, a in self._sent.items() if a.created < cutoff]:
            del self._sent[key]
        if len(self._sent) >= _MAX_WAITING:
            self._sent.clear()

    def admin_routes(self, admin: web.RouteTableDef) -> None:
        state = self.state

        @admin.get(f"{ADMIN_PREFIX}/approvals")
        async def waiting(request: web.Request) -> web.Response:
            require_admin(request, state)
            now = time.monotonic()
            waiting = [
                {
                    "id": a.id,
                    "username": a.username,
                    "age_seconds": round(now - a.created, 3),
                    "expires_in": round(self.expires_in(a), 3),
                }
                for a in self.waiting()
            ]
            return admin_json({"approvals": waiting})

        @admin.post(f"{ADMIN_PREFIX}/approvals/{{username}}")
        async def decide(request: web.Request) -> web.Response:
            require_admin(request, state)
            body = await _object(request)
            decision = {"approve": ApprovalStatus.APPROVED, "reject": ApprovalStatus.REJECTED}
            wanted = decision.get(str(body.get("decision")))
            if wanted is None:
                return admin_json({"error": "decision must be 'approve' or 'reject'"}, 400)
            username = request.match_info["username"]
            mine = [a for a in self.waiting() if a.username == username]
            if not mine:
                return admin_json({"error": f"no approval waits for {username}"}, 404)
            latest = max(mine, key=lambda a: a.created)
            latest.decision = wanted
            return admin_json({"id": latest.id, "status": wanted.value})

        @admin.get(f"{ADMIN_PREFIX}/approval")
        async def get_settings(request: web.Request) -> web.Response:
            require_admin(request, state)
            return admin_json(dataclasses.asdict(self.settings))

        @admin.post(f"{ADMIN_PREFIX}/approval")
        async def set_settings(request: web.Request) -> web.Response:
            require_admin(request, state)
            try:
                self.settings.update(await _object(request))
            except ValueError as exc:
                return admin_json({"error": str(exc)}, 400)
            return admin_json(dataclasses.asdict(self.settings))


async def _object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text='{"error": "the body must be a JSON object"}', content_type="application/json"
        )
    return body
