"""The legacy bank: a J2EE-era site of server-side sessions, SMS codes and paginated HTML tables.

Routes (HTML in ISO-8859-1, amounts ``1.234,56``, dates ``dd/mm/yyyy``)::

    GET  /                  302 to /login.jsp
    GET  /login.jsp         login form (usuario, password); starts a new session, cookie JSESSIONID
                            (?caducada=1: "Su sesión ha caducado"; ?salir=1: logged out;
                            ?otp=1: too many wrong codes)
    POST /j_security_check  usuario, password, with the JSESSIONID of /login.jsp. 302 to /otp.jsp
                            when a code is needed, else to /inicio.do
    GET  /otp.jsp           "we sent you a code by SMS": form with field ``codigo``
    POST /otp.jsp           codigo. Right: 302 to /inicio.do and a DISPOSITIVO cookie
    GET  /inicio.do         the accounts, per contract: alias, IBAN ("ES12 3456 ...") or card
                            number, balance ("1.234,56 EUR"), link /movimientos.do?cuenta=<id>
    GET  /movimientos.do    ?cuenta=<id>&desde=dd/mm/yyyy&hasta=dd/mm/yyyy&pagina=N
    GET  /logout.do         ends the session; 302 to /login.jsp?salir=1

Admin (behind the admin token, besides the ground truth of every bank)::

    GET  /__admin/otp/{username}   {"code": "123456"}: the code "sent by SMS" for the user's latest
                                   pending login; 404 when there is none

Login. Wrong credentials are **not** an HTTP error: the login page again, status 200, with
``<div class="msgError">Usuario o contraseña incorrectos</div>``; a locked user (whatever the
password) gets "Su usuario está bloqueado. Contacte con su oficina." the same way. 20 failures
from one IP in 10 minutes block it. A POST without a live session from /login.jsp goes to
``/login.jsp?caducada=1``. Signing in ends the login session and starts another (a new
JSESSIONID, as Tomcat does): keep the cookies of every answer, redirects included (aiohttp
clients need ``CookieJar(unsafe=True)`` to keep cookies from an IP address such as 127.0.0.1).

Two-factor. Customers who need it (``n % 4 == 2``) are sent to /otp.jsp, which makes a random
6-digit code for the session, valid 5 minutes (real time); reloading the page keeps it, and after
it expires a new one is made. A wrong code gives "Código incorrecto" (200); the third ends the
session (302 to ``/login.jsp?otp=1``) and counts as a failed login. The right code signs in and
sets the cookie ``DISPOSITIVO``: a trusted device for that customer, valid 90 days of **sandbox**
time (advance the clock past them and the code is asked again). Logging in with it skips the
code. The pending session lives as long as any other: ``session_idle_seconds`` without a request.

Movements. 25 rows a page, newest first (pending ones, then booked ones from the latest
posted), for the operation dates from ``desde`` to ``hasta`` (default: from 30 days before
today); columns Fecha operación, Fecha valor, Concepto, Importe, Saldo, Nº operación. A pending
movement has the row class ``pendiente`` and ``Pendiente`` instead of a balance; its Nº
operación stays when it is booked (with a new concept and value date). Under the table,
"Página N de M" and, when there is a next page, a link "Siguiente". Bad dates, a bad page number
or another customer's account give the bank's error message (``div.msgError``) with status 200.

Sessions expire (``session_idle_seconds``, ``session_max_requests``): any private page then
answers 302 to ``/login.jsp?caducada=1``, which says "Su sesión ha caducado".

``maintenance_rate``: that share of requests (the bank's first check, after the site's guard)
gets the 503 page "Servicio temporalmente no disponible por mantenimiento". ``layout=2``: the
redesign: the accounts as a list of cards, movements as ``div.mov-item`` blocks (``data-ref``,
``data-status``) with other class names and order, and the pager "1 / 5" with a link
"Más movimientos" (``rel="next"``).
"""

from __future__ import annotations

import secrets
import time
from datetime import date, datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from scrapeflow.sandbox._guards import ADMIN_PREFIX
from scrapeflow.sandbox._site import admin_json, require_admin
from scrapeflow.sandbox._tokens import TokenError
from scrapeflow.sandbox._world import Account, Login, Movement
from scrapeflow.sandbox.banks._base import BankSite, Session, es_amount, es_date

__all__ = ["LegacyBank"]

SESSION_COOKIE = "JSESSIONID"
DEVICE_COOKIE = "DISPOSITIVO"
PAGE_SIZE = 25
OTP_SECONDS = 300.0
OTP_ATTEMPTS = 3
DEVICE_DAYS = 90
_DEFAULT_DAYS = 30
_CHARSET = "iso-8859-1"
_DEVICE_PURPOSE = "legacybank-device"
_NOTICES = {
    "caducada": "Su sesión ha caducado. Por favor, identifíquese de nuevo.",
    "salir": "Ha cerrado su sesión correctamente.",
    "otp": "Ha superado el número de intentos del código. Identifíquese de nuevo.",
}


class LegacyBank(BankSite):
    """The legacy bank. See the module docstring for its routes and behaviour."""

    name = "legacybank"

    def app(self) -> web.Application:
        app = super().app()
        app.middlewares.append(self._maintenance())
        return app

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._root)
        app.router.add_get("/login.jsp", self._login_page)
        app.router.add_post("/j_security_check", self._login)
        app.router.add_get("/otp.jsp", self._otp_page)
        app.router.add_post("/otp.jsp", self._otp)
        app.router.add_get("/inicio.do", self._home)
        app.router.add_get("/movimientos.do", self._movements)
        app.router.add_get("/logout.do", self._logout)

    def admin_routes(self, admin: web.RouteTableDef) -> None:
        super().admin_routes(admin)

        @admin.get(f"{ADMIN_PREFIX}/otp/{{username}}")
        async def otp_code(request: web.Request) -> web.Response:
            require_admin(request, self.state)
            login = self.login_of(request.match_info["username"])
            if login is None:
                return admin_json({"error": "no such user"}, status=404)
            code = self.pending_code(login.customer)
            if code is None:
                return admin_json({"error": "no pending code"}, status=404)
            return admin_json({"code": code})

    def pending_code(self, customer: int) -> str | None:
        """The live code last sent to ``customer``, or ``None``."""
        now = time.monotonic()
        live = [
            s.data["otp"]
            for s in self.sessions.values()
            if s.customer == customer
            and "otp" in s.data
            and s.data["otp"]["expires"] > now
            and now - s.last_seen <= self.settings.session_idle_seconds
        ]
        return str(max(live, key=lambda otp: otp["sent"])["code"]) if live else None

    def _maintenance(self) -> Middleware:
        @web.middleware
        async def maintenance(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not request.path.startswith(ADMIN_PREFIX) and self.in_maintenance():
                return _page(
                    "Mantenimiento",
                    '<div class="msgAviso">Servicio temporalmente no disponible por '
                    "mantenimiento. Disculpe las molestias.</div>",
                    status=503,
                )
            return await handler(request)

        return maintenance

    # -- login and two-factor ---------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/login.jsp")

    async def _login_page(self, request: web.Request) -> web.Response:
        earlier = self.sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        if earlier is not None:
            self.end_session(earlier)
        session = self.new_session()
        notice = next((text for key, text in _NOTICES.items() if request.query.get(key)), "")
        response = _login_form(f'<div class="msgAviso">{notice}</div>' if notice else "")
        response.set_cookie(SESSION_COOKIE, session.id, path="/", httponly=True)
        return response

    async def _login(self, request: web.Request) -> web.Response:
        session = self.find_session(request.cookies.get(SESSION_COOKIE))
        if session is None:
            raise web.HTTPFound("/login.jsp?caducada=1")
        form = await request.post()
        session.customer, session.authenticated, session.data = None, False, {}
        login = self.login_of(str(form.get("usuario", "")).strip().upper())
        if login is not None and login.locked:
            self.login_failed(request)
            return _login_form(
                '<div class="msgError">Su usuario está bloqueado. Contacte con su oficina.</div>'
            )
        given = str(form.get("password", ""))
        if login is None or not secrets.compare_digest(given.encode(), login.password.encode()):
            self.login_failed(request)
            return _login_form('<div class="msgError">Usuario o contraseña incorrectos</div>')
        if login.otp_required and not self._trusted_device(request, login):
            session.customer = login.customer
            session.data["stage"] = "otp"
            raise web.HTTPFound("/otp.jsp")
        return self._sign_in(session, login.customer)

    def _trusted_device(self, request: web.Request, login: Login) -> bool:
        try:
            device = self.state.signer.verify(
                _DEVICE_PURPOSE, request.cookies.get(DEVICE_COOKIE, "")
            )
        except TokenError:
            return False
        until = datetime.fromisoformat(str(device.get("until")))
        return device.get("customer") == login.customer and self.state.clock.now() < until

    def _sign_in(self, session: Session, customer: int) -> web.Response:
        self.end_session(session)
        fresh = self.new_session()
        fresh.customer = customer
        fresh.authenticated = True
        response = web.Response(status=302, headers={"Location": "/inicio.do"})
        response.set_cookie(SESSION_COOKIE, fresh.id, path="/", httponly=True)
        return response

    def _otp_session(self, request: web.Request) -> Session:
        session = self.find_session(request.cookies.get(SESSION_COOKIE))
        if session is None or session.data.get("stage") != "otp":
            raise web.HTTPFound("/login.jsp?caducada=1")
        return session

    async def _otp_page(self, request: web.Request) -> web.Response:
        session = self._otp_session(request)
        _send_code(session)
        return _otp_form(session, "")

    async def _otp(self, request: web.Request) -> web.Response:
        session = self._otp_session(request)
        form = await request.post()
        otp = session.data.get("otp")
        if otp is None or otp["expires"] <= time.monotonic():
            _send_code(session)
            return _otp_form(session, "El código ha caducado. Le hemos enviado uno nuevo.")
        if not secrets.compare_digest(str(form.get("codigo", "")).strip(), otp["code"]):
            failures = session.data["failures"] = session.data.get("failures", 0) + 1
            if failures >= OTP_ATTEMPTS:
                self.end_session(session)
                self.login_failed(request)
                raise web.HTTPFound("/login.jsp?otp=1")
            left = OTP_ATTEMPTS - failures
            return _otp_form(session, f"Código incorrecto. Le quedan {left} intentos.")
        customer = session.customer
        if customer is None:  # pragma: no cover - the otp stage always has its customer
            raise web.HTTPFound("/login.jsp?caducada=1")
        response = self._sign_in(session, customer)
        until = self.state.clock.now() + timedelta(days=DEVICE_DAYS)
        device = self.state.signer.sign(
            _DEVICE_PURPOSE,
            {"customer": customer, "until": until.isoformat()},
            DEVICE_DAYS * 86_400,
        )
        response.set_cookie(
            DEVICE_COOKIE, device, path="/", httponly=True, max_age=DEVICE_DAYS * 86_400
        )
        return response

    async def _logout(self, request: web.Request) -> web.Response:
        session = self.find_session(request.cookies.get(SESSION_COOKIE))
        if session is not None:
            self.end_session(session)
        raise web.HTTPFound("/login.jsp?salir=1")

    # -- private area -----------------------------------------------------------------------

    def _customer(self, request: web.Request) -> int:
        session = self.find_session(request.cookies.get(SESSION_COOKIE))
        if session is not None and session.data.get("stage") == "otp":
            raise web.HTTPFound("/otp.jsp")
        if session is None or not session.authenticated or session.customer is None:
            raise web.HTTPFound("/login.jsp?caducada=1")
        return session.customer

    async def _home(self, request: web.Request) -> web.Response:
        accounts = self.accounts_of(self._customer(request))
        contracts: dict[str, list[Account]] = {}
        for account in accounts:
            contracts.setdefault(account.contract.id, []).append(account)
        if self.settings.layout == 2:
            cards = "".join(
                f'<li class="product" data-id="{a.id}"><a class="product-link" '
                f'href="/movimientos.do?cuenta={a.id}"><span class="product-name">'
                f'{escape(a.alias)}</span></a><span class="product-number">{_number(a)}</span>'
                f'<span class="product-balance">{es_amount(self.balance_of(a))} {a.currency}'
                f'</span><span class="product-contract">{escape(a.contract.name)}</span></li>'
                for a in accounts
            )
            return _page("Mis productos", f'<ul class="product-list">{cards}</ul>', layout=2)
        sections = []
        for contract_id, owned in contracts.items():
            rows = "".join(
                f'<tr class="filaCuenta"><td class="alias"><a href="/movimientos.do?cuenta={a.id}">'
                f'{escape(a.alias)}</a></td><td class="numCuenta">{_number(a)}</td>'
                f'<td class="saldo">{es_amount(self.balance_of(a))} {a.currency}</td></tr>'
                for a in owned
            )
            name = escape(owned[0].contract.name)
            sections.append(
                f'<h3 class="contrato">{name} ({contract_id})</h3>'
                f'<table class="tablaCuentas" border="1" cellpadding="2"><tr class="cabecera">'
                f"<th>Cuenta</th><th>Número</th><th>Saldo</th></tr>{rows}</table>"
            )
        return _page("Posición global", "".join(sections))

    async def _movements(self, request: web.Request) -> web.Response:
        customer = self._customer(request)
        layout = self.settings.layout
        account = self.account_of(customer, request.query.get("cuenta", ""))
        if account is None:
            return _error("La cuenta seleccionada no es válida.", layout)
        today = self.state.clock.now().date()
        try:
            until = _parse_date(request.query.get("hasta"), today)
            since = _parse_date(request.query.get("desde"), until - timedelta(days=_DEFAULT_DAYS))
            number = int(request.query.get("pagina", "1"))
        except ValueError:
            return _error("Los datos de la consulta no son correctos (fechas dd/mm/aaaa).", layout)
        if since > until:
            return _error("La fecha desde no puede ser posterior a la fecha hasta.", layout)
        rows = [
            m for m in reversed(self.movements_of(account)) if since <= m.operation_date <= until
        ]
        pages = max(1, -(-len(rows) // PAGE_SIZE))
        if not 1 <= number <= pages:
            return _error("La página solicitada no existe.", layout)
        shown = rows[(number - 1) * PAGE_SIZE : number * PAGE_SIZE]
        query = {"cuenta": account.id, "desde": es_date(since), "hasta": es_date(until)}
        following = escape(f"/movimientos.do?{urlencode(query | {'pagina': number + 1})}")
        title = f"{escape(account.alias)} {_number(account)}"
        period = f"Del {es_date(since)} al {es_date(until)}"
        if layout == 2:
            more = f'<a rel="next" href="{following}">Más movimientos</a>' if number < pages else ""
            return _page(
                "Movimientos",
                f'<header class="mov-account" data-account="{account.id}"><h2>{title}</h2>'
                f'<p class="mov-period">{period}</p></header><div class="mov-list">'
                f"{''.join(_item(m, account) for m in shown)}</div>"
                f'<nav class="pager"><span class="pager-info">{number} / {pages}</span>'
                f"{more}</nav>",
                layout=2,
            )
        more = f'<a class="siguiente" href="{following}">Siguiente</a>' if number < pages else ""
        empty = (
            '<tr><td colspan="6">No hay movimientos en el periodo.</td></tr>' if not rows else ""
        )
        return _page(
            "Consulta de movimientos",
            f'<p class="cuentaSel">{title} - Divisa: {account.currency}</p>'
            f'<p class="periodo">{period}</p>'
            f'<table class="tablaMovimientos" border="1" cellpadding="2"><tr class="cabecera">'
            "<th>Fecha operación</th><th>Fecha valor</th><th>Concepto</th><th>Importe</th>"
            f"<th>Saldo</th><th>Nº operación</th></tr>{''.join(map(_row, shown))}{empty}</table>"
            f'<div class="paginacion">Página {number} de {pages} {more}</div>',
        )


def _send_code(session: Session) -> None:
    """Give ``session`` a code unless its code is still live (a reload does not resend)."""
    otp: dict[str, Any] | None = session.data.get("otp")
    now = time.monotonic()
    if otp is None or otp["expires"] <= now:
        code = f"{secrets.randbelow(1_000_000):06d}"
        session.data["otp"] = {"code": code, "sent": now, "expires": now + OTP_SECONDS}


def _row(m: Movement) -> str:
    balance = (
        '<span class="marcaPendiente">Pendiente</span>'
        if m.balance_after is None
        else es_amount(m.balance_after)
    )
    return (
        f'<tr class="{"fila pendiente" if m.pending else "fila"}">'
        f'<td class="fecha">{es_date(m.operation_date)}</td>'
        f'<td class="fecha">{es_date(m.value_date)}</td>'
        f'<td class="concepto">{escape(m.description)}</td>'
        f'<td class="importe">{es_amount(m.amount)}</td>'
        f'<td class="saldo">{balance}</td><td class="numOperacion">{m.ref}</td></tr>'
    )


def _item(m: Movement, account: Account) -> str:
    balance = "" if m.balance_after is None else f"{es_amount(m.balance_after)} {account.currency}"
    status = "pendiente" if m.pending else "contabilizado"
    return (
        f'<div class="mov-item" data-ref="{m.ref}" data-status="{status}">'
        f'<span class="mov-date">{es_date(m.operation_date)}</span>'
        f'<span class="mov-desc">{escape(m.description)}</span>'
        f'<span class="mov-amount">{es_amount(m.amount)} {account.currency}</span>'
        f'<span class="mov-balance">{balance}</span>'
        f'<span class="mov-value-date">Valor: {es_date(m.value_date)}</span></div>'
    )


def _number(account: Account) -> str:
    """An IBAN in groups of four (``ES12 3456 ...``), or the card's number."""
    if account.iban is None:
        return account.number
    return " ".join(account.iban[i : i + 4] for i in range(0, len(account.iban), 4))


def _parse_date(text: str | None, default: date) -> date:
    return datetime.strptime(text.strip(), "%d/%m/%Y").date() if text else default


def _login_form(message: str) -> web.Response:
    return _page(
        "Acceso a Banca Legado",
        f"""{message}
<form name="loginForm" action="/j_security_check" method="post">
<table class="tablaLogin"><tr><td>Usuario:</td><td><input type="text" name="usuario"></td></tr>
<tr><td>Contraseña:</td><td><input type="password" name="password"></td></tr>
<tr><td colspan="2"><input type="submit" value="Entrar"></td></tr></table></form>""",
    )


def _otp_form(session: Session, message: str) -> web.Response:
    phone = f"{(session.customer or 0) * 7919 % 1000:03d}"
    error = f'<div class="msgError">{message}</div>' if message else ""
    return _page(
        "Verificación de seguridad",
        f"""{error}<p class="msgAviso">Le hemos enviado un código por SMS al teléfono
***&nbsp;***&nbsp;{phone}. Introdúzcalo para continuar.</p>
<form name="otpForm" action="/otp.jsp" method="post">
<input type="text" name="codigo" maxlength="6" autocomplete="off">
<input type="submit" value="Confirmar"></form>""",
    )


def _error(message: str, layout: int) -> web.Response:
    if layout == 2:
        return _page("Aviso", f'<div class="alert alert-error">{escape(message)}</div>', layout=2)
    return _page("Aviso", f'<div class="msgError">{escape(message)}</div>')


def _page(title: str, body: str, *, status: int = 200, layout: int = 1) -> web.Response:
    if layout == 2:
        html = (
            f'<!DOCTYPE html><html lang="es"><head><meta charset="{_CHARSET}">'
            f'<title>{title} | Banca Legado</title></head><body class="app">'
            f'<nav class="topbar"><a href="/inicio.do">Inicio</a> <a href="/logout.do">Salir</a>'
            f'</nav><main class="content"><h1>{title}</h1>{body}</main></body></html>'
        )
    else:
        html = (
            '<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN">\n<html><head>'
            f'<meta http-equiv="Content-Type" content="text/html; charset={_CHARSET}">'
            f"<title>Banca Legado - {title}</title></head><body>"
            '<table width="100%" class="cabeceraPagina"><tr><td><b>BANCA LEGADO</b></td>'
            '<td align="right"><a href="/logout.do">Desconectar</a></td></tr></table>'
            f'<h2 class="titulo">{title}</h2>{body}</body></html>'
        )
    return web.Response(text=html, status=status, content_type="text/html", charset=_CHARSET)
