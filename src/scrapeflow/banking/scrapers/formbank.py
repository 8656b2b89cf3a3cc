"""Banco Formulario (``formbank``): HTML forms, a browser-encrypted password, an XLSX export.

The flow, as a browser walks it:

1. ``GET /login`` sets the ``SESION`` cookie and carries hidden fields ``_csrf``, ``execution``
   and ``semilla`` (a per-attempt key). The password is encrypted by the bank's own script
   (``/static/js/seguridad.min.js``, ``encriptar(clave, semilla)``), which we run on an embedded
   V8 (:class:`scrapeflow.js.JsRuntime`) instead of reimplementing it. ``POST /login`` sends
   ``usuario``, an empty ``clave``, ``claveCifrada``, ``_csrf`` and ``execution``; success is a
   302 to ``/posicion-global``, a refusal a 200 login page with the bank's ``#mensajeError``.
2. ``/posicion-global`` lists the contracts (``table#contratos``, links ``/contrato/{id}``);
   ``/contrato/{id}`` lists its accounts (``table#cuentas``, one ``tr.cuenta`` each).
3. ``/cuenta/{id}`` carries the export form ``#exportar`` whose hidden ``token`` is bound to the
   session and the account; ``/cuenta/{id}/movimientos/exportar?token=..&fechaDesde=dd/mm/aaaa``
   answers an XLSX (sheet ``Movimientos``) of at most 366 days, newest first.

Sessions end (idle time, or a cap on requests): a private page then answers 302 to
``/login?caducada=1`` and we raise :class:`SessionExpired` so the base class logs in again; the
export token is fetched inside :meth:`FormBankScraper.movements` so a retry gets a fresh one.
Once the bank has ended a session during a run, private pages are read one at a time (a
session capped at a few requests would otherwise be spent by parallel page loads before any
account finished its two-request read). Layout 2 (cards instead of tables) is not supported:
it ends in ``SITE_CHANGED``.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar
from urllib.parse import unquote

import yarl
from python_calamine import CalamineWorkbook
from selectolax.lexbor import LexborHTMLParser, LexborNode

from scrapeflow.banking import (
    AccountRecord,
    AccountType,
    BasicScraper,
    ContractInfo,
    MovementRecord,
    ResultCode,
    compact,
    movement_key,
    parse_es_amount,
    parse_es_date,
)
from scrapeflow.errors import AccessFailed, SessionExpired
from scrapeflow.http import Response
from scrapeflow.js import JsRuntime, shared_runtime

__all__ = ["FormBankScraper"]

_SCRIPT = "/static/js/seguridad.min.js"
_XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
_MAX_RANGE_DAYS = 366
_HEADER = (
    "Fecha operación",
    "Fecha valor",
    "Concepto",
    "Importe",
    "Saldo",
    "Estado",
    "Referencia",
)
_REDIRECTS = (301, 302, 303, 307, 308)
_INVALID_SESSION = "sesión no es válida"
_EXPORT_REFUSED = "operación no permitida"
_KINDS = (  # td.tipo, lowercased, by the word that tells the kind
    ("tarjeta", AccountType.CARD),
    ("ahorro", AccountType.SAVINGS),
    ("corriente", AccountType.CHECKING),
    ("préstamo", AccountType.LOAN),
)


class FormBankScraper(BasicScraper):
    """Scraper of the form bank; see the module's documentation for the flow."""

    bank = "formbank"
    title = "Banco Formulario"
    country = "ES"
    relogins = 20
    """Sessions there may be capped at a few requests: a long scrape logs in many times."""
    parallel_pages: ClassVar[int] = 16
    """Contract and account reads in flight at once while the session holds."""
    login_session_retries: ClassVar[int] = 2
    """Fresh login forms tried when the bank says the form's session is not valid."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._runtime: JsRuntime | None = None
        self._parallel = asyncio.Semaphore(self.parallel_pages)
        self._serial = asyncio.Lock()
        self._careful = False  # set once the bank ended a session: one page at a time

    # -- login -------------------------------------------------------------------------------

    async def login(self) -> None:
        if self._careful:
            async with self._serial:  # no page load of another task disturbs the login form
                await self._login()
        else:
            await self._login()

    async def _login(self) -> None:
        # The script and the form at once: one round trip less before the login.
        runtime, form = await asyncio.gather(self._js(), self.get("/login"))
        message = ""
        for attempt in range(1 + self.login_session_retries):
            if attempt:
                form = await self.get("/login")
            page = LexborHTMLParser(self.text(form))
            fields = {name: _hidden(page, name) for name in ("_csrf", "execution", "semilla")}
            cipher = runtime.call("encriptar", self.password(), fields["semilla"])
            if not isinstance(cipher, str):
                self.site_changed("encriptar() did not return a string")
            response = await self.post(
                "/login",
                data={
                    "usuario": self.context.login,
                    "clave": "",
                    "claveCifrada": cipher,
                    "_csrf": fields["_csrf"],
                    "execution": fields["execution"],
                },
                allow_redirects=False,
                expect=(200, *_REDIRECTS),
            )
            if response.status in _REDIRECTS:
                target = _location_path(response)
                if target == "/posicion-global":
                    self.log.info("logged in")
                    return
                self.fail(ResultCode.UNKNOWN, f"the login sent us to {target or '?'}")
            message = _error_message(LexborHTMLParser(self.text(response)))
            lowered = message.lower()
            if "incorrect" in lowered:
                self.fail(ResultCode.WRONG_CREDENTIALS, message)
            if "bloquead" in lowered:
                self.fail(ResultCode.USER_LOCKED, message)
            if _INVALID_SESSION not in lowered:
                break
            # The form's session ended before we posted it (another task's stale request used it
            # up, or its cookie was replaced): a new form, a new semilla. No failed login counted.
            self.log.info("login form session not valid, retrying")
        self.fail(ResultCode.UNKNOWN, message or "the login page came back without a message")

    async def _js(self) -> JsRuntime:
        """The bank's encryption script on V8: fetched once per scraper (the bank's script of
        the day), compiled once per event loop for every scraper that fetched the same text
        (a V8 context costs about 5 ms of CPU; ``encriptar`` keeps nothing between calls)."""
        if self._runtime is None:
            script = self.text(await self.get(_SCRIPT))
            if "encriptar" not in script:
                self.site_changed(f"{_SCRIPT} no longer defines encriptar()")
            self._runtime = shared_runtime(script)
        return self._runtime

    async def logout(self) -> None:
        await self.get("/logout", allow_redirects=False, expect=(200, *_REDIRECTS))

    # -- contracts and accounts --------------------------------------------------------------

    async def contracts(self) -> Sequence[ContractInfo]:
        async with self._slot():
            page = await self._page("/posicion-global")
        table = page.css_first("table#contratos")
        if table is None:
            self.site_changed("/posicion-global has no table#contratos")
        contracts: dict[str, ContractInfo] = {}
        for link in table.css("a[href]"):
            ref = _id_after(link, "/contrato/")
            if ref is not None and ref not in contracts:
                name = link.text(strip=True)
                contracts[ref] = ContractInfo(bank_ref=ref, name=name, link=f"/contrato/{ref}")
        return list(contracts.values())

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        path = contract.link or f"/contrato/{contract.bank_ref}"
        async with self._slot():
            page = await self._page(path)
        table = page.css_first("table#cuentas")
        if table is None:
            self.site_changed(f"{path} has no table#cuentas")
        return [self._account(row, contract) for row in table.css("tr.cuenta")]

    def _account(self, row: LexborNode, contract: ContractInfo) -> AccountRecord:
        ref = next(
            (r for a in row.css("a[href]") if (r := _id_after(a, "/cuenta/")) is not None), None
        )
        if ref is None:
            self.site_changed(f"an account of contract {contract.bank_ref} has no /cuenta/ link")
        iban_text = _cell(row, "td.iban")
        number_text = _cell(row, "td.numero")
        iban = compact(iban_text) if iban_text else None
        if iban:
            number: str | None = iban[4:]  # the domestic account number (BBAN, the Spanish CCC)
        else:
            iban, number = None, number_text or None
        saldo, divisa, tipo = _cell(row, "td.saldo"), _cell(row, "td.divisa"), _cell(row, "td.tipo")
        if not saldo or not divisa:
            self.site_changed(f"account {ref} has no td.saldo or td.divisa")
        return AccountRecord(
            bank_ref=ref,
            type=_account_type(tipo),
            currency=divisa.upper(),
            balance=parse_es_amount(saldo),
            iban=iban,
            number=number,
            alias=_cell(row, "td.alias"),
            contract_ref=contract.bank_ref,
            contract_name=contract.name,
        )

    # -- movements ---------------------------------------------------------------------------

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        today = self.context.today
        since = min(since, today)
        found: dict[str, MovementRecord] = {}
        async with self._slot():
            # The token is bound to this session: read it anew on every (re)try of the step.
            page = await self._page(f"/cuenta/{account.bank_ref}")
            token_input = page.css_first('form#exportar input[name="token"]')
            token = token_input.attributes.get("value") if token_input is not None else None
            if not token:
                self.site_changed(f"/cuenta/{account.bank_ref} has no export token")
            start = since
            while True:
                params = {"token": token, "fechaDesde": start.strftime("%d/%m/%Y")}
                end: date | None = None
                if (today - start).days > _MAX_RANGE_DAYS:
                    end = start + timedelta(days=_MAX_RANGE_DAYS)
                    params["fechaHasta"] = end.strftime("%d/%m/%Y")
                for record in await self._export(account.bank_ref, params):
                    found.setdefault(record.key, record)
                if end is None:
                    break
                start = end + timedelta(days=1)
        return list(found.values())

    async def _export(self, ref: str, params: dict[str, str]) -> list[MovementRecord]:
        path = f"/cuenta/{ref}/movimientos/exportar"
        response = await self._private(path, params=params)
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type == _XLSX_TYPE or response.body[:2] == b"PK":
            rows = await asyncio.to_thread(_read_xlsx, response.body)
            return [_movement(row) for row in rows]
        message = _error_message(LexborHTMLParser(self.text(response)))
        if _EXPORT_REFUSED in message.lower():
            self._careful = True
            raise SessionExpired(f"the export of {ref} was refused: {message}")
        self.site_changed(f"the export of {ref} answered no XLSX: {message or content_type!r}")

    # -- pages -------------------------------------------------------------------------------

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """Room for one contract or account read: a few at once, one once sessions end."""
        async with self._parallel:
            if self._careful:
                async with self._serial:
                    yield
            else:
                yield

    async def _private(self, path: str, **kwargs: Any) -> Response:
        """A page behind the login; :class:`SessionExpired` when it sends us to log in."""
        response = await self.get(path, allow_redirects=False, expect=(200, *_REDIRECTS), **kwargs)
        if response.status in _REDIRECTS:
            target = _location_path(response)
            if target == "/login":
                self._careful = True
                raise SessionExpired(f"{path} sent us to the login page")
            self.site_changed(f"{path} redirected to {target or '?'}")
        return response

    async def _page(self, path: str) -> LexborHTMLParser:
        page = LexborHTMLParser(self.text(await self._private(path)))
        if page.css_first("form#formLogin") is not None:
            self._careful = True
            raise SessionExpired(f"{path} showed the login form")
        return page


# -- parsing helpers ---------------------------------------------------------------------------


def _hidden(page: LexborHTMLParser, name: str) -> str:
    node = page.css_first(f'input[name="{name}"]')
    value = node.attributes.get("value") if node is not None else None
    if not value:
        raise AccessFailed(ResultCode.SITE_CHANGED, f"the login form has no {name} field")
    return value


def _error_message(page: LexborHTMLParser) -> str:
    node = page.css_first("#mensajeError")
    return " ".join(node.text().split()) if node is not None else ""


def _location_path(response: Response) -> str:
    location = response.headers.get("Location", "")
    return yarl.URL(location).path.rstrip("/") if location else ""


def _id_after(link: LexborNode, prefix: str) -> str | None:
    """``2-c1`` of ``/contrato/2-c1`` (``prefix`` ``/contrato/``), else ``None``."""
    href = link.attributes.get("href") or ""
    path = yarl.URL(href).path
    if not path.startswith(prefix):
        return None
    rest = path[len(prefix) :]
    return unquote(rest) if rest and "/" not in rest else None


def _cell(row: LexborNode, selector: str) -> str:
    node = row.css_first(selector)
    return " ".join(node.text().split()) if node is not None else ""


def _account_type(text: str) -> AccountType:
    lowered = text.lower()
    for word, kind in _KINDS:
        if word in lowered:
            return kind
    return AccountType.OTHER


def _read_xlsx(body: bytes) -> list[dict[str, Any]]:
    """The rows of sheet "Movimientos" under its header row, by column name.

    Read with calamine (Rust): about 0.5 ms for a month's export, where openpyxl took 12.
    """
    try:
        book = CalamineWorkbook.from_filelike(io.BytesIO(body))
    except Exception as exc:  # a corrupt or foreign file: the export changed
        raise AccessFailed(
            ResultCode.SITE_CHANGED, f"the export is not a readable XLSX: {type(exc).__name__}"
        ) from None
    try:
        if "Movimientos" not in book.sheet_names:
            raise AccessFailed(ResultCode.SITE_CHANGED, "the export has no sheet Movimientos")
        columns: dict[str, int] | None = None
        rows: list[dict[str, Any]] = []
        for values in book.get_sheet_by_name("Movimientos").to_python():
            if columns is None:
                if values and _text(values[0]) == _HEADER[0]:
                    names = [_text(v) for v in values]
                    missing = [h for h in _HEADER if h not in names]
                    if missing:
                        raise AccessFailed(
                            ResultCode.SITE_CHANGED, f"the export has no column {missing[0]!r}"
                        )
                    columns = {h: names.index(h) for h in _HEADER}
                continue
            if all(v is None or _text(v) == "" for v in values):
                continue
            rows.append({h: values[i] if i < len(values) else None for h, i in columns.items()})
        if columns is None:
            raise AccessFailed(ResultCode.SITE_CHANGED, "the export has no header row")
        return rows
    finally:
        book.close()


def _text(value: object) -> str:
    return "" if value is None else " ".join(str(value).split())


def _date(value: object) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return parse_es_date(_text(value))


def _amount(value: object) -> Decimal:
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        try:
            return Decimal(str(value))
        except InvalidOperation:
            pass
    return parse_es_amount(_text(value))


def _movement(row: dict[str, Any]) -> MovementRecord:
    reference = _text(row["Referencia"])
    if not reference:
        raise AccessFailed(ResultCode.SITE_CHANGED, "an exported movement has no Referencia")
    balance = row["Saldo"]
    return MovementRecord(
        key=movement_key(reference=reference),
        operation_date=_date(row["Fecha operación"]),
        value_date=_date(row["Fecha valor"]),
        amount=_amount(row["Importe"]),
        description="" if row["Concepto"] is None else str(row["Concepto"]),  # as the bank wrote it
        pending=_text(row["Estado"]).lower() == "pendiente",
        balance_after=None if _text(balance) == "" else _amount(balance),
    )
