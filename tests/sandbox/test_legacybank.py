"""The legacy bank over HTTP: JSESSIONID, SMS codes, trusted devices, pages of HTML rows."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import aiohttp
import pytest
from yarl import URL

from scrapeflow.errors import SandboxAdminError
from scrapeflow.sandbox import BankTruth, CustomerLogin, SandboxAdmin, serve
from scrapeflow.sandbox._site import SandboxState
from scrapeflow.sandbox.banks import _legacybank as legacybank_module
from scrapeflow.sandbox.banks._base import es_amount, es_date
from scrapeflow.sandbox.banks._legacybank import LegacyBank

BANK = "legacybank"
LOCKED = next(n for n in range(1, 200) if n % 97 == 13)
OTP = next(n for n in range(1, 200) if n % 4 == 2 and n % 97 != 13)
OTHER_OTP = next(n for n in range(OTP + 1, 200) if n % 4 == 2 and n % 97 != 13)
MANY_ACCOUNTS = next(n for n in range(1, 200) if n % 50 == 7 and n % 4 != 2 and n % 97 != 13)
EXPIRED = "Su sesión ha caducado"

_ROW = re.compile(r'<tr class="fila( pendiente)?">(.*?)</tr>', re.S)
_CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
_TAGS = re.compile(r"<[^>]+>")
_NEXT = re.compile(r'<a class="siguiente" href="([^"]+)">Siguiente</a>')


def rows_of(page: str) -> list[tuple[str, ...]]:
    """The movement rows of a layout-1 page, as the cells' text."""
    return [
        tuple(_TAGS.sub("", html.unescape(cell)).strip() for cell in _CELL.findall(row))
        for _, row in _ROW.findall(page)
    ]


def expected_row(m: dict) -> tuple[str, ...]:
    return (
        es_date(date.fromisoformat(m["operation_date"])),
        es_date(date.fromisoformat(m["value_date"])),
        m["description"],
        es_amount(Decimal(m["amount"])),
        "Pendiente" if m["pending"] else es_amount(Decimal(m["balance_after"])),
        m["ref"],
    )


@dataclass
class Legacy:
    bank: LegacyBank
    url: str
    http: aiohttp.ClientSession
    admin: SandboxAdmin

    async def customer(self, n: int) -> CustomerLogin:
        return await self.admin.customer(BANK, n)

    async def otp(self, username: str) -> str:
        return await self.admin.otp(BANK, username)

    async def no_otp(self, username: str) -> None:
        """Assert that no code is pending for ``username``."""
        with pytest.raises(SandboxAdminError) as none:
            await self.otp(username)
        assert (none.value.status, none.value.detail) == (404, "no pending code")

    async def page(self, path: str, **params: str) -> tuple[str, str]:
        """(final path, HTML) of a GET, redirects followed."""
        async with self.http.get(self.url + path, params=params) as r:
            assert r.status == 200, r.status
            return r.url.path_qs, await r.text()

    async def login(self, n: int, *, password: str | None = None) -> tuple[str, str]:
        """Log in as customer ``n``: (final path, HTML)."""
        login = await self.customer(n)
        await self.page("/login.jsp")
        form = {"usuario": login["username"], "password": password or login["password"]}
        async with self.http.post(f"{self.url}/j_security_check", data=form) as r:
            assert r.status == 200
            return r.url.path_qs, await r.text()

    async def pass_otp(self, username: str) -> tuple[str, str]:
        code = await self.otp(username)
        async with self.http.post(f"{self.url}/otp.jsp", data={"codigo": code}) as r:
            return r.url.path_qs, await r.text()

    async def movements(
        self, n: int, account_id: str, since: date, *, relogin: list[int] | None = None
    ) -> list[tuple[str, ...]]:
        """Every row of an account from ``since``, page after page; logs in again if told to."""
        link = f"/movimientos.do?cuenta={account_id}&desde={es_date(since)}"
        rows: list[tuple[str, ...]] = []
        while True:
            where, page = await self.page(link)
            if where.startswith("/login.jsp"):
                assert relogin is not None, "the session expired"
                assert EXPIRED in page
                relogin.append(len(rows))
                await self.login(n)
                continue
            rows.extend(rows_of(page))
            following = _NEXT.search(page)
            if following is None:
                return rows
            link = html.unescape(following.group(1))

    async def truth(self, n: int, since: date | None = None) -> BankTruth:
        username = (await self.customer(n))["username"]
        return await self.admin.truth(BANK, username, since=since)

    async def today(self) -> date:
        return (await self.admin.now()).date()

    def cookie(self, name: str) -> str | None:
        morsel = next((c for c in self.http.cookie_jar if c.key == name), None)
        return None if morsel is None else morsel.value


def client() -> aiohttp.ClientSession:
    # Cookies from a bare IP address (127.0.0.1) need the unsafe jar.
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


@pytest.fixture
async def legacy() -> AsyncIterator[Legacy]:
    bank = LegacyBank(SandboxState(seed=0, admin_token="t"), latency_ms=(0, 0))
    async with serve(bank.app()) as url, client() as http, SandboxAdmin({BANK: url}, "t") as admin:
        yield Legacy(bank, url, http, admin)


async def test_login_shows_the_accounts_as_the_truth_has_them(legacy: Legacy) -> None:
    await legacy.page("/login.jsp")
    first_session = legacy.cookie("JSESSIONID")
    where, page = await legacy.login(1)
    assert where == "/inicio.do"
    assert legacy.cookie("JSESSIONID") not in (None, first_session)  # a new session on sign-in
    truth = await legacy.truth(1)
    found = re.findall(
        r'<tr class="filaCuenta"><td class="alias"><a href="/movimientos.do\?cuenta=([^"]+)">'
        r'([^<]+)</a></td><td class="numCuenta">([^<]+)</td><td class="saldo">([^<]+)</td>',
        page,
    )
    assert found == [
        (
            a["id"],
            a["alias"],
            " ".join(a["iban"][i : i + 4] for i in range(0, 24, 4)) if a["iban"] else a["number"],
            f"{es_amount(Decimal(a['balance']))} {a['currency']}",
        )
        for a in truth["accounts"]
    ]
    async with legacy.http.get(f"{legacy.url}/inicio.do") as r:
        assert r.charset == "iso-8859-1" and "Posición global" in await r.text()


async def test_wrong_credentials_and_locked_user_get_the_banks_message(legacy: Legacy) -> None:
    where, page = await legacy.login(1, password="wrong")
    assert where == "/j_security_check"
    assert '<div class="msgError">Usuario o contraseña incorrectos</div>' in page
    locked = await legacy.customer(LOCKED)
    assert locked["locked"]
    where, page = await legacy.login(LOCKED)
    assert where == "/j_security_check"
    assert "Su usuario está bloqueado. Contacte con su oficina." in page
    where, _ = await legacy.page("/inicio.do")
    assert where == "/login.jsp?caducada=1"


async def test_failed_logins_block_the_ip(legacy: Legacy) -> None:
    await legacy.admin.update_bank_settings(BANK, login_failures_per_ip=3)
    for _ in range(3):
        _, page = await legacy.login(1, password="wrong")
        assert "incorrectos" in page
    async with legacy.http.get(f"{legacy.url}/login.jsp") as r:
        assert r.status == 403


async def test_login_without_the_login_page_session_is_sent_back(legacy: Legacy) -> None:
    login = await legacy.customer(1)
    form = {"usuario": login["username"], "password": login["password"]}
    async with legacy.http.post(f"{legacy.url}/j_security_check", data=form) as r:
        assert r.url.path_qs == "/login.jsp?caducada=1"
        assert EXPIRED in await r.text()


async def test_two_factor_and_the_trusted_device(legacy: Legacy) -> None:
    login = await legacy.customer(OTP)
    assert login["otp_required"]
    await legacy.no_otp(login["username"])  # nothing sent yet
    where, page = await legacy.login(OTP)
    assert where == "/otp.jsp" and "código por SMS" in page
    code = await legacy.otp(login["username"])
    assert re.fullmatch(r"\d{6}", code)
    await legacy.page("/otp.jsp")  # a reload keeps the code
    assert await legacy.otp(login["username"]) == code
    where, _ = await legacy.page("/inicio.do")
    assert where == "/otp.jsp"  # no private page before the code
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    async with legacy.http.post(f"{legacy.url}/otp.jsp", data={"codigo": wrong}) as r:
        assert r.status == 200 and "Código incorrecto" in await r.text()
    assert legacy.cookie("DISPOSITIVO") is None
    where, page = await legacy.pass_otp(login["username"])
    assert where == "/inicio.do" and "tablaCuentas" in page
    device = legacy.cookie("DISPOSITIVO")
    assert device

    async with client() as trusted:
        again = Legacy(legacy.bank, legacy.url, trusted, legacy.admin)
        trusted.cookie_jar.update_cookies({"DISPOSITIVO": device}, URL(legacy.url))
        assert (await again.login(OTP))[0] == "/inicio.do"  # the trusted device skips the code
        assert (await again.login(OTHER_OTP))[0] == "/otp.jsp"  # but only for its customer
    async with client() as stranger:
        assert (await Legacy(legacy.bank, legacy.url, stranger, legacy.admin).login(OTP))[
            0
        ] == "/otp.jsp"

    await legacy.admin.advance(timedelta(days=91))  # 90 days of sandbox time
    await legacy.page("/logout.do")
    assert (await legacy.login(OTP))[0] == "/otp.jsp"


async def test_three_wrong_codes_end_the_session(legacy: Legacy) -> None:
    login = await legacy.customer(OTP)
    await legacy.login(OTP)
    code = await legacy.otp(login["username"])
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    for _ in range(3):
        async with legacy.http.post(f"{legacy.url}/otp.jsp", data={"codigo": wrong}) as r:
            text = await r.text()
    assert r.url.path_qs == "/login.jsp?otp=1"
    assert "número de intentos" in text
    async with legacy.http.post(f"{legacy.url}/otp.jsp", data={"codigo": code}) as r:
        assert r.url.path_qs == "/login.jsp?caducada=1"


async def test_pages_collect_exactly_the_truth(legacy: Legacy) -> None:
    since = await legacy.today() - timedelta(days=40)
    assert (await legacy.login(MANY_ACCOUNTS))[0] == "/inicio.do"
    truth = await legacy.truth(MANY_ACCOUNTS, since)
    assert len(truth["accounts"]) == 32
    pending = 0
    for account in truth["accounts"]:
        rows = await legacy.movements(MANY_ACCOUNTS, account["id"], since)
        expected = [expected_row(m) for m in reversed(truth["movements"][account["id"]])]
        assert rows == expected, account["id"]
        pending += sum(row[4] == "Pendiente" for row in rows)
    assert pending > 0


async def test_the_session_expires_mid_scrape(legacy: Legacy) -> None:
    since = await legacy.today() - timedelta(days=119)
    await legacy.admin.update_bank_settings(BANK, session_max_requests=3)
    await legacy.login(MANY_ACCOUNTS)
    truth = await legacy.truth(MANY_ACCOUNTS, since)
    account = max(truth["accounts"], key=lambda a: len(truth["movements"][a["id"]]))
    assert len(truth["movements"][account["id"]]) > 5 * 25
    _, first = await legacy.page("/movimientos.do", cuenta=account["id"], desde=es_date(since))
    assert re.search(r"Página 1 de (\d+)", first).group(1) == str(
        -(-len(truth["movements"][account["id"]]) // 25)
    )
    relogins: list[int] = []
    rows = await legacy.movements(MANY_ACCOUNTS, account["id"], since, relogin=relogins)
    assert len(relogins) >= 2  # expired more than once, each time midway
    assert rows == [expected_row(m) for m in reversed(truth["movements"][account["id"]])]


async def test_bad_queries_get_the_banks_message(legacy: Legacy) -> None:
    await legacy.login(MANY_ACCOUNTS)
    own = (await legacy.truth(MANY_ACCOUNTS))["accounts"][0]["id"]
    other = (await legacy.truth(1))["accounts"][0]["id"]
    for params in [
        {"cuenta": own, "desde": "2026-02-01"},
        {"cuenta": own, "desde": "31/02/2026"},
        {"cuenta": own, "desde": "10/02/2026", "hasta": "01/02/2026"},
        {"cuenta": own, "pagina": "999"},
        {"cuenta": other},
    ]:
        where, page = await legacy.page("/movimientos.do", **params)
        assert where.startswith("/movimientos.do") and 'class="msgError"' in page, params
        assert not rows_of(page)


async def test_logout_ends_the_session(legacy: Legacy) -> None:
    await legacy.login(1)
    where, page = await legacy.page("/logout.do")
    assert where == "/login.jsp?salir=1" and "Ha cerrado su sesión" in page
    where, page = await legacy.page("/inicio.do")
    assert where == "/login.jsp?caducada=1" and EXPIRED in page


async def test_maintenance_page_is_503(legacy: Legacy) -> None:
    await legacy.login(1)
    await legacy.admin.update_bank_settings(BANK, maintenance_rate=1.0)
    for path in ("/inicio.do", "/login.jsp"):
        async with legacy.http.get(legacy.url + path) as r:
            assert r.status == 503
            assert "Servicio temporalmente no disponible por mantenimiento" in await r.text()
    await legacy.admin.update_bank_settings(BANK, maintenance_rate=0.0)
    assert (await legacy.page("/inicio.do"))[0] == "/inicio.do"


async def test_layout_2_breaks_old_parsers(legacy: Legacy) -> None:
    await legacy.login(MANY_ACCOUNTS)
    truth = await legacy.truth(MANY_ACCOUNTS)
    account = truth["accounts"][0]
    _, before = await legacy.page("/movimientos.do", cuenta=account["id"])
    assert rows_of(before)
    await legacy.admin.update_bank_settings(BANK, layout=2)
    _, home = await legacy.page("/inicio.do")
    assert "filaCuenta" not in home and f'data-id="{account["id"]}"' in home
    _, after = await legacy.page("/movimientos.do", cuenta=account["id"])
    assert not rows_of(after) and _NEXT.search(after) is None
    refs = re.findall(r'<div class="mov-item" data-ref="([^"]+)"', after)
    assert refs and refs == [row[5] for row in rows_of(before)]


async def test_a_pending_movement_is_booked_later_with_the_same_ref(legacy: Legacy) -> None:
    today = await legacy.today()
    since = today - timedelta(days=5)
    customer, account, movement = None, None, None
    for n in range(1, 60):
        if n % 4 == 2 or n % 97 == 13:
            continue
        truth = await legacy.truth(n, since)
        found = [
            (a, m) for a in truth["accounts"] for m in truth["movements"][a["id"]] if m["pending"]
        ]
        if len(found) >= 3:  # one in five is withdrawn instead: enough to keep one that posts
            customer, account = n, found[0][0]
            break
    assert customer is not None, "no pending movement among the first customers"
    waiting = [m for m in truth["movements"][account["id"]] if m["pending"]]
    await legacy.login(customer)
    before = {row[5]: row for row in await legacy.movements(customer, account["id"], since)}
    assert all(before[m["ref"]][4] == "Pendiente" for m in waiting)
    await legacy.admin.advance(timedelta(days=3))
    after = {row[5]: row for row in await legacy.movements(customer, account["id"], since)}
    later = {m["ref"] for m in (await legacy.truth(customer, since))["movements"][account["id"]]}
    assert all(m["ref"] not in after for m in waiting if m["ref"] not in later)  # withdrawn
    movement = next(m for m in waiting if m["ref"] in later)
    booked = after[movement["ref"]]
    assert booked[4] != "Pendiente" and booked[3] == before[movement["ref"]][3]
    assert booked[2] != movement["description"]
    truth = await legacy.truth(customer, since)
    (now_truth,) = [m for m in truth["movements"][account["id"]] if m["ref"] == movement["ref"]]
    assert booked == expected_row(now_truth)


async def test_an_expired_code_is_replaced(legacy: Legacy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(legacybank_module, "OTP_SECONDS", 0.3)
    login = await legacy.customer(OTP)
    assert (await legacy.login(OTP))[0] == "/otp.jsp"
    code = await legacy.otp(login["username"])
    await asyncio.sleep(0.4)
    await legacy.no_otp(login["username"])  # no live code any more
    async with legacy.http.post(f"{legacy.url}/otp.jsp", data={"codigo": code}) as r:
        assert r.url.path_qs == "/otp.jsp" and "ha caducado" in await r.text()
    assert (await legacy.pass_otp(login["username"]))[0] == "/inicio.do"


async def test_the_pending_login_waits_for_the_code_within_the_idle_time(legacy: Legacy) -> None:
    await legacy.admin.update_bank_settings(BANK, session_idle_seconds=1.0)
    login = await legacy.customer(OTP)
    await legacy.login(OTP)
    await asyncio.sleep(0.6)  # a human reading the SMS
    assert (await legacy.pass_otp(login["username"]))[0] == "/inicio.do"
    await legacy.page("/logout.do")
    legacy.http.cookie_jar.clear()
    await legacy.login(OTP)
    await asyncio.sleep(1.2)  # too long: the login session is gone, and so is its code
    await legacy.no_otp(login["username"])
    async with legacy.http.post(f"{legacy.url}/otp.jsp", data={"codigo": "000000"}) as r:
        assert r.url.path_qs == "/login.jsp?caducada=1"
