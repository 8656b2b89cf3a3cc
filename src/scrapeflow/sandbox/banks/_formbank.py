"""The form bank: HTML forms, a CSRF token, a session cookie, a password the browser encrypts.

Routes::

    GET  /login                         login form; sets the SESION cookie. Hidden fields: _csrf,
                                        execution, semilla (a per-session key), claveCifrada
    GET  /static/js/seguridad.min.js    the bank's obfuscated script: encriptar(clave, semilla)
    POST /login                         usuario, claveCifrada = encriptar(clave, semilla), _csrf,
                                        execution (and an empty clave). 302 to /posicion-global
    GET  /posicion-global               the customer's contracts: links to /contrato/{id}
    GET  /contrato/{id}                 the contract's accounts: alias, IBAN (or card number),
                                        balance ("1.234,56 €"), currency, link to /cuenta/{id}
    GET  /cuenta/{id}                   the account page, with the export form and its token
    GET  /cuenta/{id}/movimientos/exportar?token=..&fechaDesde=dd/mm/aaaa&fechaHasta=dd/mm/aaaa
                                        an XLSX file of the movements operated in that range
    GET  /logout

How it fights back, as real banks do:

* The password must come encrypted by the bank's own script with the session's ``semilla``
  (a cipher with a random element: every encryption differs). A plain ``clave`` is refused
  ("Error técnico"). The semilla changes after every attempt, so a replay fails.
* Wrong credentials and locked users get the bank's message on a 200 page
  (``#mensajeError``), never an HTTP error; 20 failures from one IP in 10 minutes block it.
* The CSRF token is bound to the session; the export token is bound to session and account.
* Sessions expire (``session_idle_seconds``, ``session_max_requests``): 302 to
  ``/login?caducada=1``, which says "Su sesión ha caducado".
* ``maintenance_rate``: a 503 maintenance page. ``layout=2``: a redesign (cards instead of
  tables, other class names) that breaks parsers written for layout 1.

The XLSX (sheet "Movimientos") starts with three title rows (bank, account, period), then the
header row ``Fecha operación | Fecha valor | Concepto | Importe | Saldo | Estado | Referencia``;
rows come newest first, dates as ``dd/mm/yyyy`` text, amounts as Spanish text (``-1.234,56``),
``Estado`` is ``Contabilizado`` or ``Pendiente`` (no balance while pending), and ``Referencia``
stays the same when a pending movement posts.
"""

from __future__ import annotations

import io
import secrets
from datetime import date, datetime
from decimal import Decimal
from html import escape
from importlib import resources

from aiohttp import web
from openpyxl import Workbook

from scrapeflow.sandbox._tokens import TokenError
from scrapeflow.sandbox._world import Account, AccountKind
from scrapeflow.sandbox.banks._base import BankSite, Session, es_amount, es_date

__all__ = ["FormBank", "decrypt_password"]

COOKIE = "SESION"
SESSION_KEY = web.RequestKey("formbank.session", Session)
XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
HEADER = ("Fecha operación", "Fecha valor", "Concepto", "Importe", "Saldo", "Estado", "Referencia")
_MAX_RANGE_DAYS = 366


def script() -> str:
    """The bank's obfuscated encryption script, as served."""
    return resources.files(__package__).joinpath("static/seguridad.min.js").read_text()


def decrypt_password(cipher: str, semilla: str) -> str | None:
    """The bank's server side of ``encriptar``; ``None`` when ``cipher`` is not one."""
    if len(cipher) < 4 or not cipher.isdigit() or (len(cipher) - 1) % 3 or not semilla:
        return None
    m = int(cipher[0])
    chars = []
    for u in range((len(cipher) - 1) // 3):
        start = 2 * u % len(semilla)
        key = int(semilla[start : start + 2], 16)
        value = 999 - int(cipher[1 + 3 * u : 4 + 3 * u]) - m
        if value < 0:
            return None
        chars.append(chr(value ^ key))
    return "".join(chars)


class FormBank(BankSite):
    """The form bank. See the module docstring for its routes and defences."""

    name = "formbank"

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._root)
        app.router.add_get("/login", self._login_page)
        app.router.add_post("/login", self._login)
        app.router.add_get("/static/js/seguridad.min.js", self._script)
        app.router.add_get("/posicion-global", self._contracts)
        app.router.add_get("/contrato/{id}", self._contract)
        app.router.add_get("/cuenta/{id}", self._account)
        app.router.add_get("/cuenta/{id}/movimientos/exportar", self._export)
        app.router.add_get("/logout", self._logout)
        self._script_text = script()

    # -- login ------------------------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/login")

    async def _login_page(self, request: web.Request, message: str = "") -> web.Response:
        self._maintenance()
        session = self.find_session(request.cookies.get(COOKIE)) or self.new_session()
        semilla = secrets.token_hex(8)
        session.data["semilla"] = semilla
        csrf = self.state.signer.sign("formbank-csrf", {"s": session.id}, 1800)
        notice = ""
        if request.query.get("caducada"):
            notice = '<div class="aviso" id="mensajeAviso">Su sesión ha caducado.</div>'
        error = (
            f'<div class="alert alert-error" id="mensajeError">{message}</div>' if message else ""
        )
        response = _page(
            "Acceso clientes",
            f"""{notice}{error}
<form id="formLogin" name="formLogin" action="/login" method="post" onsubmit="return cifrar()">
  <input type="hidden" name="_csrf" value="{csrf}">
  <input type="hidden" name="execution" value="e{secrets.randbelow(9) + 1}s1">
  <input type="hidden" name="semilla" id="semilla" value="{semilla}">
  <input type="hidden" name="claveCifrada" id="claveCifrada" value="">
  <label>NIF/NIE <input type="text" name="usuario" autocomplete="off"></label>
  <label>Clave <input type="password" name="clave" id="clave"></label>
  <button type="submit">Entrar</button>
</form>
<script src="/static/js/seguridad.min.js"></script>
<script>function cifrar(){{var c=document.getElementById('clave');
document.getElementById('claveCifrada').value=encriptar(c.value,
document.getElementById('semilla').value);c.value='';return true}}</script>""",
        )
        response.set_cookie(COOKIE, session.id, httponly=True, path="/")
        return response

    async def _script(self, request: web.Request) -> web.Response:
        return web.Response(text=self._script_text, content_type="application/javascript")

    async def _login(self, request: web.Request) -> web.Response:
        self._maintenance()
        session = self.find_session(request.cookies.get(COOKIE))
        form = await request.post()
        if session is None or not self._csrf_ok(session, str(form.get("_csrf", ""))):
            return await self._login_page(request, "La sesión no es válida. Vuelva a intentarlo.")
        semilla = session.data.pop("semilla", "")  # one attempt per semilla: no replay
        if form.get("clave") or not form.get("execution"):
            return await self._login_page(
                request, "Error técnico (código 0x1F). Actualice la página."
            )
        login = self.login_of(str(form.get("usuario", "")).strip().upper())
        password = decrypt_password(str(form.get("claveCifrada", "")), str(semilla))
        if login is None or password != login.password:
            self.login_failed(request)
            return await self._login_page(request, "Usuario o clave incorrectos.")
        if login.locked:
            self.login_failed(request)
            return await self._login_page(
                request, "Su acceso ha sido bloqueado por seguridad. Llame al 900 000 000."
            )
        self.end_session(session)
        fresh = self.new_session()
        fresh.customer = login.customer
        fresh.authenticated = True
        response = web.HTTPFound("/posicion-global")
        response.set_cookie(COOKIE, fresh.id, httponly=True, path="/")
        raise response

    def _csrf_ok(self, session: Session, token: str) -> bool:
        try:
            return self.state.signer.verify("formbank-csrf", token).get("s") == session.id
        except TokenError:
            return False

    async def _logout(self, request: web.Request) -> web.Response:
        session = self.find_session(request.cookies.get(COOKIE))
        if session is not None:
            self.end_session(session)
        raise web.HTTPFound("/login")

    # -- private area -----------------------------------------------------------------------

    def _customer(self, request: web.Request) -> int:
        self._maintenance()
        session = self.find_session(request.cookies.get(COOKIE))
        if session is None or not session.authenticated or session.customer is None:
            raise web.HTTPFound("/login?caducada=1")
        request[SESSION_KEY] = session
        return session.customer

    def _owned(self, request: web.Request, customer: int) -> Account:
        account = self.account_of(customer, request.match_info["id"])
        if account is None:
            raise web.HTTPNotFound(text="Cuenta no encontrada")
        return account

    async def _contracts(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        accounts = self.accounts_of(customer)
        counts = {
            c.id: sum(a.contract.id == c.id for a in accounts)
            for c in self.state.world.contracts(self.name, customer)
        }
        names = {a.contract.id: a.contract.name for a in accounts}
        if self.settings.layout == 2:
            body = "".join(
                f'<div class="product-card" data-contract="{cid}"><a class="cta" '
                f'href="/contrato/{cid}">{escape(names[cid])}</a><span>{n} productos</span></div>'
                for cid, n in counts.items()
            )
            return _page("Mi banco", f'<section id="productos">{body}</section>')
        rows = "".join(
            f'<tr><td><a href="/contrato/{cid}">{escape(names[cid])}</a></td>'
            f"<td>{n} cuentas</td></tr>"
            for cid, n in counts.items()
        )
        return _page(
            "Posición global",
            f'<table id="contratos"><tr><th>Contrato</th><th>Cuentas</th></tr>{rows}</table>'
            '<a href="/logout">Salir</a>',
        )

    async def _contract(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        contract_id = request.match_info["id"]
        accounts = [a for a in self.accounts_of(customer) if a.contract.id == contract_id]
        if not accounts:
            raise web.HTTPNotFound(text="Contrato no encontrado")
        if self.settings.layout == 2:
            cards = "".join(
                f'<div class="product-card account"><h3>{escape(a.alias)}</h3>'
                f'<p class="product-id">{_shown_number(a)}</p>'
                f'<p class="amount">{_money(self.balance_of(a), a.currency)}</p>'
                f'<a class="cta" href="/cuenta/{a.id}">Detalle</a></div>'
                for a in accounts
            )
            return _page("Contrato", f'<section id="cuentas">{cards}</section>')
        rows = "".join(
            f'<tr class="cuenta"><td class="alias">{escape(a.alias)}</td>'
            f'<td class="{"iban" if a.iban else "numero"}">{_shown_number(a)}</td>'
            f'<td class="saldo">{_money(self.balance_of(a), a.currency)}</td>'
            f'<td class="divisa">{a.currency}</td>'
            f'<td class="tipo">{_KIND_NAMES[a.kind]}</td>'
            f'<td><a href="/cuenta/{a.id}">Ver movimientos</a></td></tr>'
            for a in accounts
        )
        return _page("Cuentas del contrato", f'<table id="cuentas">{rows}</table>')

    async def _account(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        account = self._owned(request, customer)
        session: Session = request[SESSION_KEY]
        token = self.state.signer.sign("formbank-export", {"s": session.id, "a": account.id}, 1800)
        return _page(
            escape(account.alias),
            f'<p class="numero">{_shown_number(account)}</p>'
            f'<form id="exportar" action="/cuenta/{account.id}/movimientos/exportar" method="get">'
            f'<input type="hidden" name="token" value="{token}">'
            '<input name="fechaDesde" placeholder="dd/mm/aaaa">'
            '<input name="fechaHasta" placeholder="dd/mm/aaaa">'
            '<select name="formato"><option value="xlsx">Excel</option></select></form>',
        )

    async def _export(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        account = self._owned(request, customer)
        session: Session = request[SESSION_KEY]
        try:
            granted = self.state.signer.verify("formbank-export", request.query.get("token", ""))
        except TokenError:
            granted = {}
        if granted.get("s") != session.id or granted.get("a") != account.id:
            return _page("Error", '<div id="mensajeError">Operación no permitida.</div>')
        today = self.state.clock.now().date()
        try:
            since = _es_date(request.query.get("fechaDesde", ""))
            until = (
                _es_date(request.query["fechaHasta"]) if request.query.get("fechaHasta") else today
            )
        except ValueError:
            return _page("Error", '<div id="mensajeError">Fechas incorrectas.</div>')
        if since > until or (until - since).days > _MAX_RANGE_DAYS:
            return _page("Error", '<div id="mensajeError">El rango de fechas no es válido.</div>')
        rows = [m for m in self.movements_of(account) if since <= m.operation_date <= until]
        rows.sort(key=lambda m: (m.operation_date, m.appeared_at, m.ref), reverse=True)
        book = Workbook(write_only=True)
        sheet = book.create_sheet("Movimientos")
        sheet.append([f"Banco Formulario - {account.alias}"])
        sheet.append([f"Cuenta: {_shown_number(account)}"])
        sheet.append([f"Periodo: {es_date(since)} - {es_date(until)}"])
        sheet.append(list(HEADER))
        for m in rows:
            sheet.append(
                [
                    es_date(m.operation_date),
                    es_date(m.value_date),
                    m.description,
                    es_amount(m.amount),
                    "" if m.balance_after is None else es_amount(m.balance_after),
                    "Pendiente" if m.pending else "Contabilizado",
                    m.ref,
                ]
            )
        buffer = io.BytesIO()
        book.save(buffer)
        return web.Response(
            body=buffer.getvalue(),
            content_type=XLSX_TYPE,
            headers={
                "Content-Disposition": f'attachment; filename="movimientos_{account.id}.xlsx"'
            },
        )

    def _maintenance(self) -> None:
        if self.in_maintenance():
            raise web.HTTPServiceUnavailable(
                text=_page_html(
                    "Mantenimiento",
                    "<p>Estamos realizando tareas de mantenimiento. Disculpe las molestias.</p>",
                ),
                content_type="text/html",
            )


_KIND_NAMES = {
    AccountKind.CHECKING: "Cuenta corriente",
    AccountKind.SAVINGS: "Cuenta ahorro",
    AccountKind.CARD: "Tarjeta de crédito",
}


def _shown_number(account: Account) -> str:
    if account.iban is None:
        return account.number
    return " ".join(account.iban[i : i + 4] for i in range(0, len(account.iban), 4))


def _money(value: Decimal, currency: str) -> str:
    text = es_amount(value)
    return f"{text} €" if currency == "EUR" else f"{text} {currency}"


def _es_date(text: str) -> date:
    return datetime.strptime(text.strip(), "%d/%m/%Y").date()


def _page_html(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="es"><head><meta charset="utf-8"><title>{title} - '
        f"Banco Formulario</title></head><body><header><h1>{title}</h1></header>"
        f"<main>{body}</main></body></html>"
    )


def _page(title: str, body: str) -> web.Response:
    return web.Response(text=_page_html(title, body), content_type="text/html")
