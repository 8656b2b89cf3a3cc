"""The neobank (``neobank``): OAuth with PKCE, a push approval, 90-day consent, a JSON API.

The flow:

1. **Login**, with a consent already given: ``POST /oauth/token`` with the refresh token kept in
   :attr:`ScrapeContext.state`: no person needed, as for a daily run. The bank refusing it with
   "consent expired" ends the access ``consent_expired`` (the refresh token is dropped, so the
   next refresh authorises again: the customer is asked once, not by every scheduled run).
2. **Login**, without one: the authorisation code flow with PKCE, as a browser would go through
   it. ``GET /oauth/authorize`` (a fresh verifier and ``state``), the login form, then a push on
   the customer's phone: ``/auth/approve/status`` is polled at the interval the bank gives (one
   second more after a ``slow_down``) until approved, rejected or expired (ends
   ``not_approved``), never longer than :attr:`NeoBankScraper.approval_timeout`. The consent
   screen is accepted; its redirect to :attr:`NeoBankScraper.redirect_uri` is read, not
   followed; the code and the verifier buy the tokens. A poll the bank was down for is sent
   again in the same flow: starting over would send the customer a second push.
3. **Contracts** — the bank has none: one per login, ``GET /v1/me``'s ``customerId``.
4. **Accounts** — ``GET /v1/accounts`` (current, savings) and ``GET /v1/cards``, at once. A card
   has no IBAN; its masked PAN is its number.
5. **Movements** — ``GET /v1/{accounts|cards}/{id}/transactions?from=&page=`` until ``pages``.
   A transaction's ``id`` is its reference: a card authorisation keeps it when it posts, with
   another amount (the sync reports it modified); a released one is simply gone (removed).

Every GET of the API carries the ``If-None-Match`` of the answer kept from the last run (in
``context.state["etags"]``, up to :attr:`NeoBankScraper.etag_cache_chars`): a 304 costs the bank
no work and the wire no body. 401 (``token_expired``) raises
:class:`SessionExpired` (the base class logs in again, with the refresh token); 403
``consent_expired`` ends the access ``consent_expired``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import Any, ClassVar, NoReturn
from urllib.parse import parse_qs, urlsplit

import yarl
from parsel import Selector

from scrapeflow.banking import (
    AccountRecord,
    AccountType,
    BasicScraper,
    ContractInfo,
    MovementRecord,
    ResultCode,
    ScrapeContext,
    compact,
    movement_key,
    parse_amount,
    parse_iso_date,
)
from scrapeflow.errors import SessionExpired
from scrapeflow.http import Response

__all__ = ["NeoBankScraper"]

_MAX_PAGES = 1000


class NeoBankScraper(BasicScraper):
    """Scraper of the sandbox's neobank; see the module's documentation."""

    bank = "neobank"
    title = "Neo"
    country = "ES"
    client_id: ClassVar[str] = "tesoralia"
    redirect_uri: ClassVar[str] = "https://app.tesoralia.example/oauth/callback"
    """Where the bank sends the code. Registered with the bank, never fetched."""
    approval_timeout: ClassVar[float] = 300.0
    """Seconds the scraper waits for the customer's approval at most, whatever the bank says."""
    etag_cache_chars: ClassVar[int] = 64_000
    """Characters of API answers kept between runs for ``If-None-Match`` (in the access's
    encrypted state: a quiet account's listings, not a whole history)."""

    def __init__(self, context: ScrapeContext) -> None:
        super().__init__(context)
        self._token: str | None = None
        kept = context.state.get("etags")
        self._etags_before: dict[str, list[str]] = kept if isinstance(kept, dict) else {}
        self._etags: dict[str, list[str]] = {}
        self._etag_chars = 0

    # -- login ---------------------------------------------------------------------------------

    async def login(self) -> None:
        self._token = None
        refresh = self.context.state.get("refresh_token")
        if isinstance(refresh, str) and refresh:
            body = await self._tokens({"grant_type": "refresh_token", "refresh_token": refresh})
            if "access_token" in body:
                self._keep(body)
                return
            self.context.state.pop("refresh_token", None)
            description = str(body.get("error_description", ""))
            if "consent expired" in description:
                self._consent_expired(f"the bank refused the refresh token: {description}")
            self.log.info("refresh token refused, authorising again", reason=description[:80])
        await self._authorise()

    async def _authorise(self) -> None:
        verifier = secrets.token_urlsafe(48)
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        state = secrets.token_urlsafe(16)
        form_page = await self.get(
            "/oauth/authorize",
            params={
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": self.redirect_uri,
                "scope": "accounts cards transactions",
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            },
        )
        flow = self._hidden_flow(form_page, "the login form")
        answer = await self.post(
            "/auth/login",
            data={"flow": flow, "username": self.context.login, "password": self.password()},
        )
        if yarl.URL(answer.url).path != "/auth/approve":
            self._login_refused(answer)
        consent_url = await self._approval(answer)
        consent_page = await self.again_while_down(lambda: self.get(consent_url))
        redirect = await self.again_while_down(
            lambda: self.post(
                "/auth/consent",
                data={
                    "flow": self._hidden_flow(consent_page, "the consent form"),
                    "decision": "allow",
                },
                allow_redirects=False,
                expect=(302, 303),
            )
        )
        location = redirect.headers.get("Location", "")
        if not location.startswith(self.redirect_uri):
            self.site_changed(f"the consent redirected elsewhere than {self.redirect_uri}")
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        if query.get("state") != state:
            self.site_changed("the consent's redirect carries another state")
        if "code" not in query:
            self.fail(ResultCode.NOT_APPROVED, f"the bank gave no consent: {query.get('error')}")
        body = await self._tokens(
            {
                "grant_type": "authorization_code",
                "code": query["code"],
                "code_verifier": verifier,
                "redirect_uri": self.redirect_uri,
            }
        )
        if "access_token" not in body:
            self.site_changed(f"the code bought no token: {body.get('error_description', '')}")
        self._keep(body)

    async def _approval(self, page: Response) -> str:
        """Poll the push until the customer answers it; the consent page's URL."""
        box = Selector(text=self.text(page)).css("#approval")
        poll = box.attrib.get("data-poll")
        if not poll:
            self.site_changed("the approval page has no #approval[data-poll]")
        interval = _seconds(box.attrib.get("data-interval"), 1.0)
        expires_in = _seconds(box.attrib.get("data-expires-in"), self.approval_timeout)
        deadline = time.monotonic() + min(expires_in + interval, self.approval_timeout)
        while time.monotonic() < deadline:
            await asyncio.sleep(interval)
            answer = await self.again_while_down(lambda: self.get(poll, expect=(200, 400)))
            body = self._json(answer, "GET /auth/approve/status")
            if answer.status == 400:
                if body.get("error") != "slow_down":
                    self.site_changed(f"the approval poll answered 400 {body.get('error')}")
                interval = _seconds(body.get("interval"), interval) + 1.0
                continue
            status = body.get("status")
            if status == "approved" and isinstance(body.get("next"), str):
                return str(body["next"])
            if status == "rejected":
                self.fail(ResultCode.NOT_APPROVED, "the customer rejected the login in the app")
            if status == "expired":
                self.fail(ResultCode.NOT_APPROVED, "nobody approved the login in the app in time")
            if status != "pending":
                self.site_changed(f"the approval poll answered status {status!r}")
            interval = _seconds(body.get("interval"), interval)
        self.fail(
            ResultCode.NOT_APPROVED,
            f"no answer to the push in the app within {min(expires_in, self.approval_timeout):g} s",
        )

    def _login_refused(self, answer: Response) -> NoReturn:
        error = " ".join(Selector(text=self.text(answer)).css("p.error ::text").getall()).strip()
        lowered = error.lower()
        if "locked" in lowered:
            self.fail(ResultCode.USER_LOCKED, error)
        if "wrong" in lowered:
            self.fail(ResultCode.WRONG_CREDENTIALS, error)
        path = yarl.URL(answer.url).path
        self.site_changed(f"the login answered {path} ({error or 'no message'})")

    def _hidden_flow(self, page: Response, what: str) -> str:
        flow = Selector(text=self.text(page)).css("input[name=flow]::attr(value)").get()
        if not flow:
            self.site_changed(f"{what} has no flow field")
        return flow

    async def _tokens(self, fields: dict[str, str]) -> dict[str, Any]:
        answer = await self.post(
            "/oauth/token", data={**fields, "client_id": self.client_id}, expect=(200, 400)
        )
        return self._json(answer, "POST /oauth/token")

    def _keep(self, tokens: Mapping[str, Any]) -> None:
        token, refresh = tokens.get("access_token"), tokens.get("refresh_token")
        if not isinstance(token, str) or not isinstance(refresh, str):
            self.site_changed("the token answer lacks access_token or refresh_token")
        self._token = token
        self.context.state["refresh_token"] = refresh
        self.context.state["consent_expires_at"] = str(tokens.get("consent_expires_at", ""))

    def _consent_expired(self, detail: str) -> NoReturn:
        self.context.state.pop("refresh_token", None)
        self.context.state.pop("etags", None)
        self.fail(ResultCode.CONSENT_EXPIRED, detail)

    # -- contracts, accounts, movements ---------------------------------------------------------

    async def contracts(self) -> Sequence[ContractInfo]:
        me = await self._api("/v1/me")
        customer = me.get("customerId")
        if not isinstance(customer, str) or not customer:
            self.site_changed("GET /v1/me has no customerId")
        return [ContractInfo(bank_ref=customer, name=self.title)]

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        # Both lists at once: one round trip less before the balances.
        listed = await asyncio.gather(self._api("/v1/accounts"), self._api("/v1/cards"))
        accounts = _items(listed[0], "accounts", self)
        cards = _items(listed[1], "cards", self)
        return [self._account(a, contract) for a in accounts] + [
            self._card(c, contract) for c in cards
        ]

    def _account(self, item: Mapping[str, Any], contract: ContractInfo) -> AccountRecord:
        kind = {"current": AccountType.CHECKING, "savings": AccountType.SAVINGS}.get(
            str(item.get("product"))
        )
        if kind is None:
            self.site_changed(f"account {item.get('id')}: unknown product {item.get('product')!r}")
        iban = compact(self._need(item, "iban", "account"))
        return AccountRecord(
            bank_ref=self._need(item, "id", "account"),
            type=kind,
            currency=self._need(item, "currency", "account"),
            balance=self._amount(item.get("balance"), "account balance"),
            iban=iban,
            number=iban[4:],
            alias=str(item.get("name") or ""),
            contract_ref=contract.bank_ref,
            contract_name=contract.name,
        )

    def _card(self, item: Mapping[str, Any], contract: ContractInfo) -> AccountRecord:
        return AccountRecord(
            bank_ref=self._need(item, "id", "card"),
            type=AccountType.CARD,
            currency=self._need(item, "currency", "card"),
            balance=self._amount(item.get("balance"), "card balance"),
            iban=None,
            number=self._need(item, "maskedPan", "card"),
            alias=str(item.get("name") or ""),
            contract_ref=contract.bank_ref,
            contract_name=contract.name,
        )

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        kind = "cards" if account.type is AccountType.CARD else "accounts"
        path = f"/v1/{kind}/{account.bank_ref}/transactions"
        found: dict[str, MovementRecord] = {}
        page, pages = 1, 1
        while page <= pages:
            body = await self._api(path, params={"from": since.isoformat(), "page": str(page)})
            for item in _items(body, "transactions", self):
                movement = self._movement(item)
                found[movement.key] = movement
            said = body.get("pages")
            pages = said if isinstance(said, int) else 0
            if not 1 <= pages <= _MAX_PAGES:
                self.site_changed(f"GET {path}: pages is {body.get('pages')!r}")
            page += 1
        return list(found.values())

    def _movement(self, item: Mapping[str, Any]) -> MovementRecord:
        status = item.get("status")
        if status not in ("pending", "booked"):
            self.site_changed(f"transaction {item.get('id')}: unknown status {status!r}")
        after = item.get("runningBalance")
        return MovementRecord(
            key=movement_key(reference=self._need(item, "id", "transaction")),
            operation_date=parse_iso_date(self._need(item, "date", "transaction")),
            value_date=parse_iso_date(self._need(item, "valueDate", "transaction")),
            amount=self._amount(item.get("amount"), "transaction amount"),
            description=str(item.get("description") or ""),
            pending=status == "pending",
            balance_after=None if after is None else parse_amount(str(after)),
        )

    # -- helpers -------------------------------------------------------------------------------

    async def _api(self, path: str, *, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The JSON object at ``path``: from the bank, or the copy kept when it answers 304."""
        token = self._token
        if token is None:
            raise SessionExpired("no access token")
        key = path + (
            "?" + "&".join(f"{k}={v}" for k, v in sorted(params.items())) if params else ""
        )
        kept = self._etags_before.get(key)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if isinstance(kept, list) and len(kept) == 2:
            headers["If-None-Match"] = kept[0]
        answer = await self.get(
            path, params=dict(params or {}), headers=headers, expect=(200, 304, 401, 403)
        )
        if answer.status == 401:
            if self._token == token:
                self._token = None
            raise SessionExpired(f"GET {path} answered 401")
        if answer.status == 403:
            error = self._json(answer, f"GET {path}").get("error")
            if error == "consent_expired":
                self._consent_expired("the bank says the customer's consent has expired")
            self.site_changed(f"GET {path} answered 403 {error}")
        if answer.status == 304:
            if kept is None:
                self.site_changed(f"GET {path} answered 304 to a request without If-None-Match")
            text = kept[1]
            self._remember(key, kept[0], text)
        else:
            text = self.text(answer)
            self._remember(key, answer.headers.get("ETag"), text)
        try:
            body = json.loads(text)
        except ValueError:
            self.site_changed(f"GET {path} did not answer JSON: {text[:80]!r}")
        if not isinstance(body, dict):
            self.site_changed(f"GET {path} did not answer a JSON object")
        return body

    def _remember(self, key: str, etag: str | None, text: str) -> None:
        if not etag or self._etag_chars + len(text) > self.etag_cache_chars:
            return
        self._etags[key] = [etag, text]
        self._etag_chars += len(text)
        self.context.state["etags"] = self._etags

    def _json(self, response: Response, where: str) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            self.site_changed(f"{where} did not answer JSON: {response.body[:80]!r}")
        if not isinstance(body, dict):
            self.site_changed(f"{where} did not answer a JSON object")
        return body

    def _need(self, item: Mapping[str, Any], name: str, what: str) -> str:
        value = item.get(name)
        if value is None or str(value).strip() == "":
            self.site_changed(f"{what} without '{name}' (keys: {sorted(item)[:12]})")
        return str(value).strip()

    def _amount(self, money: Any, what: str) -> Decimal:
        if not isinstance(money, dict) or money.get("value") is None:
            self.site_changed(f"{what} is not {{value, currency}}: {str(money)[:60]!r}")
        return parse_amount(str(money["value"]))


def _items(body: Mapping[str, Any], name: str, scraper: NeoBankScraper) -> list[dict[str, Any]]:
    items = body.get(name)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        scraper.site_changed(f"the answer has no '{name}' list (keys: {sorted(body)[:10]})")
    return items


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _seconds(value: Any, default: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return default
    return seconds if 0 < seconds < 3600 else default
