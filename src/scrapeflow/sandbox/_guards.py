"""The defences every sandbox site puts in front of its pages, driven by :class:`Hostility`.

In order, per request (admin routes, under ``/__admin``, are never guarded):

1. a banned client IP gets a 403 page, or (``ban_mode="empty"``, on sites that can) is served
   normally but the site renders no content: ``request[EMPTY_KEY]`` is set for the handlers;
2. with ``check_headers``, a bot user agent or a browser user agent with headers that browser
   never sends is refused with 403 (the reason is in an ``X-Sandbox-Block`` header);
3. the per-IP token bucket answers 429 with ``Retry-After``; requests sent before that time are
   counted, and ``ban_after`` of them ban the IP for ``ban_seconds``;
4. chaos: a dropped connection, a 5xx, a slow answer, or a CAPTCHA page served with 200;
5. the site's latency.

Refusals are HTML pages, or ``{"status": "fail", "message": ...}`` on the site's JSON routes.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import CIMultiDict

from scrapeflow.sandbox._hostility import Hostility

__all__ = [
    "ADMIN_PREFIX",
    "CAPTCHA_MARKER",
    "EMPTY_KEY",
    "Guard",
    "LatencyRange",
    "header_problem",
]

ADMIN_PREFIX = "/__admin"
EMPTY_KEY = web.RequestKey("sandbox.empty", bool)
CAPTCHA_MARKER = "Please verify you are a human"

LatencyRange = tuple[float, float]

_BOT_AGENTS = re.compile(
    r"python|aiohttp|curl|wget|scrapy|httpx|requests|go-http|java/|okhttp|libwww|node-fetch|"
    r"axios|headless|phantomjs|bot\b|spider|crawler",
    re.IGNORECASE,
)
_CHROMIUM = re.compile(r"(?:Chrome|CriOS|Edg)/(\d+)")
_FIREFOX = re.compile(r"Firefox/(\d+)")
_MAX_TRACKED_IPS = 100_000


def header_problem(headers: Mapping[str, str] | web.Request) -> str | None:
    """Why a request's headers do not look like a real browser's, or ``None`` if they do.

    Header names are matched without regard to case, as HTTP wants.
    """
    get = (headers.headers if isinstance(headers, web.Request) else CIMultiDict(headers)).get
    agent = get("User-Agent", "")
    if not agent:
        return "no-user-agent"
    if _BOT_AGENTS.search(agent):
        return "bot-user-agent"
    if "Mozilla/5.0" not in agent:
        return "not-a-browser"
    if not get("Accept") or not get("Accept-Language"):
        return "missing-accept-headers"
    hints = get("sec-ch-ua")
    chromium = _CHROMIUM.search(agent)
    if chromium and "Firefox" not in agent:
        if not hints or f'v="{chromium.group(1)}"' not in hints:
            return "client-hints-mismatch"
        if get("sec-ch-ua-mobile") is None or get("sec-ch-ua-platform") is None:
            return "client-hints-incomplete"
    elif hints:
        # Firefox and Safari do not send client hints; a client that does is lying.
        return "client-hints-from-non-chromium"
    elif not _FIREFOX.search(agent) and "Safari/" not in agent:
        return "unknown-browser"
    return None


@dataclass(slots=True)
class _ClientIP:
    tokens: float
    refilled_at: float
    retry_at: float = 0.0
    violations: int = 0
    banned_until: float = 0.0


@dataclass
class Guard:
    """Per-site defences. Change ``hostility`` at any time (the admin API does)."""

    hostility: Hostility
    latency_ms: LatencyRange = (0.0, 0.0)
    seed: int = 0
    clients: dict[str, _ClientIP] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    is_json: Callable[[web.Request], bool] = lambda request: False
    empty_ban_pages: bool = False

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed ^ 0x6A4D)

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    def ban(self, ip: str, seconds: float) -> None:
        """Ban ``ip`` now for ``seconds`` (the admin API's ``block``)."""
        client = self._client(ip, time.monotonic())
        client.banned_until = time.monotonic() + seconds

    def unban_all(self) -> None:
        self.clients.clear()

    def is_banned(self, ip: str) -> bool:
        client = self.clients.get(ip)
        return client is not None and client.banned_until > time.monotonic()

    def middleware(self) -> Middleware:
        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path.startswith(ADMIN_PREFIX):
                return await handler(request)
            refusal = await self._check(request)
            if refusal is not None:
                return refusal
            low, high = self.latency_ms
            if high > 0:
                await asyncio.sleep(self._rng.uniform(low, high) / 1000)
            return await handler(request)

        return guard

    async def _check(self, request: web.Request) -> web.StreamResponse | None:
        h = self.hostility
        ip = request.remote or "?"
        now = time.monotonic()
        self.count("requests")
        client = self._client(ip, now)
        if client.banned_until > now:
            self.count("banned")
            if h.ban_mode == "empty" and self.empty_ban_pages:
                request[EMPTY_KEY] = True
            else:
                return self._refuse(
                    request, 403, "Access denied", "Your IP address has been blocked."
                )
        if h.check_headers and (problem := header_problem(request)) is not None:
            self.count("header_blocks")
            response = self._refuse(request, 403, "Access denied", "Request blocked.")
            response.headers["X-Sandbox-Block"] = problem
            return response
        if h.rate_limit_rps > 0 and (wait := self._take_token(client, now)) is not None:
            response = self._refuse(request, 429, "Too many requests", "Slow down.")
            response.headers["Retry-After"] = str(max(1, math.ceil(wait)))
            return response
        return await self._chaos(request)

    def _refuse(self, request: web.Request, status: int, title: str, text: str) -> web.Response:
        """A refusal in the request's format: JSON on JSON routes, an HTML page elsewhere."""
        if self.is_json(request):
            return web.json_response({"status": "fail", "message": text}, status=status)
        return _page(status, title, text)

    def _client(self, ip: str, now: float) -> _ClientIP:
        client = self.clients.get(ip)
        if client is None:
            if len(self.clients) >= _MAX_TRACKED_IPS:
                self.clients.clear()
            # A full bucket (capped at the burst when first used), even if limits come later.
            client = _ClientIP(tokens=float("inf"), refilled_at=now)
            self.clients[ip] = client
        return client

    def _take_token(self, client: _ClientIP, now: float) -> float | None:
        """``None`` if the request may go on; else the seconds to wait (and maybe a ban)."""
        h = self.hostility
        burst = max(1.0, float(h.rate_limit_burst))
        client.tokens = min(burst, client.tokens + (now - client.refilled_at) * h.rate_limit_rps)
        client.refilled_at = now
        if client.tokens >= 1.0:
            client.tokens -= 1.0
            if now >= client.retry_at:
                client.violations = 0
            return None
        self.count("rate_limited")
        if now < client.retry_at:
            client.violations += 1
            if h.ban_after and client.violations >= h.ban_after:
                client.banned_until = now + h.ban_seconds
                client.violations = 0
                self.count("bans")
        wait = (1.0 - client.tokens) / h.rate_limit_rps
        client.retry_at = max(client.retry_at, now + wait)
        return max(wait, client.retry_at - now)

    async def _chaos(self, request: web.Request) -> web.StreamResponse | None:
        h = self.hostility
        draw = self._rng.random()
        if draw < h.drop_rate:
            self.count("dropped")
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPInternalServerError  # never written: the connection is gone
        draw -= h.drop_rate
        if draw < h.error_rate:
            self.count("errors")
            status = self._rng.choice((500, 502, 503))
            return self._refuse(request, status, "Server error", "Something went wrong.")
        draw -= h.error_rate
        if draw < h.slow_rate:
            self.count("slow")
            await asyncio.sleep(h.slow_seconds)
            return None
        draw -= h.slow_rate
        if draw < h.captcha_rate:
            self.count("captchas")
            return self._captcha(request)
        return None

    def _captcha(self, request: web.Request) -> web.Response:
        if self.is_json(request):
            return web.json_response(
                {
                    "status": "fail",
                    "message": "checkpoint_required",
                    "checkpoint_url": "/challenge/",
                }
            )
        return _page(
            200,
            "Security check",
            f'<div id="captcha"><h2>{CAPTCHA_MARKER}</h2>'
            '<form action="/challenge/" method="post"><input name="answer"></form></div>',
        )


def _page(status: int, title: str, body: str) -> web.Response:
    return web.Response(
        status=status,
        text=f"<!doctype html><html><head><title>{title}</title></head>"
        f"<body><h1>{title}</h1>{body}</body></html>",
        content_type="text/html",
    )
