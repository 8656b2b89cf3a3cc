"""The neobank over HTTP, driven by hand as a client of its docs would: PKCE, the push, the
consent, tokens, consent expiry on the sandbox clock, ETags, and its admin routes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from scrapeflow.sandbox import SandboxAdmin, serve
from scrapeflow.sandbox._site import SandboxState
from scrapeflow.sandbox._world import BANKS, World
from scrapeflow.sandbox.banks import NeoBank

BANK = "neobank"
REDIRECT = "https://client.example/callback"
VERIFIER = "v" * 50
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=")


@dataclass
class Neo:
    bank: NeoBank
    url: str
    http: aiohttp.ClientSession
    admin: SandboxAdmin

    async def login(self, n: int) -> str:
        """Authorize, log in as customer ``n``: the approval page's flow token."""
        cred = await self.admin.customer(BANK, n)
        params = {
            "response_type": "code",
            "client_id": "me",
            "redirect_uri": REDIRECT,
            "state": "s1",
            "code_challenge": CHALLENGE.decode(),
            "code_challenge_method": "S256",
        }
        async with self.http.get(f"{self.url}/oauth/authorize", params=params) as r:
            assert r.status == 200 and r.url.path == "/auth/login"
            flow = _hidden(await r.text())
        form = {"flow": flow, "username": cred["username"], "password": cred["password"]}
        async with self.http.post(f"{self.url}/auth/login", data=form) as r:
            assert r.status == 200 and r.url.path == "/auth/approve", await r.text()
            return r.url.query["flow"]

    async def status(self, flow: str) -> tuple[int, dict[str, Any]]:
        async with self.http.get(f"{self.url}/auth/approve/status", params={"flow": flow}) as r:
            return r.status, await r.json()

    async def code(self, n: int) -> str:
        """The whole flow, the push approved at once: the authorisation code."""
        flow = await self.login(n)
        status, body = await self.status(flow)
        assert (status, body["status"]) == (200, "approved"), body
        async with self.http.get(self.url + body["next"]) as r:
            consent = _hidden(await r.text())
        data = {"flow": consent, "decision": "allow"}
        async with self.http.post(
            f"{self.url}/auth/consent", data=data, allow_redirects=False
        ) as r:
            assert r.status == 302
            location = r.headers["Location"]
        assert location.startswith(REDIRECT + "?")
        query = parse_qs(urlsplit(location).query)
        assert query["state"] == ["s1"]
        return query["code"][0]

    async def token(self, **fields: str) -> tuple[int, dict[str, Any]]:
        async with self.http.post(f"{self.url}/oauth/token", data=fields) as r:
            return r.status, await r.json()

    async def tokens(self, n: int) -> dict[str, Any]:
        status, body = await self.token(
            grant_type="authorization_code",
            code=await self.code(n),
            code_verifier=VERIFIER,
            redirect_uri=REDIRECT,
            client_id="me",
        )
        assert status == 200, body
        return body

    async def api(self, path: str, token: str, etag: str = "") -> aiohttp.ClientResponse:
        headers = {"Authorization": f"Bearer {token}"}
        if etag:
            headers["If-None-Match"] = etag
        async with self.http.get(self.url + path, headers=headers) as r:
            await r.read()
            return r


def _hidden(page: str) -> str:
    found = re.search(r'name="flow" value="([^"]+)"', page)
    assert found, page[:300]
    return found.group(1)


@pytest.fixture
async def neo() -> AsyncIterator[Neo]:
    bank = NeoBank(SandboxState(seed=0, admin_token="t", customers=300), latency_ms=(0, 0))
    bank.approvals.settings.approve_after_seconds = 0  # the customer taps at once
    bank.approvals.settings.poll_interval_seconds = 0.01
    async with (
        serve(bank.app()) as url,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
        SandboxAdmin({BANK: url}, "t", session=http) as admin,
    ):
        yield Neo(bank, url, http, admin)


async def test_the_whole_flow_reads_what_the_truth_holds(neo: Neo) -> None:
    tokens = await neo.tokens(7)
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 300
    truth = await neo.admin.truth(BANK, (await neo.admin.customer(BANK, 7))["username"])
    accounts = await (await neo.api("/v1/accounts", tokens["access_token"])).json()
    cards = await (await neo.api("/v1/cards", tokens["access_token"])).json()
    got = {a["id"]: Decimal(a["balance"]["value"]) for a in accounts["accounts"] + cards["cards"]}
    assert got == {a["id"]: Decimal(a["balance"]) for a in truth["accounts"]}
    some = truth["accounts"][0]
    kind = "cards" if some["kind"] == "card" else "accounts"
    listing = await (
        await neo.api(
            f"/v1/{kind}/{some['id']}/transactions?from=2020-01-01", tokens["access_token"]
        )
    ).json()
    assert listing["pages"] >= 1
    assert {t["id"] for t in listing["transactions"]} <= {
        m["ref"] for m in truth["movements"][some["id"]]
    }


async def test_pkce_codes_are_single_use_and_bound_to_their_verifier(neo: Neo) -> None:
    code = await neo.code(1)
    fields = {"grant_type": "authorization_code", "redirect_uri": REDIRECT, "client_id": "me"}
    status, body = await neo.token(**fields, code=code, code_verifier="w" * 50)
    assert (status, body["error"]) == (400, "invalid_grant")
    assert "code_verifier" in body["error_description"]
    assert (await neo.token(**fields, code=code, code_verifier=VERIFIER))[0] == 200
    status, body = await neo.token(**fields, code=code, code_verifier=VERIFIER)
    assert (status, body["error_description"]) == (400, "code already used")
    status, body = await neo.token(grant_type="password", username="x", password="y")
    assert (status, body["error"]) == (400, "unsupported_grant_type")


async def test_a_push_waits_for_the_admin_and_polling_too_fast_is_slowed_down(neo: Neo) -> None:
    neo.bank.approvals.settings.approve_after_seconds = -1
    neo.bank.approvals.settings.poll_interval_seconds = 5
    flow = await neo.login(2)
    assert (await neo.status(flow))[1]["status"] == "pending"
    status, body = await neo.status(flow)
    assert (status, body) == (400, {"error": "slow_down", "interval": 5.0})
    [waiting] = await neo.admin.approvals()
    assert waiting["username"] == "neo000002" and 0 < waiting["expires_in"] <= 120
    assert await neo.admin.decide("neo000002", approve=False) == "rejected"
    neo.bank.approvals.settings.poll_interval_seconds = 0.01
    await asyncio.sleep(0.05)
    assert (await neo.status(flow))[1]["status"] == "rejected"
    with pytest.raises(Exception, match="404"):
        await neo.admin.decide("neo000002", approve=True)  # nothing waits any more


async def test_consent_ends_after_90_sandbox_days_for_the_api_and_the_refresh_token(
    neo: Neo,
) -> None:
    tokens = await neo.tokens(3)
    neo.bank.state.clock.advance(timedelta(days=89, hours=23))
    status, renewed = await neo.token(
        grant_type="refresh_token", refresh_token=tokens["refresh_token"]
    )
    assert status == 200 and renewed["consent_expires_at"] == tokens["consent_expires_at"]
    neo.bank.state.clock.advance(timedelta(hours=1))
    answer = await neo.api("/v1/accounts", renewed["access_token"])
    assert (answer.status, await answer.json()) == (403, {"error": "consent_expired"})
    status, body = await neo.token(
        grant_type="refresh_token", refresh_token=tokens["refresh_token"]
    )
    assert (status, body["error_description"]) == (400, "consent expired")


async def test_etags_answer_304_until_the_data_changes(neo: Neo) -> None:
    token = (await neo.tokens(4))["access_token"]
    first = await neo.api("/v1/accounts", token)
    etag = first.headers["ETag"]
    again = await neo.api("/v1/accounts", token, etag=etag)
    assert (again.status, again.headers["ETag"], again.content_length or 0) == (304, etag, 0)
    assert (await neo.api("/v1/accounts", token, etag='"other"')).status == 200
    neo.bank.state.clock.advance(timedelta(days=3))  # new movements, new balances
    changed = await neo.api("/v1/accounts", token, etag=etag)
    assert changed.status == 200 and changed.headers["ETag"] != etag


async def test_admin_routes_need_the_admin_token(neo: Neo) -> None:
    routes = [
        ("GET", "/__admin/approvals", None),
        ("POST", "/__admin/approvals/neo000001", {"decision": "approve"}),
        ("GET", "/__admin/approval", None),
        ("POST", "/__admin/approval", {"ttl_seconds": 1}),
    ]
    for method, path, body in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            async with neo.http.request(method, neo.url + path, json=body, headers=headers) as r:
                assert r.status == 401, (method, path)
    assert neo.bank.approvals.settings.ttl_seconds == 120
    with pytest.raises(Exception, match="400"):
        await neo.admin.approval_settings(ttl_seconds=0)


def test_only_the_neobank_posts_authorisations_for_another_amount() -> None:
    world = World(seed=0, customers=300)
    start = world.epoch
    changed: dict[str, int] = dict.fromkeys(BANKS, 0)
    for bank in BANKS:
        for n in range(1, 80):
            for account in world.accounts(bank, n):
                before = {m.ref: m for m in world.movements(account, start) if m.pending}
                after = world.movements(account, start + timedelta(days=5))
                for m in after:
                    if m.ref in before and not m.pending and m.amount != before[m.ref].amount:
                        assert Decimal("1.01") <= m.amount / before[m.ref].amount <= Decimal("1.16")
                        changed[bank] += 1
    assert changed["neobank"] > 0
    assert {bank: count for bank, count in changed.items() if bank != "neobank"} == {
        "formbank": 0,
        "apibank": 0,
        "legacybank": 0,
    }
