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

The authorisation routes are :class:`~scrapeflow.sandbox.banks._neoauth.NeoAuth`'s, the API's
this module's. ``BankSettings.maintenance_rate`` applies (503); ``layout`` has no effect here.
The admin API adds the approvals (:mod:`scrapeflow.sandbox.banks._approvals`) to the ground
truth of every bank.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import date, datetime, timedelta
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from scrapeflow.sandbox._guards import ADMIN_PREFIX
from scrapeflow.sandbox._tokens import TokenError, TokenExpired
from scrapeflow.sandbox._world import Account, AccountKind, Movement
from scrapeflow.sandbox.banks._approvals import Approvals
from scrapeflow.sandbox.banks._base import BankSite
from scrapeflow.sandbox.banks._neoauth import NeoAuth, Refused, json_answer, page

__all__ = ["NeoBank"]

_PAGE = 50
_DEFAULT_DAYS = 90


class NeoBank(BankSite):
    """The neobank. See the module docstring for its routes and behaviour."""

    name = "neobank"
    token_ttl_seconds: float = 300.0
    """Real seconds an access token lives."""
    consent_days: int = 90
    """Sandbox days a consent lasts (PSD2 asks for it again after 90 or 180)."""

    def prepare(self) -> None:
        self.approvals = Approvals(self.state, self.name)
        self.auth = NeoAuth(self)

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
        self.auth.routes(app)
        app.router.add_get("/v1/me", self._me)
        app.router.add_get("/v1/accounts", self._accounts)
        app.router.add_get("/v1/cards", self._cards)
        app.router.add_get("/v1/{kind:accounts|cards}/{id}/transactions", self._transactions)

    def _gateway(self) -> Middleware:
        @web.middleware
        async def gateway(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path.startswith(ADMIN_PREFIX):
                return await handler(request)
            browser = request.path.startswith("/auth/")
            if self.in_maintenance():
                if browser:
                    return page("Maintenance", "<p>We are improving the app.</p>", status=503)
                return json_answer({"error": "maintenance"}, 503)
            try:
                return await handler(request)
            except Refused as refusal:
                return refusal.response
            except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
                if browser:
                    raise
                return json_answer({"error": exc.reason.lower().replace(" ", "_")}, exc.status)

        return gateway

    # -- authorisation ------------------------------------------------------------------------

    def _customer(self, request: web.Request) -> int:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, {"error": "invalid_token"})
        try:
            claims = self.auth.access_claims(token.strip())
        except TokenError as exc:
            error = "token_expired" if isinstance(exc, TokenExpired) else "invalid_token"
            raise Refused(401, {"error": error}) from None
        if self.state.clock.now() >= datetime.fromisoformat(str(claims["until"])):
            raise Refused(403, {"error": "consent_expired"})
        return int(claims["customer"])

    async def _me(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        token = request.headers["Authorization"].partition(" ")[2].strip()
        until = self.auth.access_claims(token)["until"]
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
            raise Refused(404, {"error": "not_found"})
        since, number = self._listing_query(request)
        rows = [m for m in reversed(self.movements_of(account)) if m.operation_date >= since]
        pages = max(1, math.ceil(len(rows) / _PAGE))
        if number > pages:
            raise Refused(400, {"error": "invalid_request", "error_description": "no such page"})
        chunk = rows[(number - 1) * _PAGE : number * _PAGE]
        return _cached(
            request,
            {
                "transactions": [_transaction(m, account.currency) for m in chunk],
                "page": number,
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
            raise Refused(
                400, {"error": "invalid_request", "error_description": "from must be YYYY-MM-DD"}
            ) from None
        text = q.get("page", "1")
        if not text.isdigit() or int(text) < 1:
            raise Refused(
                400, {"error": "invalid_request", "error_description": "page must be 1 or more"}
            )
        return since, int(text)


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
