"""The form bank over HTTP: its own JavaScript cipher, CSRF, sessions, XLSX exports, defences."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import aiohttp
import pytest
from openpyxl import load_workbook

from scrapeflow.js import JsRuntime
from scrapeflow.sandbox import BankTruth, SandboxAdmin, serve
from scrapeflow.sandbox._site import SandboxState
from scrapeflow.sandbox.banks._formbank import HEADER, FormBank, decrypt_password

BANK, TOKEN = "formbank", "admin-secret"


@dataclass
class Bank:
    bank: FormBank
    url: str
    session: aiohttp.ClientSession
    admin: SandboxAdmin

    @property
    def world(self):
        return self.bank.state.world

    async def login(self, username: str, password: str) -> str:
        """Log in as a browser would: run the bank's script on the password. Final page HTML."""
        async with self.session.get(f"{self.url}/login") as r:
            page = await r.text()
        fields = dict(re.findall(r'name="(_csrf|execution|semilla)"[^>]*value="([^"]*)"', page))
        script_src = re.search(r'<script src="([^"]+)"', page).group(1)
        async with self.session.get(self.url + script_src) as r:
            runtime = JsRuntime(await r.text())
        form = {
            "usuario": username,
            "clave": "",
            "claveCifrada": runtime.call("encriptar", password, fields["semilla"]),
            "_csrf": fields["_csrf"],
            "execution": fields["execution"],
        }
        async with self.session.post(f"{self.url}/login", data=form) as r:
            return await r.text()

    async def get(self, path: str, **params: str) -> aiohttp.ClientResponse:
        response = await self.session.get(self.url + path, params=params)
        await response.read()
        return response

    async def truth(self, username: str, since: date | None = None) -> BankTruth:
        return await self.admin.truth(BANK, username, since=since)

    async def export(self, account_id: str, since: date, until: date) -> list[tuple]:
        page = await (await self.get(f"/cuenta/{account_id}")).text()
        token = re.search(r'name="token" value="([^"]+)"', page).group(1)
        response = await self.get(
            f"/cuenta/{account_id}/movimientos/exportar",
            token=token,
            fechaDesde=since.strftime("%d/%m/%Y"),
            fechaHasta=until.strftime("%d/%m/%Y"),
            formato="xlsx",
        )
        assert response.content_type.endswith("spreadsheetml.sheet")
        book = load_workbook(io.BytesIO(await response.read()), read_only=True)
        return list(book["Movimientos"].iter_rows(values_only=True))


@pytest.fixture
async def bank() -> AsyncIterator[Bank]:
    site = FormBank(SandboxState(seed=0, admin_token=TOKEN), latency_ms=(0, 0))
    jar = aiohttp.CookieJar(unsafe=True)  # cookies from an IP-address host
    async with (
        serve(site.app()) as url,
        aiohttp.ClientSession(cookie_jar=jar) as session,
        SandboxAdmin({BANK: url}, TOKEN) as admin,
    ):
        yield Bank(site, url, session, admin)


def spanish(text: str) -> Decimal:
    return Decimal(text.replace(".", "").replace(",", ".").replace("€", "").split()[0])


async def test_the_banks_javascript_encrypts_and_the_server_decrypts(bank: Bank) -> None:
    async with bank.session.get(f"{bank.url}/static/js/seguridad.min.js") as r:
        runtime = JsRuntime(await r.text())
    first = runtime.call("encriptar", "B8cJi9asa2", "a1b2c3d4e5f60718")
    second = runtime.call("encriptar", "B8cJi9asa2", "a1b2c3d4e5f60718")
    assert first != "B8cJi9asa2" and first.isdigit()
    assert decrypt_password(first, "a1b2c3d4e5f60718") == "B8cJi9asa2"
    assert decrypt_password(second, "a1b2c3d4e5f60718") == "B8cJi9asa2"
    assert decrypt_password(first, "ffffffffffffffff") != "B8cJi9asa2"


async def test_login_and_every_account_matches_the_ground_truth(bank: Bank) -> None:
    login = bank.world.login("formbank", 42)
    page = await bank.login(login.username, login.password)
    contracts = re.findall(r'href="/contrato/([^"]+)"', page)
    seen = []
    for contract in contracts:
        html = await (await bank.get(f"/contrato/{contract}")).text()
        for row in re.findall(r'<tr class="cuenta">(.*?)</tr>', html):
            number = re.search(r'class="(?:iban|numero)">([^<]+)', row).group(1).replace(" ", "")
            balance = spanish(re.search(r'class="saldo">([^<]+)', row).group(1))
            currency = re.search(r'class="divisa">([^<]+)', row).group(1)
            seen.append((number, balance, currency))
    truth = await bank.truth(login.username)
    expected = [
        ((a["iban"] or a["number"]).replace(" ", ""), Decimal(a["balance"]), a["currency"])
        for a in truth["accounts"]
    ]
    assert sorted(seen) == sorted(expected)
    assert len(seen) == len(bank.world.accounts("formbank", 42))


async def test_xlsx_export_holds_exactly_the_filtered_range(bank: Bank) -> None:
    login = bank.world.login("formbank", 42)
    await bank.login(login.username, login.password)
    today = bank.bank.state.clock.now().date()
    since, until = today - timedelta(days=20), today - timedelta(days=5)
    truth = await bank.truth(login.username, since)
    for account in truth["accounts"]:
        rows = await bank.export(account["id"], since, until)
        assert rows[3] == HEADER
        exported = [
            (
                r[6],
                r[0],
                r[1],
                r[2],
                spanish(r[3]),
                r[5] == "Pendiente",
                spanish(r[4]) if r[4] else None,
            )
            for r in rows[4:]
        ]
        expected = [
            (
                m["ref"],
                date.fromisoformat(m["operation_date"]).strftime("%d/%m/%Y"),
                date.fromisoformat(m["value_date"]).strftime("%d/%m/%Y"),
                m["description"],
                Decimal(m["amount"]),
                m["pending"],
                Decimal(m["balance_after"]) if m["balance_after"] else None,
            )
            for m in truth["movements"][account["id"]]
            if date.fromisoformat(m["operation_date"]) <= until
        ]
        assert sorted(exported) == sorted(expected)
        assert all(
            since <= date(int(r[0][6:]), int(r[0][3:5]), int(r[0][:2])) <= until for r in rows[4:]
        )


async def test_wrong_password_and_locked_user_get_the_banks_message(bank: Bank) -> None:
    login = bank.world.login("formbank", 42)
    page = await bank.login(login.username, "wrong-password")
    assert "Usuario o clave incorrectos." in page
    locked = bank.world.login("formbank", 13)
    assert locked.locked
    page = await bank.login(locked.username, locked.password)
    assert "Su acceso ha sido bloqueado" in page
    assert "/contrato/" not in page


async def test_plain_password_and_replayed_cipher_are_refused(bank: Bank) -> None:
    login = bank.world.login("formbank", 42)
    async with bank.session.get(f"{bank.url}/login") as r:
        page = await r.text()
    fields = dict(re.findall(r'name="(_csrf|execution|semilla)"[^>]*value="([^"]*)"', page))
    form = {"usuario": login.username, "clave": login.password, **fields}
    async with bank.session.post(f"{bank.url}/login", data=form) as r:
        assert "Error técnico" in await r.text()
    # The semilla was used up by that attempt: a cipher made with it no longer works.
    async with bank.session.get(f"{bank.url}/static/js/seguridad.min.js") as r:
        runtime = JsRuntime(await r.text())
    stale = {
        **fields,
        "usuario": login.username,
        "clave": "",
        "claveCifrada": runtime.call("encriptar", login.password, fields["semilla"]),
    }
    async with bank.session.post(f"{bank.url}/login", data=stale) as r:
        assert "/contrato/" not in await r.text()


async def test_pages_need_a_session_and_sessions_expire(bank: Bank) -> None:
    response = await bank.get("/posicion-global")
    assert response.url.path == "/login" and "caducada" in response.url.query_string
    assert "Su sesión ha caducado" in await response.text()

    login = bank.world.login("formbank", 42)
    await bank.login(login.username, login.password)
    await bank.admin.update_bank_settings(BANK, session_max_requests=5)
    # The landing page after login was the session's first request: four more, then it expires.
    for _ in range(4):
        assert (await bank.get("/posicion-global")).url.path == "/posicion-global"
    assert (await bank.get("/posicion-global")).url.path == "/login"


async def test_other_customers_accounts_are_not_shown(bank: Bank) -> None:
    login = bank.world.login("formbank", 42)
    await bank.login(login.username, login.password)
    assert (await bank.get("/cuenta/43-1")).status == 404


async def test_maintenance_and_changed_layout(bank: Bank) -> None:
    login = bank.world.login("formbank", 42)
    await bank.login(login.username, login.password)
    await bank.admin.update_bank_settings(BANK, layout=2)
    html = await (await bank.get("/posicion-global")).text()
    assert 'class="product-card"' in html and 'id="contratos"' not in html
    await bank.admin.update_bank_settings(BANK, maintenance_rate=1)
    response = await bank.get("/posicion-global")
    assert response.status == 503
    assert "mantenimiento" in await response.text()


async def test_many_failed_logins_block_the_ip(bank: Bank) -> None:
    bank.bank.settings.login_failures_per_ip = 3
    login = bank.world.login("formbank", 42)
    for _ in range(3):
        await bank.login(login.username, "nope")
    response = await bank.get("/login")
    assert response.status == 403
    assert "blocked" in await response.text()


async def test_admin_needs_the_token(bank: Bank) -> None:
    async with bank.session.get(f"{bank.url}/__admin/truth/00000042L") as r:
        assert r.status == 401
    body = await bank.admin.customer(BANK, 42)
    assert body["username"] == "00000042L" and body["locked"] is False
