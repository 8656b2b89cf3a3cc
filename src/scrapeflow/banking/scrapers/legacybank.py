"""Banco Legado (``legacybank``): a J2EE-era site of server-side sessions and HTML tables.

The flow, page by page (HTML in ISO-8859-1, amounts ``1.234,56``, dates ``dd/mm/aaaa``):

* ``GET /login.jsp`` (a ``JSESSIONID``), ``POST /j_security_check``: lands on ``/inicio.do``, on
  ``/otp.jsp`` when the bank wants an SMS code, or on the login form again with the bank's
  message in ``div.msgError`` (wrong credentials, locked user).
* Two-factor: ``/otp.jsp`` makes the code. Without a code from the customer the scrape ends with
  ``TWO_FACTOR_REQUIRED`` and keeps the pending ``JSESSIONID`` in ``context.state["pending"]``;
  the next run, with ``context.otp``, posts the code to that session (or to a fresh login when
  the session is gone). The right code gives a ``DISPOSITIVO`` cookie (a trusted device for 90
  days), kept in ``context.state["cookies"]`` so later logins skip the code.
* ``/inicio.do``: per contract an ``h3.contrato`` "Name (id)" and a ``table.tablaCuentas``.
* ``/movimientos.do?cuenta=&desde=&pagina=``: 25 rows a page, "Página N de M".

Private pages are fetched without following redirects: a 302 to ``/login.jsp`` means the
session ended (:class:`~scrapeflow.errors.SessionExpired`, the base class logs in again), and
not following it keeps a late redirect from opening (and so ending) a login session meanwhile.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import NoReturn

import yarl
from selectolax.lexbor import LexborHTMLParser, LexborNode

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
    parse_es_amount,
    parse_es_date,
)
from scrapeflow.errors import SessionExpired
from scrapeflow.http import Response

__all__ = ["LegacyBankScraper"]

_SESSION_COOKIE = "JSESSIONID"
_DEVICE_COOKIE = "DISPOSITIVO"
_CONTRACT = re.compile(r"^(?P<name>.*?)\s*\((?P<ref>[^()]+)\)\s*$")
_PAGES = re.compile(r"P\w+gina\s+(?P<page>\d+)\s+de\s+(?P<pages>\d+)")
_PERIOD = re.compile(r"(?P<since>\d{2}/\d{2}/\d{4})\D+(?P<until>\d{2}/\d{2}/\d{4})")
_CURRENCY = re.compile(r"\b([A-Z]{3})\s*$")
_ACCOUNT_ID = re.compile(r"[?&]cuenta=([^&#]+)")


def _text(node: LexborNode | None) -> str:
    return "" if node is None else " ".join((node.text(deep=True) or "").split())


def _message(page: LexborHTMLParser, selector: str) -> str:
    return _text(page.css_first(selector))


def _account_type(alias: str, iban: str | None) -> AccountType:
    """The bank shows the kind only in the alias ("Cuenta corriente EUR", "Tarjeta Visa …")."""
    lowered = alias.lower()
    if "tarjeta" in lowered:
        return AccountType.CARD
    if "ahorro" in lowered:
        return AccountType.SAVINGS
    if "corriente" in lowered:
        return AccountType.CHECKING
    return AccountType.CARD if iban is None else AccountType.OTHER


class LegacyBankScraper(BasicScraper):
    """Banco Legado: session cookies, SMS codes with a trusted device, paginated tables."""

    bank = "legacybank"
    title = "Banco Legado"
    country = "ES"
    encoding = "iso-8859-1"
    """The pages' charset when ``Content-Type`` names none (:meth:`BasicScraper.text`)."""

    def __init__(self, context: ScrapeContext) -> None:
        super().__init__(context)
        self._home: str | None = None
        self._accounts: dict[str, list[AccountRecord]] = {}
        self._otp_posted = False

    # -- login ---------------------------------------------------------------------------------

    async def login(self) -> None:
        state = self.context.state
        saved = state.get("cookies")
        if isinstance(saved, dict):
            self.set_cookies({str(k): str(v) for k, v in saved.items()})
        pending = state.get("pending")
        notice = ""
        if self.context.otp and not self._otp_posted and isinstance(pending, dict):
            self.set_cookies({str(k): str(v) for k, v in pending.items()})
            response = await self._post_code()
            if self._path(response) != "/login.jsp":
                await self._after_code(response)
                return
            state.pop("pending", None)
            if "otp" in yarl.URL(response.url).query:  # too many wrong codes: a new one is due
                notice = _message(LexborHTMLParser(self.text(response)), "div.msgAviso")
            else:  # the pending session is gone, and its code with it: the new login gets a
                # new code. Posting the old one there would only burn one of three attempts.
                self._otp_posted = True
                notice = "the code was for a login that has ended; the bank sent a new code"
        await self.get("/login.jsp")
        response = await self.post(
            "/j_security_check",
            data={"usuario": self.context.login, "password": self.password()},
        )
        path = self._path(response)
        if path == "/inicio.do":
            self._signed_in(response)
            return
        if path == "/otp.jsp":
            if self.context.otp and not self._otp_posted:
                await self._after_code(await self._post_code())
                return
            self._await_code(notice or "the bank sent a one-time code by SMS")
        page = LexborHTMLParser(self.text(response))
        error = _message(page, "div.msgError")
        warning = _message(page, "div.msgAviso")
        lowered = error.lower()
        if "bloquead" in lowered:
            self.fail(ResultCode.USER_LOCKED, error)
        if "incorrect" in lowered:
            self.fail(ResultCode.WRONG_CREDENTIALS, error)
        if page.css_first("form[name=loginForm]") is None and not error and not warning:
            self.site_changed(f"the login answered an unknown page at {path}")
        self.fail(ResultCode.UNKNOWN, error or warning or f"the login ended at {path}")

    async def _post_code(self) -> Response:
        """Send the customer's one-time code to the session waiting for it, again while the
        bank is down for a moment; counted as sent once the bank has answered it (a login
        started over after a failure here sends it to the pending session again)."""
        code = (self.context.otp or "").strip()
        response = await self.again_while_down(lambda: self.post("/otp.jsp", data={"codigo": code}))
        self._otp_posted = True
        return response

    async def _after_code(self, response: Response) -> None:
        """Where posting the code led: signed in, the code refused, or the login ended."""
        path = self._path(response)
        if path == "/inicio.do":
            self.context.state.pop("pending", None)
            self._signed_in(response)
            return
        page = LexborHTMLParser(self.text(response))
        if path == "/otp.jsp":  # a wrong or expired code: the customer must send a new one
            self._await_code(_message(page, "div.msgError") or "the bank refused the code")
        if path == "/login.jsp":
            self.context.state.pop("pending", None)
            self.fail(
                ResultCode.TWO_FACTOR_REQUIRED,
                _message(page, "div.msgAviso") or "the bank ended the login after the code",
            )
        self.site_changed(f"the one-time code answered an unknown page at {path}")

    def _await_code(self, detail: str) -> NoReturn:
        """Keep the session waiting for a code, and end the run asking the customer for one."""
        session = self.cookies(_SESSION_COOKIE)
        if session:
            self.context.state["pending"] = session
        else:
            self.context.state.pop("pending", None)
        self.fail(ResultCode.TWO_FACTOR_REQUIRED, detail)

    def _signed_in(self, response: Response) -> None:
        """Remember the trusted device and the home page the login landed on."""
        device = self.cookies(_DEVICE_COOKIE)
        if device:
            cookies = self.context.state.get("cookies")
            if not isinstance(cookies, dict):
                cookies = self.context.state["cookies"] = {}
            cookies.update(device)
        self._home = self.text(response) if response.status == 200 else None

    def _path(self, response: Response) -> str:
        return yarl.URL(response.url).path

    async def logout(self) -> None:
        await self.get("/logout.do", allow_redirects=False, expect=(200, 302))

    # -- private pages -------------------------------------------------------------------------

    async def _private(self, path: str, **params: str) -> LexborHTMLParser:
        """A private page; a redirect to the login page is the end of the session."""
        response = await self.get(
            path, params=params or None, allow_redirects=False, expect=(200, 302, 303)
        )
        if response.status != 200:
            # The path only: a Location may carry a ;jsessionid= or a query.
            where = yarl.URL(response.headers.get("Location", "")).path.split(";")[0]
            raise SessionExpired(f"{path} redirected to {where or 'nowhere'}")
        return LexborHTMLParser(self.text(response))

    async def contracts(self) -> Sequence[ContractInfo]:
        if self._home is not None:
            page = LexborHTMLParser(self._home)
            self._home = None
        else:
            page = await self._private("/inicio.do")
        titles = page.css("h3.contrato")
        tables = page.css("table.tablaCuentas")
        if not tables or len(titles) != len(tables):
            self.site_changed("the home page has no contracts table (h3.contrato, tablaCuentas)")
        contracts: list[ContractInfo] = []
        for title, table in zip(titles, tables, strict=True):
            match = _CONTRACT.match(_text(title))
            if match is None:
                self.site_changed(f"a contract title without its id: {_text(title)[:60]!r}")
            contract = ContractInfo(bank_ref=match["ref"].strip(), name=match["name"])
            self._accounts[contract.bank_ref] = [
                self._account(row, contract) for row in table.css("tr.filaCuenta")
            ]
            contracts.append(contract)
        return contracts

    def _account(self, row: LexborNode, contract: ContractInfo) -> AccountRecord:
        link = row.css_first("td.alias a")
        href = "" if link is None else str(link.attributes.get("href") or "")
        found = _ACCOUNT_ID.search(href)
        number_cell = _text(row.css_first("td.numCuenta"))
        balance_cell = _text(row.css_first("td.saldo"))
        currency = _CURRENCY.search(balance_cell)
        if found is None or not number_cell or currency is None:
            self.site_changed(f"an account row without link, number or currency: {href!r}")
        alias = _text(link)
        shown = compact(number_cell)
        iban = shown if shown[:2].isalpha() and shown[2:4].isdigit() else None
        return AccountRecord(
            bank_ref=found[1],
            type=_account_type(alias, iban),
            currency=currency[1],
            balance=parse_es_amount(balance_cell),
            iban=iban,
            number=iban[4:] if iban else number_cell,
            alias=alias,
            contract_ref=contract.bank_ref,
            contract_name=contract.name,
        )

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        if contract.bank_ref not in self._accounts:
            await self.contracts()
        return self._accounts.get(contract.bank_ref, [])

    # -- movements -----------------------------------------------------------------------------

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        query = {"cuenta": account.bank_ref, "desde": since.strftime("%d/%m/%Y")}
        first = await self._movements_page(query)
        pages = self._pages(first)
        period = _PERIOD.search(_message(first, "p.periodo"))
        if period is not None:  # the same range on every page, even if the day turns meanwhile
            query["hasta"] = period["until"]
        rest = await asyncio.gather(
            *(self._movements_page(query | {"pagina": str(n)}) for n in range(2, pages + 1))
        )
        # A movement booked meanwhile shifts the rows: one may show on two pages (a pending
        # one posted between them, too). One Nº operación is one movement: the later read wins.
        found: dict[str, MovementRecord] = {}
        for page in (first, *rest):
            for row in page.css("table.tablaMovimientos tr.fila"):
                movement = self._movement(row)
                found[movement.key] = movement
        return list(found.values())

    async def _movements_page(self, query: dict[str, str]) -> LexborHTMLParser:
        page = await self._private("/movimientos.do", **query)
        if page.css_first("table.tablaMovimientos") is None:
            error = _message(page, "div.msgError")
            self.site_changed(
                f"the movements of {query['cuenta']}: "
                + (error or "no table.tablaMovimientos on the page")
            )
        return page

    def _pages(self, page: LexborHTMLParser) -> int:
        pager = _PAGES.search(_message(page, "div.paginacion"))
        if pager is None:
            self.site_changed("the movements page has no 'Página N de M'")
        return int(pager["pages"])

    def _movement(self, row: LexborNode) -> MovementRecord:
        dates = [_text(cell) for cell in row.css("td.fecha")]
        reference = _text(row.css_first("td.numOperacion"))
        balance = _text(row.css_first("td.saldo"))
        if len(dates) != 2 or not reference:
            self.site_changed("a movement row without its two dates or its Nº operación")
        pending = "pendiente" in str(row.attributes.get("class") or "").split()
        pending = pending or balance.lower() == "pendiente"
        return MovementRecord(
            key=movement_key(reference=reference),
            operation_date=parse_es_date(dates[0]),
            value_date=parse_es_date(dates[1]),
            amount=parse_es_amount(_text(row.css_first("td.importe"))),
            description=_concept(row.css_first("td.concepto")),
            pending=pending,
            balance_after=None if pending else _balance(balance),
        )


def _concept(node: LexborNode | None) -> str:
    """A movement's description as the bank wrote it, spaces included (``PAGO PENDIENTE `` and
    a merchant cut at 12 letters may end in one); only line breaks and tabs around it, the
    page's layout, are not the bank's words."""
    return "" if node is None else (node.text(deep=True) or "").strip("\r\n\t")


def _balance(text: str) -> Decimal | None:
    return parse_es_amount(text) if text else None
