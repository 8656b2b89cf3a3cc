"""The API bank over HTTP: tokens that expire, cursors, its own rate limit, the v3 migration."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import aiohttp
import pytest

from scrapeflow.sandbox import BankTruth, SandboxAdmin, serve
from scrapeflow.sandbox._site import SandboxState
from scrapeflow.sandbox.banks._apibank import ApiBank

BANK = "apibank"
LOCKED = next(n for n in range(1, 200) if n % 97 == 13)
MANY_ACCOUNTS = next(n for n in range(1, 200) if n % 50 == 7 and n % 97 != 13)


@dataclass
class Api:
    bank: ApiBank
    url: str
    http: aiohttp.ClientSession
    admin: SandboxAdmin

    async def credentials(self, customer: int) -> tuple[str, str]:
        login = await self.admin.customer(BANK, customer)
        return login["username"], login["password"]

    async def token_response(self, **fields: str) -> tuple[int, dict]:
        async with self.http.post(f"{self.url}/oauth/token", data=fields) as r:
            return r.status, await r.json()

    async def token(self, customer: int) -> str:
        username, password = await self.credentials(customer)
        status, body = await self.token_response(
            grant_type="password", username=username, password=password
        )
        assert status == 200 and body["token_type"] == "Bearer", body
        return body["access_token"]

    async def get(
        self, path: str, token: str | None, **params: str
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.get(self.url + path, headers=headers, params=params) as r:
            return r.status, await r.json(), r

    async def transactions(self, token: str, account_id: str, **params: str) -> list[dict]:
        """Every page of an account's transactions, following the cursors."""
        path = f"/api/v2/accounts/{account_id}/transactions"
        status, body, _ = await self.get(path, token, **params)
        collected = []
        while True:
            assert status == 200, body
            collected.extend(body["transactions"])
            if body["next"] is None:
                return collected
            status, body, _ = await self.get(path, token, cursor=body["next"])

    async def truth(self, customer: int, since: date | None = None) -> BankTruth:
        username, _ = await self.credentials(customer)
        return await self.admin.truth(BANK, username, since=since)

    async def today(self) -> date:
        return (await self.admin.now()).date()


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    bank = ApiBank(SandboxState(seed=0, admin_token="t"), latency_ms=(0, 0))
    bank.client_rate_per_second = 0  # the bank's own limit has its own test
    async with (
        serve(bank.app()) as url,
        aiohttp.ClientSession() as http,
        SandboxAdmin({BANK: url}, "t", session=http) as admin,
    ):
        yield Api(bank, url, http, admin)


def expected_transaction(m: dict, currency: str) -> dict:
    money = lambda amount: None if amount is None else {"amount": amount, "currency": currency}  # noqa: E731
    return {
        "id": m["ref"],
        "operationDate": m["operation_date"],
        "valueDate": m["value_date"],
        "amount": money(m["amount"]),
        "description": m["description"],
        "status": "PENDING" if m["pending"] else "BOOKED",
        "balanceAfter": money(m["balance_after"]),
    }


async def test_token_then_accounts_as_the_truth_has_them(api: Api) -> None:
    token = await api.token(1)
    status, body, response = await api.get("/api/v2/accounts", token)
    assert status == 200 and response.headers["X-Api-Version"] == "2"
    truth = await api.truth(1)
    types = {"checking": "CURRENT", "savings": "SAVINGS", "card": "CREDIT_CARD"}
    assert body["accounts"] == [
        {
            "id": a["id"],
            "iban": a["iban"],
            "pan": a["number"] if a["kind"] == "card" else None,
            "alias": a["alias"],
            "currency": a["currency"],
            "type": types[a["kind"]],
            "balance": {"amount": a["balance"], "currency": a["currency"]},
            "contract": {"id": a["contract"], "name": a["contract_name"]},
        }
        for a in truth["accounts"]
    ]


async def test_token_request_may_be_json(api: Api) -> None:
    username, password = await api.credentials(1)
    fields = {"grant_type": "password", "username": username, "password": password}
    async with api.http.post(f"{api.url}/oauth/token", json=fields) as r:
        body = await r.json()
    assert r.status == 200 and body["expires_in"] == 300 and body["access_token"]


async def test_wrong_credentials_and_locked_user_get_the_banks_message_with_200(api: Api) -> None:
    username, password = await api.credentials(1)
    status, body = await api.token_response(
        grant_type="password", username=username, password=password + "x"
    )
    assert (status, body) == (
        200,
        {"resultado": "KO", "codigo": "E1001", "mensaje": "Credenciales incorrectas"},
    )
    status, body = await api.token_response(
        grant_type="password", username="user99999999", password="x"
    )
    assert status == 200 and body["codigo"] == "E1001"
    locked = await api.admin.customer(BANK, LOCKED)
    assert locked["locked"]
    status, body = await api.token_response(
        grant_type="password", username=locked["username"], password=locked["password"]
    )
    assert status == 200 and body["resultado"] == "KO" and body["codigo"] == "E1002"
    assert "bloqueado" in body["mensaje"]
    status, body = await api.token_response(
        grant_type="client_credentials", username=username, password=password
    )
    assert (status, body) == (400, {"error": "unsupported_grant_type"})


async def test_failed_logins_block_the_ip(api: Api) -> None:
    await api.admin.update_bank_settings(BANK, login_failures_per_ip=3)
    username, _ = await api.credentials(1)
    for _ in range(3):
        status, body = await api.token_response(
            grant_type="password", username=username, password="wrong"
        )
        assert status == 200 and body["codigo"] == "E1001"
    async with api.http.post(f"{api.url}/oauth/token", data={"grant_type": "password"}) as r:
        assert r.status == 403


async def test_missing_or_forged_token_is_401_invalid_token(api: Api) -> None:
    status, body, response = await api.get("/api/v2/accounts", None)
    assert (status, body) == (401, {"error": "invalid_token"})
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    token = await api.token(1)
    payload, _, mac = token.partition(".")
    forged = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1] + "." + mac
    status, body, _ = await api.get("/api/v2/accounts", forged)
    assert (status, body) == (401, {"error": "invalid_token"})


async def test_tokens_expire_and_a_new_login_goes_on(api: Api) -> None:
    api.bank.token_ttl_seconds = 1
    token = await api.token(1)
    status, _, _ = await api.get("/api/v2/accounts", token)
    assert status == 200
    await asyncio.sleep(1.2)
    status, body, _ = await api.get("/api/v2/accounts", token)
    assert (status, body) == (401, {"error": "token_expired"})
    status, _, _ = await api.get("/api/v2/accounts", await api.token(1))
    assert status == 200


async def test_cursor_pages_collect_exactly_the_truth(api: Api) -> None:
    since = await api.today() - timedelta(days=60)
    token = await api.token(MANY_ACCOUNTS)
    truth = await api.truth(MANY_ACCOUNTS, since)
    assert len(truth["accounts"]) == 32
    pending = 0
    for account in truth["accounts"]:
        got = await api.transactions(token, account["id"], dateFrom=since.isoformat(), limit="37")
        expected = [
            expected_transaction(m, account["currency"])
            for m in reversed(truth["movements"][account["id"]])
        ]
        assert got == expected, account["id"]
        pending += sum(t["status"] == "PENDING" for t in got)
    assert pending > 0  # the comparison covered pending movements too


async def test_default_filter_is_90_days_and_limit_is_capped(api: Api) -> None:
    token = await api.token(MANY_ACCOUNTS)
    today = await api.today()
    truth = await api.truth(MANY_ACCOUNTS, today - timedelta(days=89))
    account = max(truth["accounts"], key=lambda a: len(truth["movements"][a["id"]]))
    path = f"/api/v2/accounts/{account['id']}/transactions"
    _, body, _ = await api.get(path, token, limit="1000")
    assert len(body["transactions"]) == 100 and body["next"]
    got = await api.transactions(token, account["id"])
    assert [t["id"] for t in got] == [m["ref"] for m in reversed(truth["movements"][account["id"]])]


async def test_bad_cursors_and_other_customers_accounts_are_refused(api: Api) -> None:
    token = await api.token(MANY_ACCOUNTS)
    truth = await api.truth(MANY_ACCOUNTS)
    first, second = truth["accounts"][0]["id"], truth["accounts"][1]["id"]
    path = f"/api/v2/accounts/{first}/transactions"
    _, body, _ = await api.get(path, token, limit="5")
    cursor = body["next"]
    status, again, _ = await api.get(path, token, cursor=cursor)
    assert status == 200 and again["transactions"] != body["transactions"]
    forged = cursor[:5] + ("x" if cursor[5] != "x" else "y") + cursor[6:]
    for bad_path, params in [
        (path, {"cursor": forged}),
        (path, {"cursor": "not-a-cursor"}),
        (path, {"cursor": cursor, "limit": "5"}),
        (f"/api/v2/accounts/{second}/transactions", {"cursor": cursor}),
    ]:
        status, refusal, _ = await api.get(bad_path, token, **params)
        assert status == 400 and refusal["error"] == "invalid_cursor", params
    other = (await api.truth(1))["accounts"][0]["id"]
    status, body, _ = await api.get(f"/api/v2/accounts/{other}/transactions", token)
    assert (status, body) == (404, {"error": "account_not_found"})
    status, body, _ = await api.get(path, token, dateFrom="01/02/2026")
    assert status == 400 and body["error"] == "invalid_request"


async def test_the_banks_own_rate_limit(api: Api) -> None:
    api.bank.client_rate_per_second = 10
    token = await api.token(1)
    answers = [await api.get("/api/v2/accounts", token) for _ in range(30)]
    statuses = [status for status, _, _ in answers]
    assert statuses[:15] == [200] * 15 and 429 in statuses
    _, body, response = next(a for a in answers if a[0] == 429)
    assert body == {"error": "rate_limited"}
    wait = int(response.headers["Retry-After"])
    assert wait >= 1
    await asyncio.sleep(wait)
    assert (await api.get("/api/v2/accounts", token))[0] == 200
    api.bank.client_rate_per_second = 0
    statuses = [(await api.get("/api/v2/accounts", token))[0] for _ in range(40)]
    assert statuses == [200] * 40


async def test_maintenance_is_503_json(api: Api) -> None:
    token = await api.token(1)
    await api.admin.update_bank_settings(BANK, maintenance_rate=1.0)
    status, body, _ = await api.get("/api/v2/accounts", token)
    assert status == 503 and body["error"] == "maintenance"
    async with api.http.post(f"{api.url}/oauth/token", data={"grant_type": "password"}) as r:
        assert r.status == 503
    await api.admin.update_bank_settings(BANK, maintenance_rate=0.0)
    assert (await api.get("/api/v2/accounts", token))[0] == 200


async def test_layout_2_is_the_v3_migration(api: Api) -> None:
    token = await api.token(MANY_ACCOUNTS)
    await api.admin.update_bank_settings(BANK, layout=2)
    status, body, response = await api.get("/api/v2/accounts", token)
    assert status == 200 and response.headers["X-Api-Version"] == "3"
    assert "accounts" not in body
    truth = await api.truth(MANY_ACCOUNTS)
    first = truth["accounts"][0]
    assert body["items"][0]["accountId"] == first["id"]
    assert body["items"][0]["balance"] == first["balance"]
    path = f"/api/v2/accounts/{first['id']}/transactions"
    status, page, _ = await api.get(path, token, limit="3")
    assert "transactions" not in page and page["nextCursor"]
    newest = truth["movements"][first["id"]][-1]
    item = page["items"][0]
    assert item["transactionId"] == newest["ref"]
    assert item["amount"] == newest["amount"] and item["currency"] == first["currency"]
    assert item["remittanceInformation"] == newest["description"]


async def test_a_pending_transaction_is_booked_later_with_the_same_id(api: Api) -> None:
    today = await api.today()
    customer, account, movement = None, None, None
    for n in range(1, 40):
        truth = await api.truth(n, today - timedelta(days=5))
        found = [
            (a, m) for a in truth["accounts"] for m in truth["movements"][a["id"]] if m["pending"]
        ]
        if len(found) >= 3:  # one in five is withdrawn instead: enough to keep one that posts
            customer, account = n, found[0][0]
            break
    assert customer is not None, "no pending movement among the first customers"
    waiting = [m for m in truth["movements"][account["id"]] if m["pending"]]
    token = await api.token(customer)
    since = (today - timedelta(days=5)).isoformat()
    before = {t["id"]: t for t in await api.transactions(token, account["id"], dateFrom=since)}
    assert all(before[m["ref"]]["status"] == "PENDING" for m in waiting)
    assert all(before[m["ref"]]["balanceAfter"] is None for m in waiting)
    await api.admin.advance(timedelta(days=3))
    after = {t["id"]: t for t in await api.transactions(token, account["id"], dateFrom=since)}
    later = await api.truth(customer, today - timedelta(days=5))
    still = {m["ref"] for m in later["movements"][account["id"]]}
    assert all(m["ref"] not in after for m in waiting if m["ref"] not in still)  # withdrawn
    movement = next(m for m in waiting if m["ref"] in still)
    booked = after[movement["ref"]]
    assert booked["status"] == "BOOKED" and booked["balanceAfter"] is not None
    assert booked["amount"] == before[movement["ref"]]["amount"]
    assert booked["description"] != movement["description"]
    truth = await api.truth(customer, today - timedelta(days=5))
    (now_truth,) = [m for m in truth["movements"][account["id"]] if m["ref"] == movement["ref"]]
    assert booked == expected_transaction(now_truth, account["currency"])


async def test_guard_answers_in_json_and_unknown_routes_are_json(api: Api) -> None:
    await api.admin.set_hostility(BANK, captcha_rate=1.0)
    status, body, _ = await api.get("/api/v2/accounts", None)
    assert status == 200 and body["message"] == "checkpoint_required"
    await api.admin.set_hostility(BANK, captcha_rate=0.0)
    status, body, _ = await api.get("/api/v2/nothing", None)
    assert (status, body) == (404, {"error": "not_found"})


async def test_default_latency_is_applied() -> None:
    bank = ApiBank(SandboxState(seed=0, admin_token="t"))
    async with serve(bank.app()) as url, aiohttp.ClientSession() as http:
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with http.get(f"{url}/api/v2/accounts") as r:
            assert r.status == 401
        assert loop.time() - started >= 0.08
