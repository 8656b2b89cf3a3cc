"""Edges of the scraper API where data used to be lost without a word, each against a small bank
of the test's making on loopback and a real database:

* movements without a reference: :class:`MovementKeys` keeps identical ones apart, and a batch
  that repeats a key is refused whole (``site_changed``) instead of collapsing two into one;
* bytes that do not decode in the page's charset end the scrape ``site_changed`` instead of
  being replaced; a scraper states the charset of pages that declare none (``encoding``);
* ``BasicScraper.url`` resolves links as a browser does against the bank's base URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import select

from scrapeflow.banking import (
    Access,
    AccessSink,
    Account,
    AccountRecord,
    AccountType,
    BasicScraper,
    ContractInfo,
    Credential,
    CredentialVault,
    Customer,
    FinancialEntity,
    Movement,
    MovementKeys,
    MovementRecord,
    ResultCode,
    ScrapeContext,
    SqlWriter,
    WriteQueue,
    migrate,
    movement_key,
    parse_amount,
    parse_iso_date,
    result_for,
)
from scrapeflow.db import create_engine, session_factory
from scrapeflow.errors import UndecodableBody
from scrapeflow.http import HttpClient, HttpConfig, RetryPolicy
from scrapeflow.sandbox import serve

VAULT = CredentialVault([CredentialVault.generate_key()])
TODAY = date(2026, 3, 2)


# -- a small bank and a way to run a scraper once against it -------------------------------------


def _http() -> HttpClient:
    return HttpClient(
        HttpConfig(timeout=10, retry=RetryPolicy(attempts=2, backoff=0.05, backoff_max=0.1))
    )


async def _new_access(db_url: str) -> int:
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as session, session.begin():
            customer = Customer(external_id="edge-1", name="Ana")
            bank = FinancialEntity(code="edgebank", name="Edge Bank", country="ES")
            session.add_all([customer, bank])
            await session.flush()
            access = Access(
                customer_id=customer.id,
                entity_id=bank.id,
                login="ana",
                secret=VAULT.encrypt("pw"),
            )
            session.add(access)
            await session.flush()
            return access.id
    finally:
        await engine.dispose()


async def _run(
    db_url: str, base_url: str, scraper: type[BasicScraper], access_id: int
) -> tuple[ResultCode, str]:
    """Run ``scraper`` once for the access, as the launcher does: (code, detail)."""
    engine = create_engine(db_url)
    try:
        async with _http() as http, WriteQueue(writers=1) as queue:
            context = ScrapeContext(
                access_id=access_id,
                login="ana",
                credential=Credential(VAULT, VAULT.encrypt("pw")),
                base_url=base_url,
                http=http,
                sink=AccessSink(SqlWriter(session_factory(engine)), queue, access_id),
                today=TODAY,
            )
            try:
                await scraper(context).main()
            except Exception as exc:
                return result_for(exc)
            return ResultCode.SUCCESS, ""
    finally:
        await engine.dispose()


async def _stored(db_url: str, access_id: int) -> tuple[list[Account], list[Movement]]:
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as session:
            accounts = (
                await session.scalars(select(Account).where(Account.access_id == access_id))
            ).all()
            movements = (
                await session.scalars(
                    select(Movement)
                    .join(Account, Account.id == Movement.account_id)
                    .where(Account.access_id == access_id)
                )
            ).all()
            return list(accounts), list(movements)
    finally:
        await engine.dispose()


class LedgerBank(BasicScraper):
    """A bank that gives no movement reference: ``GET /movements`` lists
    ``{"date", "amount", "text", "pending"}`` objects. Keys by :class:`MovementKeys`."""

    bank = "edgebank"
    title = "Edge Bank"

    async def login(self) -> None:
        await self.get("/login")

    async def contracts(self) -> Sequence[ContractInfo]:
        return [ContractInfo("c1")]

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        return [AccountRecord("a1", AccountType.CHECKING, "EUR", Decimal("100.00"), number="1")]

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        rows = (await self.get("/movements")).json()
        key = self.keys_of_one_read()
        found = []
        for row in rows:
            day, amount = parse_iso_date(row["date"]), parse_amount(row["amount"])
            found.append(
                MovementRecord(
                    key(day, amount, row["text"]), day, day, amount, row["text"], row["pending"]
                )
            )
        return found

    def keys_of_one_read(self) -> Callable[[date, Decimal, str], str]:
        keys = MovementKeys()
        return lambda day, amount, text: keys.key(
            operation_date=day, amount=amount, description=text
        )


class NaiveLedgerBank(LedgerBank):
    """The same bank keyed as a scraper does that counts no occurrences."""

    def keys_of_one_read(self) -> Callable[[date, Decimal, str], str]:
        return lambda day, amount, text: movement_key(
            operation_date=day, amount=amount, description=text
        )


def _ledger_app(listing: list[dict[str, Any]]) -> web.Application:
    """The ledger bank's site; ``listing`` is read on every request (a test may change it)."""

    async def login(request: web.Request) -> web.Response:
        return web.Response(text="welcome")

    async def movements(request: web.Request) -> web.Response:
        return web.json_response(listing)

    app = web.Application()
    app.router.add_get("/login", login)
    app.router.add_get("/movements", movements)
    return app


def _row(day: str, amount: str, text: str, *, pending: bool = False) -> dict[str, Any]:
    return {"date": day, "amount": amount, "text": text, "pending": pending}


# -- movement identity ---------------------------------------------------------------------------


def test_movement_keys_count_identical_movements_per_day_in_read_order() -> None:
    d1, d2, cash = date(2026, 3, 1), date(2026, 3, 2), Decimal("-20.00")
    read = [
        (d1, cash, "Cajero", None),
        (d1, cash, "CAJERO ", None),  # the same normalised form: the second occurrence
        (d2, cash, "Cajero", None),  # another day: counted apart
        (d1, Decimal("-20.01"), "Cajero", None),  # another amount: counted apart
        (d1, cash, "cajero  ", "OP-7"),  # the bank's reference: its own key, not counted
        (d1, cash, " cajero", None),  # the third occurrence on d1
    ]

    def keys_of_one_read() -> list[str]:
        keys = MovementKeys()
        return [
            keys.key(operation_date=d, amount=a, description=t, reference=r) for d, a, t, r in read
        ]

    first = keys_of_one_read()
    assert first == [
        movement_key(operation_date=d1, amount=cash, description="Cajero", occurrence=0),
        movement_key(operation_date=d1, amount=cash, description="Cajero", occurrence=1),
        movement_key(operation_date=d2, amount=cash, description="Cajero", occurrence=0),
        movement_key(operation_date=d1, amount=Decimal("-20.01"), description="Cajero"),
        "ref:OP-7",
        movement_key(operation_date=d1, amount=cash, description="Cajero", occurrence=2),
    ]
    assert len(set(first)) == len(first)
    assert keys_of_one_read() == first  # a re-read gives the same keys


async def test_identical_movements_without_reference_are_all_stored_and_rereads_double_none(
    sqlite_url: str,
) -> None:
    listing = [
        _row("2026-03-02", "-20.00", "Cajero"),
        _row("2026-03-02", "-20.00", "CAJERO "),
        _row("2026-03-01", "5.00", "Bizum"),
    ]
    access_id = await _new_access(sqlite_url)
    async with serve(_ledger_app(listing)) as url:
        assert await _run(sqlite_url, url, LedgerBank, access_id) == (ResultCode.SUCCESS, "")
        _, first = await _stored(sqlite_url, access_id)
        assert await _run(sqlite_url, url, LedgerBank, access_id) == (ResultCode.SUCCESS, "")
        _, second = await _stored(sqlite_url, access_id)
    assert sorted(m.description for m in first) == ["Bizum", "CAJERO ", "Cajero"]
    assert {m.movement_key for m in second} == {m.movement_key for m in first}
    assert len(second) == 3


async def test_a_batch_repeating_a_key_is_refused_whole_and_nothing_stored_changes(
    db_url: str,
) -> None:
    await migrate(db_url)
    access_id = await _new_access(db_url)
    listing = [
        _row("2026-03-02", "-20.00", "Cajero"),
        _row("2026-03-02", "-5.00", "Compra pendiente", pending=True),
    ]
    async with serve(_ledger_app(listing)) as url:
        assert await _run(db_url, url, NaiveLedgerBank, access_id) == (ResultCode.SUCCESS, "")
        _, before = await _stored(db_url, access_id)
        # The next read: a second withdrawal like the first, a new movement, and the pending one
        # gone (stored as a complete read, it would be deleted).
        listing[:] = [
            _row("2026-03-02", "-20.00", "Cajero"),
            _row("2026-03-02", "-20.00", "CAJERO "),
            _row("2026-03-02", "1500.00", "Nómina"),
        ]
        code, detail = await _run(db_url, url, NaiveLedgerBank, access_id)
        _, after = await _stored(db_url, access_id)
    duplicate = movement_key(
        operation_date=date(2026, 3, 2), amount=Decimal("-20.00"), description="Cajero"
    )
    assert code is ResultCode.SITE_CHANGED
    assert "account a1" in detail
    assert duplicate[:40] in detail
    assert "'CAJERO '" in detail
    assert len(before) == 2
    shown = sorted((m.movement_key, m.description, m.pending) for m in after)
    assert shown == sorted((m.movement_key, m.description, m.pending) for m in before)


# -- text that does not decode -------------------------------------------------------------------


def _page_app(body: bytes, content_type: str) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/page", page)
    return app


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    async with _http() as client:
        yield client


async def test_response_text_refuses_bytes_its_charset_cannot_decode(http: HttpClient) -> None:
    body = "Cuenta Café".encode("latin-1")
    async with serve(_page_app(body, "text/html; charset=utf-8")) as url:
        response = await http.get(f"{url}/page?token=s3cr3t")
    with pytest.raises(UndecodableBody) as caught:
        response.text()
    error = caught.value
    assert isinstance(error, ValueError)  # a plain `except ValueError` still catches it
    assert (error.encoding, error.position) == ("utf-8", body.index(b"\xe9"))
    assert error.url == f"{url}/page"
    assert "e9" in str(error)
    assert "s3cr3t" not in str(error)
    # An encoding the caller gives overrides the declared one.
    assert response.text("iso-8859-1") == "Cuenta Café"


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/html", "Cuenta Café"),  # none declared: the default given
        ('text/html; Charset="ISO-8859-1"', "Cuenta Café"),  # quoted, any case
        ("text/html; charset=utf-8", UndecodableBody),  # the declared one wins
        ("text/html; charset=x-klingon", UndecodableBody),  # unknown: refused, not guessed
    ],
)
async def test_response_text_takes_the_declared_charset_else_the_default(
    http: HttpClient, content_type: str, expected: str | type[Exception]
) -> None:
    async with serve(_page_app("Cuenta Café".encode("latin-1"), content_type)) as url:
        response = await http.get(f"{url}/page")
    if isinstance(expected, str):
        assert response.text(default_encoding="iso-8859-1") == expected
    else:
        with pytest.raises(expected):
            response.text(default_encoding="iso-8859-1")


class PageBank(BasicScraper):
    """A bank whose one account's alias is the text of ``GET /page``."""

    bank = "edgebank"
    title = "Edge Bank"

    async def login(self) -> None:
        pass

    async def contracts(self) -> Sequence[ContractInfo]:
        return [ContractInfo("c1")]

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        alias = self.text(await self.get("/page")).strip()
        return [
            AccountRecord("a1", AccountType.CHECKING, "EUR", Decimal(1), number="1", alias=alias)
        ]

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        return []


class Latin1PageBank(PageBank):
    encoding = "iso-8859-1"


@pytest.mark.parametrize(
    ("scraper", "body", "content_type", "alias"),
    [
        # the scraper's encoding, where the server declares none
        (Latin1PageBank, "Cuenta Café".encode("latin-1"), "text/html", "Cuenta Café"),
        # a declared charset wins over it
        (Latin1PageBank, "Cuenta Café".encode(), "text/html; charset=utf-8", "Cuenta Café"),
        # UTF-8 by default
        (PageBank, "Cuenta Café".encode(), "text/html", "Cuenta Café"),
    ],
)
async def test_a_scraper_reads_pages_in_its_encoding_when_none_is_declared(
    sqlite_url: str, scraper: type[BasicScraper], body: bytes, content_type: str, alias: str
) -> None:
    access_id = await _new_access(sqlite_url)
    async with serve(_page_app(body, content_type)) as url:
        assert await _run(sqlite_url, url, scraper, access_id) == (ResultCode.SUCCESS, "")
    accounts, _ = await _stored(sqlite_url, access_id)
    assert [a.alias for a in accounts] == [alias]


async def test_a_page_that_does_not_decode_ends_the_scrape_site_changed(sqlite_url: str) -> None:
    """The scraper reads the page with ``Response.text()``: before, "Caf\\ufffd" was stored."""

    class DeclaredUtf8Bank(PageBank):
        async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
            alias = (await self.get("/page")).text()
            return [
                AccountRecord(
                    "a1", AccountType.CHECKING, "EUR", Decimal(1), number="1", alias=alias
                )
            ]

    access_id = await _new_access(sqlite_url)
    body = "Cuenta Café".encode("latin-1")
    async with serve(_page_app(body, "text/html; charset=utf-8")) as url:
        code, detail = await _run(sqlite_url, url, DeclaredUtf8Bank, access_id)
    assert code is ResultCode.SITE_CHANGED
    assert detail.startswith(f"GET {url}/page: the body is not utf-8")
    accounts, _ = await _stored(sqlite_url, access_id)
    assert accounts == []


# -- links ---------------------------------------------------------------------------------------


class LinkBank(BasicScraper):
    bank = "edgebank"
    title = "Edge Bank"

    async def login(self) -> None:
        await self.get("/login")  # the host's root, whatever folder the bank lives in

    async def contracts(self) -> Sequence[ContractInfo]:
        page = await self.get("posicion")  # relative: in the bank's folder
        return [ContractInfo("c1", link=page.text())]

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        assert contract.link is not None
        balance = (await self.get(contract.link)).text()  # ../ out of the bank's folder
        return [AccountRecord("a1", AccountType.CHECKING, "EUR", Decimal(balance), number="1")]

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        return []


async def test_links_resolve_against_the_bank_folder_as_in_a_browser(sqlite_url: str) -> None:
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.path)
        texts = {"/login": "welcome", "/online/posicion": "../saldos/c1", "/saldos/c1": "12.50"}
        if request.path not in texts:
            raise web.HTTPNotFound()
        return web.Response(text=texts[request.path])

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    access_id = await _new_access(sqlite_url)
    async with serve(app) as url:
        assert await _run(sqlite_url, f"{url}/online", LinkBank, access_id) == (
            ResultCode.SUCCESS,
            "",
        )
    assert seen == ["/login", "/online/posicion", "/saldos/c1"]
    accounts, _ = await _stored(sqlite_url, access_id)
    assert [a.balance for a in accounts] == [Decimal("12.50")]


@pytest.mark.parametrize(
    ("base", "path", "expected"),
    [
        ("https://bank.example", "/login", "https://bank.example/login"),
        ("https://bank.example/", "login", "https://bank.example/login"),
        ("https://bank.example/online", "cuentas", "https://bank.example/online/cuentas"),
        ("https://bank.example/online/", "./cuentas/1", "https://bank.example/online/cuentas/1"),
        ("https://bank.example/online", "/login", "https://bank.example/login"),
        ("https://bank.example/a/b", "../static/x.js", "https://bank.example/a/static/x.js"),
        ("https://bank.example/a/b", "../../../x.js", "https://bank.example/x.js"),
        ("https://bank.example/online", "?pagina=2", "https://bank.example/online/?pagina=2"),
        ("https://bank.example/online", "", "https://bank.example/online/"),
        ("https://bank.example/online", "https://sso.example/auth", "https://sso.example/auth"),
        ("https://bank.example/online", "//cdn.example/a.js", "https://cdn.example/a.js"),
        (
            "http://127.0.0.1:8080",
            "/cuenta/1?desde=01/02/2026",
            "http://127.0.0.1:8080/cuenta/1?desde=01/02/2026",
        ),
    ],
)
async def test_url_joins_like_a_browser(
    sqlite_url: str, base: str, path: str, expected: str
) -> None:
    engine = create_engine(sqlite_url)
    try:
        async with _http() as http, WriteQueue(writers=1) as queue:
            context = ScrapeContext(
                access_id=1,
                login="ana",
                credential=Credential(VAULT, VAULT.encrypt("pw")),
                base_url=base,
                http=http,
                sink=AccessSink(SqlWriter(engine), queue, 1),
                today=TODAY,
            )
            assert LinkBank(context).url(path) == expected
    finally:
        await engine.dispose()
