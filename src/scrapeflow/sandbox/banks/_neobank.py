"""The neobank: a bank of today's kind. OAuth with PKCE and a consent screen, a push approval on
the customer's phone, consent that expires after 90 days, cards whose authorisations post later
with another amount or are released, and a JSON API with ETags.

Authorisation (``client_id`` is any non-empty name; ``redirect_uri`` any ``https`` URL, which
the bank only redirects to, never calls)::

    GET  /oauth/authorize    ?response_type=code&client_id=&redirect_uri=&state=
                             &code_challenge=&code_challenge_method=S256[&scope=]
                             -> 302 /auth/login?flow=<flow>  (400 JSON invalid_request)
    GET  /auth/login         ?flow=: the login form (username, password, hidden flow)
    POST /auth/login         right: 303 /auth/approve?flow=<flow>, a push is sent to the phone;
                             wrong: the form again (200) with <p class="error">; a locked user
                             is told so the same way
    GET  /auth/approve       ?flow=: "Approve in the app" page; <div id="approval"> carries
                             data-poll (the status URL), data-interval and data-expires-in
    GET  /auth/approve/status ?flow=: {"status": "pending" | "approved" | "rejected" | "expired",
                             "interval": s, "expires_in": s, "next": consent URL once approved};
                             asked again sooner than half the interval: 400
                             {"error": "slow_down", "interval": s}
    GET  /auth/consent       ?flow=: what the client asks to read, and the accounts; a form
    POST /auth/consent       flow, decision=allow|deny -> 302 <redirect_uri>?code=&state= (or
                             ?error=access_denied&state=)
    POST /oauth/token        grant_type=authorization_code: code, code_verifier, redirect_uri,
                             client_id -> {"access_token", "token_type": "Bearer",
                             "expires_in": 300, "refresh_token", "consent_expires_at"};
                             grant_type=refresh_token: refresh_token -> the same, the consent's
                             expiry unchanged. Refusals: 400 {"error": "invalid_grant",
                             "error_description": ...} ("consent expired" once it has)

A code is good once, for 60 seconds, with the verifier whose S256 hash was the challenge.
Consent lasts ``NeoBank.consent_days`` (90) days of **sandbox** time from when it was given:
after that every API call answers 403 ``{"error": "consent_expired"}`` and the refresh token
``invalid_grant`` "consent expired"; the customer must authorise again (with a push).

API (``Authorization: Bearer``; amounts ``{"value": "-12.34", "currency": "EUR"}``)::

    GET /v1/me                                  {"customerId", "consentExpiresAt"}
    GET /v1/accounts                            {"accounts": [{"id", "iban", "name", "currency",
                                                "product": "current" | "savings", "balance"}]}
    GET /v1/cards                               {"cards": [{"id", "maskedPan", "name",
                                                "currency", "balance"}]}
    GET /v1/accounts/{id}/transactions          ?from=YYYY-MM-DD (default 90 days back)&page=N
    GET /v1/cards/{id}/transactions             -> {"transactions": [...], "page", "pages"}

Transactions come newest first, 50 a page: ``{"id", "date", "valueDate", "amount",
"description", "status": "pending" | "booked", "runningBalance": "..." | null}``. A card's
pending authorisation keeps its ``id`` when it posts, with its final amount (a tip, a conversion:
one in five posts for 1-15% more) and description; a released one (one in five) disappears.
Every 200 of the API carries an ``ETag``; a request whose ``If-None-Match`` names it gets 304
with no body. No or a bad token: 401 ``{"error": "invalid_token"}``, expired:
``token_expired``. Another customer's account or card: 404 ``{"error": "not_found"}``.

``BankSettings.maintenance_rate`` applies (503); ``layout`` has no effect here. The admin API adds
the approvals (:mod:`scrapeflow.sandbox.banks._approvals`) to the ground truth of every bank.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import math
import secrets
import time
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from scrapeflow.sandbox._guards import ADMIN_PREFIX
from scrapeflow.sandbox._hostility import Hostility
from scrapeflow.sandbox._site import SandboxState
from scrapeflow.sandbox._tokens import TokenError, TokenExpired
from scrapeflow.sandbox._world import Account, AccountKind, Movement
from scrapeflow.sandbox.banks._approvals import Approvals, ApprovalStatus
from scrapeflow.sandbox.banks._base import DEFAULT_BANK_LATENCY_MS, BankSettings, BankSite

__all__ = ["NeoBank"]

_FLOW = "neobank-flow"
_CODE = "neobank-code"
_ACCESS = "neobank-access"
_REFRESH = "neobank-refresh"
_FLOW_TTL = 900.0
_CODE_TTL = 60.0
_REFRESH_TTL = 10 * 365 * 86_400.0  # the consent, on the sandbox clock, is what ends it
_PAGE = 50
_DEFAULT_DAYS = 90
_MAX_USED_CODES = 100_000


class _Refused(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status, body)
        self.response = _json(body, status)
        if status == 401:
            self.response.headers["WWW-Authenticate"] = f'Bearer error="{body["error"]}"'


class NeoBank(BankSite):
    """The neobank. See the module docstring for its routes and behaviour."""

    name = "neobank"
    token_ttl_seconds: float = 300.0
    """Real seconds an access token lives."""
    consent_days: int = 90
    """Sandbox days a consent lasts (PSD2 asks for it again after 90 or 180)."""

    def __init__(
        self,
        state: SandboxState,
        *,
        hostility: Hostility | None = None,
        latency_ms: tuple[float, float] = DEFAULT_BANK_LATENCY_MS,
        settings: BankSettings | None = None,
    ) -> None:
        super().__init__(state, hostility=hostility, latency_ms=latency_ms, settings=settings)
        self.approvals = Approvals(state, self.name)
        self._used_codes: dict[str, float] = {}

    def is_json(self, request: web.Request) -> bool:
        return not request.path.startswith("/auth/")

    def app(self) -> web.Application:
        app = super().app()
        app.middlewares.append(self._gateway())
        return app

    def admin_routes(self, admin: web.RouteTableDef) -> None:
        super().admin_routes(admin)
        self.approvals.admin_routes(admin)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/oauth/authorize", self._authorize)
        app.router.add_get("/auth/login", self._login_form)
        app.router.add_post("/auth/login", self._login)
        app.router.add_get("/auth/approve", self._approve_page)
        app.router.add_get("/auth/approve/status", self._approve_status)
        app.router.add_get("/auth/consent", self._consent_form)
        app.router.add_post("/auth/consent", self._consent)
        app.router.add_post("/oauth/token", self._token)
        app.router.add_get("/v1/me", self._me)
        app.router.add_get("/v1/accounts", self._accounts)
        app.router.add_get("/v1/cards", self._cards)
        app.router.add_get("/v1/{kind:accounts|cards}/{id}/transactions", self._transactions)

    def _gateway(self) -> Middleware:
        @web.middleware
        async def gateway(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path.startswith(ADMIN_PREFIX):
                return await handler(request)
            page = request.path.startswith("/auth/")
            if self.in_maintenance():
                if page:
                    return _page("Maintenance", "<p>We are improving the app.</p>", status=503)
                return _json({"error": "maintenance"}, 503)
            try:
                return await handler(request)
            except _Refused as refusal:
                return refusal.response
            except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
                if page:
                    raise
                return _json({"error": exc.reason.lower().replace(" ", "_")}, exc.status)

        return gateway

    # -- authorisation ------------------------------------------------------------------------

    async def _authorize(self, request: web.Request) -> web.Response:
        q = request.query
        problems = [
            name
            for name in ("client_id", "redirect_uri", "state", "code_challenge")
            if not q.get(name)
        ]
        if q.get("response_type") != "code":
            problems.append("response_type must be code")
        if q.get("code_challenge_method") != "S256":
            problems.append("code_challenge_method must be S256")
        redirect = urlsplit(q.get("redirect_uri", ""))
        if q.get("redirect_uri") and (redirect.scheme != "https" or not redirect.netloc):
            problems.append("redirect_uri must be an https URL")
        if problems:
            raise _Refused(400, {"error": "invalid_request", "error_description": problems[0]})
        flow = {
            "client": q["client_id"],
            "redirect": q["redirect_uri"],
            "state": q["state"],
            "challenge": q["code_challenge"],
            "stage": "login",
        }
        raise web.HTTPFound(f"/auth/login?flow={self._sign_flow(flow)}")

    async def _login_form(self, request: web.Request) -> web.Response:
        flow = self._flow(request.query.get("flow"), "login")
        return _login_page(self._sign_flow(flow), error="")

    async def _login(self, request: web.Request) -> web.Response:
        form = await request.post()
        flow = self._flow(_field(form, "flow"), "login")
        login = self.login_of(_field(form, "username").strip())
        if login is not None and login.locked:
            self.login_failed(request)
            error = "This account is locked. Contact us from the app."
            return _login_page(self._sign_flow(flow), error=error)
        password = _field(form, "password")
        if login is None or not hmac.compare_digest(password.encode(), login.password.encode()):
            self.login_failed(request)
            return _login_page(self._sign_flow(flow), error="Wrong username or password.")
        approval = self.approvals.send(login.customer, login.username)
        flow.update(stage="approve", customer=login.customer, approval=approval.id)
        raise web.HTTPSeeOther(f"/auth/approve?flow={self._sign_flow(flow)}")

    async def _approve_page(self, request: web.Request) -> web.Response:
        token = request.query.get("flow", "")
        self._flow(token, "approve")
        poll = html.escape(f"/auth/approve/status?flow={token}")
        interval = self.approvals.settings.poll_interval_seconds
        expires = self.approvals.settings.ttl_seconds
        body = (
            f'<div id="approval" data-poll="{poll}" data-interval="{interval:g}" '
            f'data-expires-in="{expires:g}"><p>We sent a notification to your phone. Open the '
            "app and approve this login.</p></div>"
        )
        return _page("Approve in the app", body)

    async def _approve_status(self, request: web.Request) -> web.Response:
        token = request.query.get("flow", "")
        flow = self._flow(token, "approve", json_errors=True)
        approval = self.approvals.get(str(flow.get("approval")))
        if approval is None:
            raise _Refused(400, {"error": "invalid_request", "error_description": "unknown flow"})
        interval = self.approvals.settings.poll_interval_seconds
        if self.approvals.polled_too_soon(approval):
            raise _Refused(400, {"error": "slow_down", "interval": interval})
        status = self.approvals.status(approval)
        answer: dict[str, Any] = {
            "status": status.value,
            "interval": interval,
            "expires_in": round(self.approvals.expires_in(approval), 3),
        }
        if status is ApprovalStatus.APPROVED:
            consent = dict(flow, stage="consent")
            answer["next"] = f"/auth/consent?flow={self._sign_flow(consent)}"
        return _json(answer)

    async def _consent_form(self, request: web.Request) -> web.Response:
        flow = self._flow(request.query.get("flow"), "consent")
        accounts = self.accounts_of(int(flow["customer"]))
        items = "".join(f"<li>{html.escape(a.alias)}</li>" for a in accounts)
        client = html.escape(str(flow["client"]))
        body = (
            f"<p><strong>{client}</strong> asks to read, for {self.consent_days} days:</p>"
            "<ul class='scopes'><li>your accounts and balances</li><li>your cards</li>"
            f"<li>your transactions</li></ul><ul class='accounts'>{items}</ul>"
            f'<form method="post" action="/auth/consent">'
            f'<input type="hidden" name="flow" value="{html.escape(self._sign_flow(flow))}">'
            '<button name="decision" value="allow">Allow</button>'
            '<button name="decision" value="deny">Deny</button></form>'
        )
        return _page("Share your data", body)

    async def _consent(self, request: web.Request) -> web.Response:
        form = await request.post()
        flow = self._flow(_field(form, "flow"), "consent")
        decision = _field(form, "decision")
        if decision not in ("allow", "deny"):
            return _page("Share your data", "<p class='error'>Choose Allow or Deny.</p>", 400)
        if decision == "deny":
            query = {"error": "access_denied", "state": flow["state"]}
        else:
            until = self.state.clock.now() + timedelta(days=self.consent_days)
            code = {
                "customer": flow["customer"],
                "client": flow["client"],
                "redirect": flow["redirect"],
                "challenge": flow["challenge"],
                "until": until.isoformat(),
                "nonce": secrets.token_urlsafe(9),
            }
            query = {"code": self.state.signer.sign(_CODE, code, _CODE_TTL), "state": flow["state"]}
        separator = "&" if urlsplit(str(flow["redirect"])).query else "?"
        raise web.HTTPFound(f"{flow['redirect']}{separator}{urlencode(query)}")

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        grant = _field(form, "grant_type")
        if grant == "authorization_code":
            customer, until = self._redeem(form)
        elif grant == "refresh_token":
            try:
                claims = self.state.signer.verify(_REFRESH, _field(form, "refresh_token"))
            except TokenError:
                raise _invalid_grant("invalid refresh token") from None
            customer, until = int(claims["customer"]), datetime.fromisoformat(claims["until"])
        else:
            raise _Refused(400, {"error": "unsupported_grant_type"})
        if self.state.clock.now() >= until:
            raise _invalid_grant("consent expired")
        claims = {"customer": customer, "until": until.isoformat()}
        ttl = self.token_ttl_seconds
        return _json(
            {
                "access_token": self.state.signer.sign(_ACCESS, claims, ttl),
                "token_type": "Bearer",
                "expires_in": max(1, math.ceil(ttl)),
                "refresh_token": self.state.signer.sign(_REFRESH, claims, _REFRESH_TTL),
                "consent_expires_at": until.isoformat(),
            }
        )

    def _redeem(self, form: Any) -> tuple[int, datetime]:
        try:
            code = self.state.signer.verify(_CODE, _field(form, "code"))
        except TokenError:
            raise _invalid_grant("invalid or expired code") from None
        verifier = _field(form, "code_verifier")
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        if not verifier or not hmac.compare_digest(challenge, str(code["challenge"])):
            raise _invalid_grant("code_verifier does not match the code_challenge")
        if _field(form, "redirect_uri") != code["redirect"]:
            raise _invalid_grant("redirect_uri differs from the authorisation's")
        if _field(form, "client_id") != code["client"]:
            raise _invalid_grant("the code was issued to another client")
        now = time.monotonic()
        if str(code["nonce"]) in self._used_codes:
            raise _invalid_grant("code already used")
        if len(self._used_codes) >= _MAX_USED_CODES:
            self._used_codes = {k: t for k, t in self._used_codes.items() if t > now - _CODE_TTL}
        self._used_codes[str(code["nonce"])] = now
        return int(code["customer"]), datetime.fromisoformat(str(code["until"]))

    def _flow(self, token: str | None, stage: str, *, json_errors: bool = False) -> dict[str, Any]:
        try:
            flow = self.state.signer.verify(_FLOW, token or "")
        except TokenError as exc:
            reason = "expired" if isinstance(exc, TokenExpired) else "invalid"
            flow = {"stage": reason}
        if flow.get("stage") != stage:
            if json_errors:
                raise _Refused(400, {"error": "invalid_request", "error_description": "bad flow"})
            text = "<p class='error'>This login has expired. Start again from the app.</p>"
            raise _PageRefusal(_page("Login expired", text, 400))
        return flow

    def _sign_flow(self, flow: dict[str, Any]) -> str:
        return self.state.signer.sign(_FLOW, flow, _FLOW_TTL)

    # -- the API ------------------------------------------------------------------------------

    def _customer(self, request: web.Request) -> int:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refused(401, {"error": "invalid_token"})
        try:
            claims = self.state.signer.verify(_ACCESS, token.strip())
        except TokenError as exc:
            error = "token_expired" if isinstance(exc, TokenExpired) else "invalid_token"
            raise _Refused(401, {"error": error}) from None
        if self.state.clock.now() >= datetime.fromisoformat(str(claims["until"])):
            raise _Refused(403, {"error": "consent_expired"})
        return int(claims["customer"])

    async def _me(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        token = request.headers["Authorization"].partition(" ")[2].strip()
        until = self.state.signer.verify(_ACCESS, token)["until"]
        return _cached(request, {"customerId": f"C{customer:06d}", "consentExpiresAt": until})

    async def _accounts(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        accounts = [a for a in self.accounts_of(customer) if a.kind is not AccountKind.CARD]
        return _cached(request, {"accounts": [self._account(a) for a in accounts]})

    async def _cards(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        cards = [a for a in self.accounts_of(customer) if a.kind is AccountKind.CARD]
        return _cached(request, {"cards": [self._card(a) for a in cards]})

    def _account(self, a: Account) -> dict[str, Any]:
        return {
            "id": a.id,
            "iban": a.iban,
            "name": a.alias,
            "currency": a.currency,
            "product": "current" if a.kind is AccountKind.CHECKING else "savings",
            "balance": _money(self.balance_of(a), a.currency),
        }

    def _card(self, a: Account) -> dict[str, Any]:
        return {
            "id": a.id,
            "maskedPan": a.number,
            "name": a.alias,
            "currency": a.currency,
            "balance": _money(self.balance_of(a), a.currency),
        }

    async def _transactions(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        account = self.account_of(customer, request.match_info["id"])
        is_card = request.match_info["kind"] == "cards"
        if account is None or (account.kind is AccountKind.CARD) != is_card:
            raise _Refused(404, {"error": "not_found"})
        since, page = self._listing_query(request)
        rows = [m for m in reversed(self.movements_of(account)) if m.operation_date >= since]
        pages = max(1, math.ceil(len(rows) / _PAGE))
        if page > pages:
            raise _Refused(400, {"error": "invalid_request", "error_description": "no such page"})
        chunk = rows[(page - 1) * _PAGE : page * _PAGE]
        return _cached(
            request,
            {
                "transactions": [_transaction(m, account.currency) for m in chunk],
                "page": page,
                "pages": pages,
            },
        )

    def _listing_query(self, request: web.Request) -> tuple[date, int]:
        q = request.query
        try:
            since = (
                date.fromisoformat(q["from"])
                if q.get("from")
                else self.state.clock.now().date() - timedelta(days=_DEFAULT_DAYS - 1)
            )
        except ValueError:
            raise _Refused(
                400, {"error": "invalid_request", "error_description": "from must be YYYY-MM-DD"}
            ) from None
        text = q.get("page", "1")
        if not text.isdigit() or int(text) < 1:
            raise _Refused(
                400, {"error": "invalid_request", "error_description": "page must be 1 or more"}
            )
        return since, int(text)


class _PageRefusal(_Refused):
    """A refusal answered with an HTML page (the browser-facing /auth routes)."""

    def __init__(self, response: web.Response) -> None:
        Exception.__init__(self, response.status)
        self.response = response


def _transaction(m: Movement, currency: str) -> dict[str, Any]:
    return {
        "id": m.ref,
        "date": m.operation_date.isoformat(),
        "valueDate": m.value_date.isoformat(),
        "amount": _money(m.amount, currency),
        "description": m.description,
        "status": "pending" if m.pending else "booked",
        "runningBalance": None if m.balance_after is None else f"{m.balance_after:.2f}",
    }


def _money(value: Any, currency: str) -> dict[str, str]:
    return {"value": f"{value:.2f}", "currency": currency}


def _cached(request: web.Request, body: dict[str, Any]) -> web.Response:
    """``body`` as JSON with its ETag, or 304 when the client's ``If-None-Match`` names it."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    tag = '"' + hashlib.sha256(text.encode()).hexdigest()[:24] + '"'
    asked = request.headers.get("If-None-Match", "")
    if tag in {t.strip().removeprefix("W/") for t in asked.split(",")}:
        return web.Response(status=304, headers={"ETag": tag})
    return web.Response(text=text, content_type="application/json", headers={"ETag": tag})


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


def _invalid_grant(description: str) -> _Refused:
    return _Refused(400, {"error": "invalid_grant", "error_description": description})


def _field(form: Any, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _login_page(flow: str, *, error: str) -> web.Response:
    message = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    body = (
        f'{message}<form method="post" action="/auth/login">'
        f'<input type="hidden" name="flow" value="{html.escape(flow)}">'
        '<label>Username <input name="username" autocomplete="username"></label>'
        '<label>Password <input type="password" name="password"></label>'
        "<button>Log in</button></form>"
    )
    return _page("Log in", body)


def _page(title: str, body: str, status: int = 200) -> web.Response:
    text = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} - Neo'
        f"</title></head><body><h1>{title}</h1><main>{body}</main></body></html>"
    )
    return web.Response(text=text, status=status, content_type="text/html")
