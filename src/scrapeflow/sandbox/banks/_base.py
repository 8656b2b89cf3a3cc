"""What the sandbox banks share: settings, server-side sessions, login throttling, ground truth.

Ground-truth admin routes (behind the admin token, see ``scrapeflow.sandbox._site``)::

    GET  /__admin/customers/{n}             the customer's login here: username, password, traits
    GET  /__admin/truth/{username}          accounts, balances and movements at sandbox time now
                                            (?since=YYYY-MM-DD keeps movements operated since then)
    GET  /__admin/settings                  the bank's switches (BankSettings)
    POST /__admin/settings                  {"maintenance_rate": 0.1, "layout": 2, ...}
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any, ClassVar

from aiohttp import web

from scrapeflow.sandbox._guards import ADMIN_PREFIX
from scrapeflow.sandbox._hostility import Hostility
from scrapeflow.sandbox._site import (
    SandboxSite,
    SandboxState,
    SiteSettings,
    admin_json,
    require_admin,
)
from scrapeflow.sandbox._world import Account, Login, Movement

__all__ = [
    "DEFAULT_BANK_LATENCY_MS",
    "BankSettings",
    "BankSite",
    "Session",
    "es_amount",
    "es_date",
    "movement_truth",
]

DEFAULT_BANK_LATENCY_MS = (80.0, 250.0)
_MAX_SESSIONS = 50_000


@dataclass
class BankSettings(SiteSettings):
    """A bank's behaviour switches; the admin API changes them while the bank runs.

    ``maintenance_rate``: share of requests answered by the bank's maintenance page (503).
    ``session_max_requests``: a session expires after this many requests (0: never).
    ``session_idle_seconds``: a session expires after this long without a request.
    ``layout``: 1 is the normal page layout; 2 is a redesign that breaks old parsers.
    ``login_failures_per_ip``: failed logins from one IP before the bank blocks it (0: never).
    ``ip_block_seconds``: how long such a block lasts.
    """

    what: ClassVar[str] = "bank setting"
    maintenance_rate: float = 0.0
    session_max_requests: int = 0
    session_idle_seconds: float = 900.0
    layout: int = 1
    login_failures_per_ip: int = 20
    ip_block_seconds: float = 600.0

    def check(self) -> None:
        if not 0 <= self.maintenance_rate <= 1:
            raise ValueError("maintenance_rate must be between 0 and 1")
        if self.layout not in (1, 2):
            raise ValueError("layout must be 1 or 2")
        if min(self.session_max_requests, self.login_failures_per_ip) < 0:
            raise ValueError("session_max_requests and login_failures_per_ip must be >= 0")


@dataclass
class Session:
    """A server-side session. ``data`` holds whatever the bank's flow keeps there."""

    id: str
    customer: int | None = None
    authenticated: bool = False
    created: float = field(default_factory=time.monotonic)
    last_seen: float = field(default_factory=time.monotonic)
    requests: int = 0
    data: dict[str, Any] = field(default_factory=dict)


class BankSite(SandboxSite):
    """A sandbox bank. Subclasses set ``name`` and add their routes."""

    name = "bank"

    def __init__(
        self,
        state: SandboxState,
        *,
        hostility: Hostility | None = None,
        latency_ms: tuple[float, float] = DEFAULT_BANK_LATENCY_MS,
        settings: BankSettings | None = None,
    ) -> None:
        super().__init__(state, hostility=hostility, latency_ms=latency_ms)
        self.settings = settings or BankSettings()
        self.sessions: dict[str, Session] = {}
        self._failures: dict[str, deque[float]] = {}
        self.prepare()

    def prepare(self) -> None:
        """What a bank of its own kind holds beside its sessions, made once the bank is
        (a subclass's, instead of an ``__init__`` of its own)."""

    # -- the world, seen from this bank -----------------------------------------------------

    def login_of(self, username: str) -> Login | None:
        customer = self.state.world.customer_of(self.name, username)
        return None if customer is None else self.state.world.login(self.name, customer)

    def accounts_of(self, customer: int) -> list[Account]:
        return self.state.world.accounts(self.name, customer)

    def account_of(self, customer: int, account_id: str) -> Account | None:
        """The account, only if it belongs to ``customer`` (no peeking at others' accounts)."""
        account = self.state.world.account(self.name, account_id)
        return account if account is not None and account.customer == customer else None

    def movements_of(self, account: Account) -> list[Movement]:
        return self.state.world.movements(account, self.state.clock.now())

    def balance_of(self, account: Account) -> Decimal:
        return self.state.world.balance(account, self.state.clock.now())

    # -- sessions ---------------------------------------------------------------------------

    def new_session(self) -> Session:
        if len(self.sessions) >= _MAX_SESSIONS:
            self._expire_idle()
        session = Session(id=secrets.token_urlsafe(18))
        self.sessions[session.id] = session
        return session

    def find_session(self, session_id: str | None) -> Session | None:
        """The live session ``session_id``, counting this request; ``None`` if gone or expired."""
        session = self.sessions.get(session_id or "")
        if session is None:
            return None
        now = time.monotonic()
        s = self.settings
        expired = now - session.last_seen > s.session_idle_seconds or (
            s.session_max_requests and session.requests >= s.session_max_requests
        )
        if expired:
            del self.sessions[session.id]
            return None
        session.last_seen = now
        session.requests += 1
        return session

    def end_session(self, session: Session) -> None:
        self.sessions.pop(session.id, None)

    def _expire_idle(self) -> None:
        cutoff = time.monotonic() - self.settings.session_idle_seconds
        for sid in [sid for sid, s in self.sessions.items() if s.last_seen < cutoff]:
            del self.sessions[sid]
        if len(self.sessions) >= _MAX_SESSIONS:
            self.sessions.clear()

    # -- login throttling -------------------------------------------------------------------

    def login_failed(self, request: web.Request) -> None:
        """Count a failed login from the client's IP; too many in 10 minutes block the IP."""
        limit = self.settings.login_failures_per_ip
        if not limit:
            return
        ip = request.remote or "?"
        window = self._failures.setdefault(ip, deque())
        now = time.monotonic()
        window.append(now)
        while window and window[0] < now - 600:
            window.popleft()
        if len(window) >= limit:
            self.guard.ban(ip, self.settings.ip_block_seconds)
            window.clear()

    def in_maintenance(self) -> bool:
        rate = self.settings.maintenance_rate
        return rate > 0 and self.guard._rng.random() < rate

    # -- admin: ground truth and settings ---------------------------------------------------

    def admin_routes(self, admin: web.RouteTableDef) -> None:
        state = self.state

        @admin.get(f"{ADMIN_PREFIX}/customers/{{n:\\d+}}")
        async def customer(request: web.Request) -> web.Response:
            require_admin(request, state)
            try:
                login = state.world.login(self.name, int(request.match_info["n"]))
            except ValueError as exc:
                return admin_json({"error": str(exc)}, status=404)
            return admin_json(dataclasses.asdict(login))

        @admin.get(f"{ADMIN_PREFIX}/truth/{{username}}")
        async def truth(request: web.Request) -> web.Response:
            require_admin(request, state)
            login = self.login_of(request.match_info["username"])
            if login is None:
                return admin_json({"error": "no such user"}, status=404)
            since_text = request.query.get("since")
            try:
                since = date.fromisoformat(since_text) if since_text else None
            except ValueError:
                return admin_json({"error": "since must be YYYY-MM-DD"}, status=400)
            return admin_json(self.truth(login, since))

        @admin.get(f"{ADMIN_PREFIX}/settings")
        async def get_settings(request: web.Request) -> web.Response:
            require_admin(request, state)
            return admin_json(dataclasses.asdict(self.settings))

        @admin.post(f"{ADMIN_PREFIX}/settings")
        async def set_settings(request: web.Request) -> web.Response:
            require_admin(request, state)
            try:
                body = await request.json()
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                self.settings.update(body)
            except ValueError as exc:
                return admin_json({"error": str(exc)}, status=400)
            return admin_json(dataclasses.asdict(self.settings))

    def truth(self, login: Login, since: date | None = None) -> dict[str, Any]:
        """Exactly what ``login`` has at this bank at the current sandbox time."""
        now = self.state.clock.now()
        accounts = self.accounts_of(login.customer)
        return {
            "bank": self.name,
            "customer": login.customer,
            "username": login.username,
            "at": now.isoformat(),
            "accounts": [
                {
                    "id": a.id,
                    "contract": a.contract.id,
                    "contract_name": a.contract.name,
                    "iban": a.iban,
                    "number": a.number,
                    "currency": a.currency,
                    "kind": a.kind.value,
                    "alias": a.alias,
                    "balance": str(self.balance_of(a)),
                }
                for a in accounts
            ],
            "movements": {
                a.id: [
                    movement_truth(m)
                    for m in self.movements_of(a)
                    if since is None or m.operation_date >= since
                ]
                for a in accounts
            },
        }


def movement_truth(m: Movement) -> dict[str, Any]:
    return {
        "ref": m.ref,
        "operation_date": m.operation_date.isoformat(),
        "value_date": m.value_date.isoformat(),
        "amount": str(m.amount),
        "description": m.description,
        "pending": m.pending,
        "balance_after": None if m.balance_after is None else str(m.balance_after),
    }


def es_amount(value: Decimal) -> str:
    """Spanish format: ``-1.234,56``."""
    sign = "-" if value < 0 else ""
    whole, _, cents = f"{abs(value):.2f}".partition(".")
    groups: list[str] = []
    while whole:
        groups.insert(0, whole[-3:])
        whole = whole[:-3]
    return f"{sign}{'.'.join(groups)},{cents}"


def es_date(value: date) -> str:
    """Spanish format: ``dd/mm/yyyy``."""
    return value.strftime("%d/%m/%Y")
