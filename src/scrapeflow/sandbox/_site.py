"""What every sandbox site shares: the sandbox state, the guard, and the admin API.

The admin API lives under ``/__admin`` on every site, behind the sandbox's admin token (header
``Authorization: Bearer <token>``). It is never guarded, slowed or rate-limited::

    GET  /__admin/health                  {"site": name}
    GET  /__admin/clock                   {"now": iso}
    POST /__admin/clock                   {"days": d, "hours": h, "minutes": m, "seconds": s}
    GET  /__admin/hostility               the site's switches
    POST /__admin/hostility               {"profile": "hostile", "<switch>": value, ...}
    POST /__admin/block                   {"ip": "127.0.0.3", "seconds": 60}: ban an IP now
    DELETE /__admin/block                 lift every ban and rate-limit state
    GET  /__admin/stats                   what the guard did: requests, bans, captchas, ...

Sites add their own admin routes (the banks' ground truth, the feed's profiles).
"""

from __future__ import annotations

import dataclasses
import hmac
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from aiohttp import web

from scrapeflow.sandbox._clock import SandboxClock
from scrapeflow.sandbox._guards import ADMIN_PREFIX, Guard
from scrapeflow.sandbox._hostility import Hostility
from scrapeflow.sandbox._tokens import TokenSigner
from scrapeflow.sandbox._world import MAX_CUSTOMERS, World

__all__ = ["SandboxSite", "SandboxState", "SiteSettings", "admin_json", "require_admin"]


@dataclass
class SandboxState:
    """What the sites of one sandbox share: seed, clock, world, admin token, token signer."""

    seed: int
    admin_token: str
    clock: SandboxClock = field(default_factory=SandboxClock)
    customers: int = 10_000
    world: World = field(init=False)
    signer: TokenSigner = field(init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.customers <= MAX_CUSTOMERS:
            raise ValueError(f"customers must be between 1 and {MAX_CUSTOMERS:,}")
        self.world = World(self.seed, customers=self.customers, epoch=self.clock.now())
        self.signer = TokenSigner(f"sandbox-{self.seed}-{self.admin_token}".encode())


@dataclass
class SiteSettings:
    """Numbers an admin API changes while a site runs (a dataclass of them, subclassed):
    :meth:`update` applies changes all at once or none, each converted to its field's type
    and the whole judged by :meth:`check`."""

    what: ClassVar[str] = "setting"
    """What one of them is called in errors (``bank setting``)."""

    def update(self, changes: dict[str, Any]) -> None:
        """Apply ``changes`` all at once, or none of them (ValueError naming the culprit)."""
        names = sorted(f.name for f in dataclasses.fields(self))
        typed: dict[str, Any] = {}
        for name, value in changes.items():
            if name not in names:
                raise ValueError(f"unknown {self.what} {name!r} (settings: {', '.join(names)})")
            try:
                if isinstance(value, bool):
                    raise TypeError(value)
                typed[name] = type(getattr(self, name))(value)
            except (TypeError, ValueError):
                raise ValueError(f"{self.what} {name} must be a number, got {value!r}") from None
        dataclasses.replace(self, **typed).check()
        for name, value in typed.items():
            setattr(self, name, value)

    def check(self) -> None:
        """ValueError when these values do not hold together."""


def require_admin(request: web.Request, state: SandboxState) -> None:
    """Refuse (401) an admin request without the sandbox's admin token."""
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not given or not hmac.compare_digest(given, state.admin_token):
        raise web.HTTPUnauthorized(
            text='{"error": "admin token required"}', content_type="application/json"
        )


def admin_json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def _dumps(data: Any) -> str:
    import json

    return json.dumps(data, default=str)


class SandboxSite:
    """A sandbox site: its own app, guard and admin routes. Subclasses add ``routes``."""

    name = "site"
    empty_ban_pages = False
    """Whether the site can serve a banned IP silent empty pages; if not, it gets 403s."""

    def __init__(
        self,
        state: SandboxState,
        *,
        hostility: Hostility | None = None,
        latency_ms: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.state = state
        self.guard = Guard(hostility or Hostility(), latency_ms=latency_ms, seed=state.seed)
        self.guard.is_json = self.is_json
        self.guard.empty_ban_pages = self.empty_ban_pages

    def is_json(self, request: web.Request) -> bool:
        """Whether ``request`` expects JSON (CAPTCHA and errors are then served as JSON)."""
        return False

    def routes(self, app: web.Application) -> None:
        """Add the site's own routes."""

    def admin_routes(self, admin: web.RouteTableDef) -> None:
        """Add the site's own admin routes (under /__admin)."""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard.middleware()])
        admin = web.RouteTableDef()
        self._common_admin_routes(admin)
        self.admin_routes(admin)
        app.add_routes(admin)
        self.routes(app)
        return app

    def _common_admin_routes(self, admin: web.RouteTableDef) -> None:
        state = self.state
        guard = self.guard

        @admin.get(f"{ADMIN_PREFIX}/health")
        async def health(request: web.Request) -> web.Response:
            require_admin(request, state)
            return admin_json({"site": self.name})

        @admin.get(f"{ADMIN_PREFIX}/clock")
        async def get_clock(request: web.Request) -> web.Response:
            require_admin(request, state)
            return admin_json({"now": state.clock.now().isoformat()})

        @admin.post(f"{ADMIN_PREFIX}/clock")
        async def advance_clock(request: web.Request) -> web.Response:
            require_admin(request, state)
            body = await _json_body(request)
            try:
                delta = timedelta(**{k: float(v) for k, v in body.items() if k in _DELTA_KEYS})
                unknown = set(body) - _DELTA_KEYS
                if unknown:
                    raise ValueError(f"unknown keys {sorted(unknown)}")
                now = state.clock.advance(delta)
            except (TypeError, ValueError) as exc:
                return admin_json({"error": str(exc)}, status=400)
            return admin_json({"now": now.isoformat()})

        @admin.get(f"{ADMIN_PREFIX}/hostility")
        async def get_hostility(request: web.Request) -> web.Response:
            require_admin(request, state)
            return admin_json(guard.hostility.as_dict())

        @admin.post(f"{ADMIN_PREFIX}/hostility")
        async def set_hostility(request: web.Request) -> web.Response:
            require_admin(request, state)
            body = await _json_body(request)
            try:
                base = guard.hostility
                if "profile" in body:
                    base = Hostility.profile(str(body.pop("profile")))
                guard.hostility = base.with_switches(body)
            except ValueError as exc:
                return admin_json({"error": str(exc)}, status=400)
            return admin_json(guard.hostility.as_dict())

        @admin.post(f"{ADMIN_PREFIX}/block")
        async def block(request: web.Request) -> web.Response:
            require_admin(request, state)
            body = await _json_body(request)
            ip = body.get("ip")
            if not isinstance(ip, str) or not ip:
                return admin_json({"error": "give the 'ip' to block"}, status=400)
            try:
                seconds = float(body.get("seconds", 3600))
            except (TypeError, ValueError):
                return admin_json({"error": "'seconds' must be a number"}, status=400)
            guard.ban(ip, seconds)
            return admin_json({"blocked": ip})

        @admin.delete(f"{ADMIN_PREFIX}/block")
        async def unblock(request: web.Request) -> web.Response:
            require_admin(request, state)
            guard.unban_all()
            return admin_json({"blocked": []})

        @admin.get(f"{ADMIN_PREFIX}/stats")
        async def stats(request: web.Request) -> web.Response:
            require_admin(request, state)
            return admin_json(dict(guard.stats))


_DELTA_KEYS = {"days", "hours", "minutes", "seconds"}


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(
            text='{"error": "the body must be a JSON object"}', content_type="application/json"
        ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text='{"error": "the body must be a JSON object"}', content_type="application/json"
        )
    return body
