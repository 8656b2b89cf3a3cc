"""The API bank (``apibank``): a JSON API behind short-lived bearer tokens.

The flow:

1. **Login** — ``POST /oauth/token`` (form: ``grant_type=password``, username, password). The
   bank refuses with HTTP 200 ``{"resultado": "KO", "codigo": ...}``: ``E1001`` is a wrong
   password, ``E1002`` a locked user. The access token is kept on the scraper and sent as
   ``Authorization: Bearer`` on every API call.
2. **Contracts** — the bank has no contracts endpoint: ``GET /api/v2/accounts`` once, and its
   accounts are grouped by their ``contract`` (``{"id", "name"}``). The listing is cached, so
   :meth:`ApiBankScraper.accounts` reads each contract's accounts without asking again.
3. **Accounts** — ``CURRENT``/``SAVINGS``/``CREDIT_CARD`` become checking/savings/card; a
   card has no IBAN, its masked ``pan`` is the number; an account's number is its IBAN's BBAN.
4. **Movements** — ``GET /api/v2/accounts/{id}/transactions?dateFrom=...&limit=100``, then
   ``?cursor=<next>`` alone until ``next`` is null. A transaction's ``id`` is its reference:
   it survives the move from pending to booked.

Errors: a 401 (``invalid_token``/``token_expired``) raises :class:`SessionExpired`, so the base
class logs in again and reruns the step; an expired cursor (400 ``invalid_cursor``) restarts that
account's listing from ``dateFrom`` a couple of times. The bank's own rate limit, 10 requests a
second per client IP with bursts of 20, is declared (:attr:`rate_limit`): the HTTP layer paces
each exit IP at it, and waits out a 429's ``Retry-After`` if one comes all the same. Any other
shape (the "v3" field names of layout 2, an unknown account type) is a site change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import Any, NoReturn

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

__all__ = ["ApiBankScraper"]

_TYPES = {
    "CURRENT": AccountType.CHECKING,
    "SAVINGS": AccountType.SAVINGS,
    "CREDIT_CARD": AccountType.CARD,
}
_PAGE_LIMIT = 100
_MAX_PAGES = 1000
"""Pages of one account's listing before the scraper assumes the cursors loop."""
_CURSOR_RESTARTS = 2
"""Times an account's listing starts over after the bank refused its cursor."""
_LOGIN_THROTTLE_RETRIES = 3
"""Times the token request is sent again after the bank's rate limit turned it away."""
_RETRY_AFTER_MAX = 30.0


class ApiBankScraper(BasicScraper):
    """Scraper of the sandbox's API bank; see the module's documentation."""

    bank = "apibank"
    title = "API Bank"
    country = "ES"
    rate_limit = (10.0, 20)  # its API's documented limit per client IP

    def __init__(self, context: ScrapeContext) -> None:
        super().__init__(context)
        self._token: str | None = None
        self._accounts: list[dict[str, Any]] | None = None
        """The accounts listing read by :meth:`contracts`, for :meth:`accounts`."""

    # -- login ---------------------------------------------------------------------------------

    async def login(self) -> None:
        self._token = None
        self._accounts = None  # read again under the new session
        for attempt in range(_LOGIN_THROTTLE_RETRIES + 1):
            response = await self.post(
                "/oauth/token",
                data={
                    "grant_type": "password",
                    "username": self.context.login,
                    "password": self.password(),
                },
                expect=(200, 429),
            )
            if response.status != 429 or attempt == _LOGIN_THROTTLE_RETRIES:
                break
            # The rate limit is the bank's first check: the request was not processed, so
            # sending it again is safe (the HTTP layer never resends a POST by itself).
            await asyncio.sleep(_retry_after(response))
        if response.status == 429:
            self.fail(ResultCode.BLOCKED, "POST /oauth/token answered 429 (rate limited)")
        body = self._json(response, "POST /oauth/token")
        token = body.get("access_token")
        if isinstance(token, str) and token:
            self._token = token
            return
        if body.get("resultado") == "KO":
            code = str(body.get("codigo", ""))
            message = str(body.get("mensaje") or code or "login refused")
            if code == "E1001":
                self.fail(ResultCode.WRONG_CREDENTIALS, message)
            if code == "E1002":
                self.fail(ResultCode.USER_LOCKED, message)
            self.fail(ResultCode.UNKNOWN, f"login refused ({code}): {message}")
        self.site_changed(f"POST /oauth/token answered no token (keys: {sorted(body)[:10]})")

    # -- contracts and accounts ----------------------------------------------------------------

    async def contracts(self) -> Sequence[ContractInfo]:
        listing = await self._listing()
        contracts: dict[str, ContractInfo] = {}
        for item in listing:
            ref, name = self._contract_of(item)
            contracts.setdefault(ref, ContractInfo(bank_ref=ref, name=name))
        return list(contracts.values())

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        listing = self._accounts if self._accounts is not None else await self._listing()
        return [
            self._account(item)
            for item in listing
            if self._contract_of(item)[0] == contract.bank_ref
        ]

    async def _listing(self) -> list[dict[str, Any]]:
        body = await self._api("/api/v2/accounts")
        items = body.get("accounts")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            self.site_changed(
                f"GET /api/v2/accounts has no 'accounts' list (keys: {sorted(body)[:10]})"
            )
        self._accounts = items
        return items

    def _contract_of(self, item: Mapping[str, Any]) -> tuple[str, str]:
        contract = item.get("contract")
        if not isinstance(contract, dict) or not contract.get("id"):
            self._missing("account", item, "contract")
        return str(contract["id"]), str(contract.get("name") or "")

    def _account(self, item: Mapping[str, Any]) -> AccountRecord:
        ref = _text(item.get("id"))
        kind = _TYPES.get(_text(item.get("type")))
        balance = item.get("balance")
        currency = _text(item.get("currency"))
        if not ref:
            self._missing("account", item, "id")
        if kind is None:
            self.site_changed(f"account {ref}: unknown type {item.get('type')!r}")
        if not isinstance(balance, dict) or "amount" not in balance:
            self._missing("account", item, "balance")
        if not currency:
            self._missing("account", item, "currency")
        contract_ref, contract_name = self._contract_of(item)
        iban = _text(item.get("iban")) or None
        pan = _text(item.get("pan")) or None
        if kind is AccountType.CARD:
            if pan is None:
                self._missing("card", item, "pan")
            iban = None
            number = pan
        else:
            if iban is None:
                self._missing("account", item, "iban")
            iban = compact(iban)
            number = iban[4:]  # the domestic account number (BBAN): the IBAN after "ESkk"
        return AccountRecord(
            bank_ref=ref,
            type=kind,
            currency=currency,
            balance=parse_amount(balance["amount"]),
            iban=iban,
            number=number,
            alias=_text(item.get("alias")),
            contract_ref=contract_ref,
            contract_name=contract_name,
        )

    # -- movements -----------------------------------------------------------------------------

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        path = f"/api/v2/accounts/{account.bank_ref}/transactions"
        first = {"dateFrom": since.isoformat(), "limit": str(_PAGE_LIMIT)}
        restarts = 0
        while True:
            found: dict[str, MovementRecord] = {}
            params: dict[str, str] = first
            for _ in range(_MAX_PAGES):
                body = await self._api(path, params=params, cursor_errors=True)
                if body.get("error") == "invalid_cursor":
                    break  # the cursor expired or was refused: start this account over
                items = body.get("transactions")
                if not isinstance(items, list) or "next" not in body:
                    self.site_changed(
                        f"GET {path} has no 'transactions' list (keys: {sorted(body)[:10]})"
                    )
                for item in items:
                    movement = self._movement(item)
                    found[movement.key] = movement
                cursor = body["next"]
                if cursor is None:
                    return list(found.values())
                if not isinstance(cursor, str) or not cursor:
                    self.site_changed(f"GET {path}: 'next' is not a cursor: {cursor!r}")
                params = {"cursor": cursor}
            else:
                self.site_changed(f"GET {path}: more than {_MAX_PAGES} pages")
            restarts += 1
            if restarts > _CURSOR_RESTARTS:
                self.site_changed(f"GET {path}: the bank refused its own cursor {restarts} times")
            self.log.info("cursor refused, listing the account again", account=account.bank_ref)

    def _movement(self, item: Any) -> MovementRecord:
        if not isinstance(item, dict):
            self.site_changed(f"a transaction is not an object: {str(item)[:80]!r}")
        ref = _text(item.get("id"))
        amount = item.get("amount")
        status = item.get("status")
        if not ref:
            self._missing("transaction", item, "id")
        if not isinstance(amount, dict) or "amount" not in amount:
            self._missing("transaction", item, "amount")
        if status not in ("PENDING", "BOOKED"):
            self.site_changed(f"transaction {ref}: unknown status {status!r}")
        for name in ("operationDate", "valueDate"):
            if not item.get(name):
                self._missing("transaction", item, name)
        after = item.get("balanceAfter")
        balance_after: Decimal | None = None
        if isinstance(after, dict) and after.get("amount") is not None:
            balance_after = parse_amount(after["amount"])
        elif after is not None:
            self.site_changed(f"transaction {ref}: balanceAfter is {str(after)[:40]!r}")
        return MovementRecord(
            key=movement_key(reference=ref),
            operation_date=parse_iso_date(item["operationDate"]),
            value_date=parse_iso_date(item["valueDate"]),
            amount=parse_amount(amount["amount"]),
            description=str(item.get("description") or ""),
            pending=status == "PENDING",
            balance_after=balance_after,
        )

    # -- helpers -------------------------------------------------------------------------------

    async def _api(
        self, path: str, *, params: Mapping[str, str] | None = None, cursor_errors: bool = False
    ) -> dict[str, Any]:
        """The JSON object at ``path``, sent with the bearer token.

        401 ends the session (:class:`SessionExpired`); with ``cursor_errors`` a 400
        ``invalid_cursor`` comes back as its body for the caller to handle.
        """
        token = self._token
        if token is None:
            raise SessionExpired("no access token")
        response = await self.get(
            path,
            params=dict(params or {}),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            expect=(200, 400, 401),
        )
        where = f"GET {path}"
        if response.status == 401:
            error = self._error_of(response)
            if self._token == token:
                self._token = None
            raise SessionExpired(f"{where} answered 401 {error}")
        body = self._json(response, where)
        if response.status == 400:
            if cursor_errors and body.get("error") == "invalid_cursor":
                return body
            self.site_changed(f"{where} answered 400 {str(body.get('error', ''))[:80]}")
        return body

    def _json(self, response: Response, where: str) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            # The raw bytes: a body that is not JSON may not be text either.
            self.site_changed(f"{where} did not answer JSON: {response.body[:80]!r}")
        if not isinstance(body, dict):
            self.site_changed(f"{where} did not answer a JSON object")
        return body

    def _error_of(self, response: Response) -> str:
        try:
            body = response.json()
        except ValueError:
            return ""
        return str(body.get("error", ""))[:80] if isinstance(body, dict) else ""

    def _missing(self, what: str, item: Mapping[str, Any], name: str) -> NoReturn:
        self.site_changed(f"{what} without '{name}' (keys: {sorted(item)[:12]})")


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _retry_after(response: Response) -> float:
    try:
        seconds = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.1), _RETRY_AFTER_MAX)
