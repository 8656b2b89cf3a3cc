"""The neobank's authorisation server: OAuth with PKCE, the push, the consent, the tokens.

Its routes and rules are in :mod:`scrapeflow.sandbox.banks._neobank`'s documentation. Flow
state travels in signed tokens (no session), codes are single-use, and the consent's end is
carried by every token and judged on the sandbox clock.
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
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from scrapeflow.sandbox._tokens import TokenError, TokenExpired
from scrapeflow.sandbox.banks._approvals import ApprovalStatus

if TYPE_CHECKING:
    from scrapeflow.sandbox.banks._neobank import NeoBank

__all__ = ["NeoAuth", "Refused", "json_answer", "page"]

_FLOW = "neobank-flow"
_CODE = "neobank-code"
ACCESS = "neobank-access"
_REFRESH = "neobank-refresh"
_FLOW_TTL = 900.0
_CODE_TTL = 60.0
_REFRESH_TTL = 10 * 365 * 86_400.0  # the consent, on the sandbox clock, is what ends it
_MAX_USED_CODES = 100_000


class Refused(Exception):
    """A refusal, answered by the bank's gateway as this response."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status, body)
        self.response = json_answer(body, status)
        if status == 401:
            self.response.headers["WWW-Authenticate"] = f'Bearer error="{body["error"]}"'


class _PageRefusal(Refused):
    """A refusal answered with an HTML page (the browser-facing /auth routes)."""

    def __init__(self, response: web.Response) -> None:
        Exception.__init__(self, response.status)
        self.response = response


class NeoAuth:
    """The authorisation routes of ``bank``."""

    def __init__(self, bank: NeoBank) -> None:
        self.bank = bank
        self.state = bank.state
        self._used_codes: dict[str, float] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/oauth/authorize", self._authorize)
        app.router.add_get("/auth/login", self._login_form)
        app.router.add_post("/auth/login", self._login)
        app.router.add_get("/auth/approve", self._approve_page)
        app.router.add_get("/auth/approve/status", self._approve_status)
        app.router.add_get("/auth/consent", self._consent_form)
        app.router.add_post("/auth/consent", self._consent)
        app.router.add_post("/oauth/token", self._token)

    def access_claims(self, token: str) -> dict[str, Any]:
        """The claims of an access token (``customer``, ``until``); :class:`TokenError`."""
        return self.state.signer.verify(ACCESS, token)

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
            raise Refused(400, {"error": "invalid_request", "error_description": problems[0]})
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
        return _login_form_page(self._sign_flow(flow), error="")

    async def _login(self, request: web.Request) -> web.Response:
        form = await request.post()
        flow = self._flow(_field(form, "flow"), "login")
        login = self.bank.login_of(_field(form, "username").strip())
        if login is not None and login.locked:
            self.bank.login_failed(request)
            error = "This account is locked. Contact us from the app."
            return _login_form_page(self._sign_flow(flow), error=error)
        password = _field(form, "password")
        if login is None or not hmac.compare_digest(password.encode(), login.password.encode()):
            self.bank.login_failed(request)
            return _login_form_page(self._sign_flow(flow), error="Wrong username or password.")
        approval = self.bank.approvals.send(login.customer, login.username)
        flow.update(stage="approve", customer=login.customer, approval=approval.id)
        raise web.HTTPSeeOther(f"/auth/approve?flow={self._sign_flow(flow)}")

    async def _approve_page(self, request: web.Request) -> web.Response:
        token = request.query.get("flow", "")
        self._flow(token, "approve")
        poll = html.escape(f"/auth/approve/status?flow={token}")
        interval = self.bank.approvals.settings.poll_interval_seconds
        expires = self.bank.approvals.settings.ttl_seconds
        body = (
            f'<div id="approval" data-poll="{poll}" data-interval="{interval:g}" '
            f'data-expires-in="{expires:g}"><p>We sent a notification to your phone. Open the '
            "app and approve this login.</p></div>"
        )
        return page("Approve in the app", body)

    async def _approve_status(self, request: web.Request) -> web.Response:
        token = request.query.get("flow", "")
        flow = self._flow(token, "approve", json_errors=True)
        approval = self.bank.approvals.get(str(flow.get("approval")))
        if approval is None:
            raise Refused(400, {"error": "invalid_request", "error_description": "unknown flow"})
        interval = self.bank.approvals.settings.poll_interval_seconds
        if self.bank.approvals.polled_too_soon(approval):
            raise Refused(400, {"error": "slow_down", "interval": interval})
        status = self.bank.approvals.status(approval)
        answer: dict[str, Any] = {
            "status": status.value,
            "interval": interval,
            "expires_in": round(self.bank.approvals.expires_in(approval), 3),
        }
        if status is ApprovalStatus.APPROVED:
            consent = dict(flow, stage="consent")
            answer["next"] = f"/auth/consent?flow={self._sign_flow(consent)}"
        return json_answer(answer)

    async def _consent_form(self, request: web.Request) -> web.Response:
        flow = self._flow(request.query.get("flow"), "consent")
        accounts = self.bank.accounts_of(int(flow["customer"]))
        items = "".join(f"<li>{html.escape(a.alias)}</li>" for a in accounts)
        client = html.escape(str(flow["client"]))
        body = (
            f"<p><strong>{client}</strong> asks to read, for {self.bank.consent_days} days:</p>"
            "<ul class='scopes'><li>your accounts and balances</li><li>your cards</li>"
            f"<li>your transactions</li></ul><ul class='accounts'>{items}</ul>"
            f'<form method="post" action="/auth/consent">'
            f'<input type="hidden" name="flow" value="{html.escape(self._sign_flow(flow))}">'
            '<button name="decision" value="allow">Allow</button>'
            '<button name="decision" value="deny">Deny</button></form>'
        )
        return page("Share your data", body)

    async def _consent(self, request: web.Request) -> web.Response:
        form = await request.post()
        flow = self._flow(_field(form, "flow"), "consent")
        decision = _field(form, "decision")
        if decision not in ("allow", "deny"):
            return page("Share your data", "<p class='error'>Choose Allow or Deny.</p>", 400)
        if decision == "deny":
            query = {"error": "access_denied", "state": flow["state"]}
        else:
            until = self.state.clock.now() + timedelta(days=self.bank.consent_days)
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
            raise Refused(400, {"error": "unsupported_grant_type"})
        if self.state.clock.now() >= until:
            raise _invalid_grant("consent expired")
        claims = {"customer": customer, "until": until.isoformat()}
        ttl = self.bank.token_ttl_seconds
        return json_answer(
            {
                "access_token": self.state.signer.sign(ACCESS, claims, ttl),
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
                raise Refused(400, {"error": "invalid_request", "error_description": "bad flow"})
            text = "<p class='error'>This login has expired. Start again from the app.</p>"
            raise _PageRefusal(page("Login expired", text, 400))
        return flow

    def _sign_flow(self, flow: dict[str, Any]) -> str:
        return self.state.signer.sign(_FLOW, flow, _FLOW_TTL)


def json_answer(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


def _invalid_grant(description: str) -> Refused:
    return Refused(400, {"error": "invalid_grant", "error_description": description})


def _field(form: Any, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _login_form_page(flow: str, *, error: str) -> web.Response:
    message = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    body = (
        f'{message}<form method="post" action="/auth/login">'
        f'<input type="hidden" name="flow" value="{html.escape(flow)}">'
        '<label>Username <input name="username" autocomplete="username"></label>'
        '<label>Password <input type="password" name="password"></label>'
        "<button>Log in</button></form>"
    )
    return page("Log in", body)


def page(title: str, body: str, status: int = 200) -> web.Response:
    text = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} - Neo'
        f"</title></head><body><h1>{title}</h1><main>{body}</main></body></html>"
    )
    return web.Response(text=text, status=status, content_type="text/html")
