"""The API bank: a JSON API behind OAuth-style bearer tokens, with cursors and its own rate limit.

Routes (every answer is JSON; amounts are decimal strings such as ``"-12.34"``, dates ISO)::

    POST /oauth/token                        grant_type=password, username, password (form or
                                             JSON) -> {"access_token", "token_type": "Bearer",
                                             "expires_in": 300}
    GET  /api/v2/accounts                    {"accounts": [{"id", "iban", "pan", "alias",
                                             "currency", "type", "balance", "contract"}]}
    GET  /api/v2/accounts/{id}/transactions  ?dateFrom=YYYY-MM-DD&dateTo=YYYY-MM-DD&limit=N
                                             -> {"transactions": [...], "next": cursor | null}
    GET  /api/v2/accounts/{id}/transactions?cursor=<next>   the following page

Accounts: ``iban`` is ``null`` for cards, ``pan`` (the masked card number) ``null`` for the rest;
``type`` is ``CURRENT``, ``SAVINGS`` or ``CREDIT_CARD``; ``balance`` is
``{"amount": "1234.56", "currency": "EUR"}`` (booked movements only); ``contract`` is
``{"id", "name"}``.

Transactions come newest first (pending ones, then booked ones from the latest posted), each
``{"id", "operationDate", "valueDate", "amount": {"amount", "currency"}, "description",
"status": "PENDING" | "BOOKED", "balanceAfter": {"amount", "currency"} | null}``. ``id`` stays the
same when a pending transaction is booked (its description and value date may change).
``dateFrom``/``dateTo`` filter on the operation date; without them the last 90 days up to today
are given. ``limit`` defaults to 50 and is silently capped at 100. Follow-up pages are asked for
by ``?cursor=`` alone: the cursor carries account, filter and position, and is refused (400
``{"error": "invalid_cursor"}``) when forged, expired (15 minutes), made for another account or
combined with other parameters.

How it behaves, as real APIs do:

* Wrong credentials are **not** an HTTP error: 200 ``{"resultado": "KO", "codigo": "E1001",
  "mensaje": "Credenciales incorrectas"}``; a locked user (whatever the password) gets 200
  ``{"resultado": "KO", "codigo": "E1002", ...}``. 20 failures from one IP in 10 minutes block
  it (``BankSettings.login_failures_per_ip``). Another ``grant_type`` is 400
  ``{"error": "unsupported_grant_type"}``.
* The token is stateless and short-lived (``ApiBank.token_ttl_seconds``, 300 s of real time, per
  instance: ``bank.token_ttl_seconds = 5``). No or a forged token: 401
  ``{"error": "invalid_token"}``; an expired one: 401 ``{"error": "token_expired"}``, so long
  scrapes must log in again midway.
* Another customer's account, like an unknown one, is 404 ``{"error": "account_not_found"}``.
* Its own rate limit, whatever the hostility profile: ``ApiBank.client_rate_per_second`` (10)
  with bursts of ``client_rate_burst`` (20) per client IP, then 429 ``{"error": "rate_limited"}``
  with ``Retry-After`` (seconds). 0 disables it. It is the bank's first check, after the
  site's guard.
* ``BankSettings.maintenance_rate``: that share of requests gets 503 ``{"error": "maintenance"}``.
* ``BankSettings.layout = 2`` is the "v3 migration": same URLs, new field names, and every answer
  says ``X-Api-Version: 3`` (else 2). Accounts come as ``{"items": [{"accountId", "iban",
  "maskedPan", "displayName", "productType": "current" | "savings" | "credit_card", "balance":
  "1234.56", "currency", "contractId", "contractName"}]}``; transactions as ``{"items":
  [{"transactionId", "transactionDate", "valueDate", "amount": "-12.34", "currency",
  "remittanceInformation", "bookingStatus": "pending" | "booked", "balanceAfter": "..." | null}],
  "nextCursor": cursor | null}``. Parsers of v2 break.
* Errors of the site's guard (CAPTCHA checkpoints and the like) come as JSON too.

>>> bank = ApiBank(SandboxState(seed=0, admin_token="t"), latency_ms=(0, 0))  # doctest: +SKIP
>>> bank.token_ttl_seconds = 2  # doctest: +SKIP
>>> async with serve(bank.app()) as url: ...  # doctest: +SKIP
"""

from __future__ import annotations

import hmac
import json
import math
import time
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from scrapeflow.sandbox._guards import ADMIN_PREFIX
from scrapeflow.sandbox._tokens import TokenError, TokenExpired
from scrapeflow.sandbox._world import Account, AccountKind, Movement
from scrapeflow.sandbox.banks._base import BankSite

__all__ = ["ApiBank"]

_ACCESS_PURPOSE = "apibank-token"
_CURSOR_PURPOSE = "apibank-cursor"
_DEFAULT_DAYS = 90
_DEFAULT_LIMIT = 50
_MAX_LIMIT = 100
_MAX_TRACKED_IPS = 100_000
_TYPES = {
    AccountKind.CHECKING: "CURRENT",
    AccountKind.SAVINGS: "SAVINGS",
    AccountKind.CARD: "CREDIT_CARD",
}


class _Refused(Exception):
    """A handler's refusal, answered by the gateway middleware as this JSON response."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(status, body)
        self.response = _json(body, status=status, headers=headers)


class _RateLimit:
    """Token buckets per client IP: ``rate`` requests a second, ``burst`` at once."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}

    def wait(self, ip: str, rate: float, burst: float) -> float | None:
        """``None`` if ``ip`` may go on (a token is taken); else the seconds to wait."""
        now = time.monotonic()
        if ip not in self._buckets and len(self._buckets) >= _MAX_TRACKED_IPS:
            self._buckets.clear()
        tokens, refilled_at = self._buckets.get(ip, (burst, now))
        tokens = min(burst, tokens + (now - refilled_at) * rate)
        if tokens >= 1.0:
            self._buckets[ip] = (tokens - 1.0, now)
            return None
        self._buckets[ip] = (tokens, now)
        return (1.0 - tokens) / rate


class ApiBank(BankSite):
    """The API bank. See the module docstring for its routes and behaviour."""

    name = "apibank"
    token_ttl_seconds: float = 300.0
    """Real seconds an access token lives; set on an instance to make tokens expire sooner."""
    cursor_ttl_seconds: float = 900.0
    """Real seconds a pagination cursor lives."""
    client_rate_per_second: float = 10.0
    """The bank's own per-IP rate limit (independent of hostility); 0 disables it."""
    client_rate_burst: int = 20
    """Requests an idle client IP may send at once under that limit."""

    def prepare(self) -> None:
        self._rate_limit = _RateLimit()

    def is_json(self, request: web.Request) -> bool:
        return True

    def app(self) -> web.Application:
        app = super().app()
        app.middlewares.append(self._gateway())
        return app

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/oauth/token", self._token)
        app.router.add_get("/api/v2/accounts", self._accounts)
        app.router.add_get("/api/v2/accounts/{id}/transactions", self._transactions)

    def _gateway(self) -> Middleware:
        @web.middleware
        async def gateway(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path.startswith(ADMIN_PREFIX):
                return await handler(request)
            rate = self.client_rate_per_second
            if rate > 0:
                burst = max(1.0, float(self.client_rate_burst))
                wait = self._rate_limit.wait(request.remote or "?", rate, burst)
                if wait is not None:
                    retry = str(max(1, math.ceil(wait)))
                    return _json(
                        {"error": "rate_limited"}, status=429, headers={"Retry-After": retry}
                    )
            if self.in_maintenance():
                return _json({"error": "maintenance", "message": "Servicio en mantenimiento"}, 503)
            try:
                response = await handler(request)
            except _Refused as refusal:
                response = refusal.response
            except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
                response = _json({"error": exc.reason.lower().replace(" ", "_")}, exc.status)
            response.headers["X-Api-Version"] = "3" if self.settings.layout == 2 else "2"
            return response

        return gateway

    # -- authentication ---------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        fields = await _fields(request)
        if fields.get("grant_type") != "password":
            raise _Refused(400, {"error": "unsupported_grant_type"})
        login = self.login_of(fields.get("username", "").strip())
        if login is not None and login.locked:
            self.login_failed(request)
            return _json(
                {
                    "resultado": "KO",
                    "codigo": "E1002",
                    "mensaje": "Usuario bloqueado. Contacte con su gestor.",
                }
            )
        password = fields.get("password", "")
        if login is None or not hmac.compare_digest(password.encode(), login.password.encode()):
            self.login_failed(request)
            return _json(
                {"resultado": "KO", "codigo": "E1001", "mensaje": "Credenciales incorrectas"}
            )
        ttl = self.token_ttl_seconds
        token = self.state.signer.sign(_ACCESS_PURPOSE, {"customer": login.customer}, ttl)
        return _json(
            {"access_token": token, "token_type": "Bearer", "expires_in": max(1, math.ceil(ttl))}
        )

    def _customer(self, request: web.Request) -> int:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("invalid_token")
        try:
            claims = self.state.signer.verify(_ACCESS_PURPOSE, token.strip())
        except TokenError as exc:
            raise _unauthorized(
                "token_expired" if isinstance(exc, TokenExpired) else "invalid_token"
            ) from None
        return int(claims["customer"])

    # -- accounts and transactions ----------------------------------------------------------

    async def _accounts(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        accounts = self.accounts_of(customer)
        if self.settings.layout == 2:
            return _json({"items": [self._account_v3(a) for a in accounts]})
        return _json({"accounts": [self._account_v2(a) for a in accounts]})

    def _account_v2(self, account: Account) -> dict[str, Any]:
        return {
            "id": account.id,
            "iban": account.iban,
            "pan": account.number if account.kind is AccountKind.CARD else None,
            "alias": account.alias,
            "currency": account.currency,
            "type": _TYPES[account.kind],
            "balance": _money(self.balance_of(account), account.currency),
            "contract": {"id": account.contract.id, "name": account.contract.name},
        }

    def _account_v3(self, account: Account) -> dict[str, Any]:
        return {
            "accountId": account.id,
            "iban": account.iban,
            "maskedPan": account.number if account.kind is AccountKind.CARD else None,
            "displayName": account.alias,
            "productType": _TYPES[account.kind].lower(),
            "balance": _decimal(self.balance_of(account)),
            "currency": account.currency,
            "contractId": account.contract.id,
            "contractName": account.contract.name,
        }

    async def _transactions(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        account = self.account_of(customer, request.match_info["id"])
        if account is None:
            raise _Refused(404, {"error": "account_not_found"})
        if "cursor" in request.query:
            since, until, limit, offset = self._read_cursor(request, customer, account)
        else:
            since, until, limit = self._read_filter(request)
            offset = 0
        rows = [
            m for m in reversed(self.movements_of(account)) if since <= m.operation_date <= until
        ]
        page = rows[offset : offset + limit]
        cursor = None
        if offset + limit < len(rows):
            position = {
                "customer": customer,
                "account": account.id,
                "from": since.isoformat(),
                "to": until.isoformat(),
                "limit": limit,
                "offset": offset + limit,
            }
            cursor = self.state.signer.sign(_CURSOR_PURPOSE, position, self.cursor_ttl_seconds)
        if self.settings.layout == 2:
            return _json(
                {"items": [_transaction_v3(m, account) for m in page], "nextCursor": cursor}
            )
        return _json({"transactions": [_transaction_v2(m, account) for m in page], "next": cursor})

    def _read_filter(self, request: web.Request) -> tuple[date, date, int]:
        query = request.query
        try:
            until = (
                date.fromisoformat(query["dateTo"])
                if query.get("dateTo")
                else self.state.clock.now().date()
            )
            since = (
                date.fromisoformat(query["dateFrom"])
                if query.get("dateFrom")
                else until - timedelta(days=_DEFAULT_DAYS - 1)
            )
        except ValueError:
            raise _Refused(
                400, {"error": "invalid_request", "message": "dates must be YYYY-MM-DD"}
            ) from None
        if since > until:
            raise _Refused(400, {"error": "invalid_request", "message": "dateFrom is after dateTo"})
        text = query.get("limit", str(_DEFAULT_LIMIT))
        if not text.isdigit() or int(text) < 1:
            raise _Refused(
                400, {"error": "invalid_request", "message": "limit must be a positive integer"}
            )
        return since, until, min(int(text), _MAX_LIMIT)

    def _read_cursor(
        self, request: web.Request, customer: int, account: Account
    ) -> tuple[date, date, int, int]:
        if len(request.query) > 1:
            raise _Refused(
                400,
                {"error": "invalid_cursor", "message": "a cursor cannot go with other parameters"},
            )
        try:
            position = self.state.signer.verify(_CURSOR_PURPOSE, request.query["cursor"])
        except TokenError as exc:
            raise _Refused(400, {"error": "invalid_cursor", "message": str(exc)}) from None
        if position.get("customer") != customer or position.get("account") != account.id:
            raise _Refused(
                400, {"error": "invalid_cursor", "message": "cursor made for another account"}
            )
        return (
            date.fromisoformat(str(position["from"])),
            date.fromisoformat(str(position["to"])),
            int(position["limit"]),
            int(position["offset"]),
        )


def _transaction_v2(m: Movement, account: Account) -> dict[str, Any]:
    return {
        "id": m.ref,
        "operationDate": m.operation_date.isoformat(),
        "valueDate": m.value_date.isoformat(),
        "amount": _money(m.amount, account.currency),
        "description": m.description,
        "status": "PENDING" if m.pending else "BOOKED",
        "balanceAfter": (
            None if m.balance_after is None else _money(m.balance_after, account.currency)
        ),
    }


def _transaction_v3(m: Movement, account: Account) -> dict[str, Any]:
    return {
        "transactionId": m.ref,
        "transactionDate": m.operation_date.isoformat(),
        "valueDate": m.value_date.isoformat(),
        "amount": _decimal(m.amount),
        "currency": account.currency,
        "remittanceInformation": m.description,
        "bookingStatus": "pending" if m.pending else "booked",
        "balanceAfter": None if m.balance_after is None else _decimal(m.balance_after),
    }


def _decimal(value: Decimal) -> str:
    return f"{value:.2f}"


def _money(value: Decimal, currency: str) -> dict[str, str]:
    return {"amount": _decimal(value), "currency": currency}


def _json(
    body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        text=json.dumps(body, ensure_ascii=False),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def _unauthorized(error: str) -> _Refused:
    return _Refused(401, {"error": error}, {"WWW-Authenticate": f'Bearer error="{error}"'})


async def _fields(request: web.Request) -> dict[str, str]:
    """The form's or the JSON object's fields, as strings."""
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise _Refused(400, {"error": "invalid_request", "message": "malformed JSON body"})
        return {str(k): str(v) for k, v in body.items() if v is not None}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}
