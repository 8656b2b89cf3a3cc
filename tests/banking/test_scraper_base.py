"""BasicScraper's own behaviour, with a small bank of the test's making on loopback: a login
cut by a dropped connection is started over; a bank that keeps ending sessions gives up."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from pathlib import Path

from aiohttp import web

from scrapeflow.banking import (
    AccessSink,
    AccountRecord,
    AccountType,
    BasicScraper,
    ContractInfo,
    Credential,
    MovementRecord,
    ResultCode,
    ScrapeContext,
    SqlWriter,
    WriteQueue,
    migrate,
    result_for,
)
from scrapeflow.db import create_engine, session_factory
from scrapeflow.errors import SessionExpired
from scrapeflow.sandbox import serve

from . import _harness as h


class TinyBank(BasicScraper):
    bank = "tinybank"
    title = "Tiny Bank"

    async def login(self) -> None:
        await self.get("/form")
        await self.post("/login", data={"user": self.context.login, "pass": self.password()})

    async def contracts(self) -> Sequence[ContractInfo]:
        return [ContractInfo("c1")]

    async def accounts(self, contract: ContractInfo) -> Sequence[AccountRecord]:
        page = await self.get("/accounts")
        if page.text() == "login first":
            raise SessionExpired("sent to the login page")
        return [AccountRecord("a1", AccountType.CHECKING, "EUR", Decimal(page.text()), number="1")]

    async def movements(self, account: AccountRecord, since: date) -> Sequence[MovementRecord]:
        return []


async def _scrape(tmp_path: Path, url: str) -> tuple[ResultCode, str]:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'tiny.db'}"
    await migrate(db_url)
    access_id = await h.add_access(db_url, "tinybank", 1, "ana", "pw")
    engine = create_engine(db_url)
    try:
        async with h.fast_http() as http, WriteQueue() as queue:
            context = ScrapeContext(
                access_id=access_id,
                login="ana",
                credential=Credential(h.VAULT, h.VAULT.encrypt("pw")),
                base_url=url,
                http=http,
                sink=AccessSink(SqlWriter(session_factory(engine)), queue, access_id),
                today=date(2026, 3, 2),
            )
            try:
                await TinyBank(context).main()
            except Exception as exc:
                return result_for(exc)
            return ResultCode.SUCCESS, ""
    finally:
        await engine.dispose()


async def test_a_login_cut_by_a_dropped_connection_is_started_over(tmp_path: Path) -> None:
    posts: list[str] = []

    async def form(request: web.Request) -> web.Response:
        return web.Response(text="form")

    async def login(request: web.Request) -> web.Response:
        posts.append((await request.post())["pass"])
        if len(posts) == 1:  # the first login's connection drops before any answer
            assert request.transport is not None
            request.transport.abort()
        return web.Response(text="welcome")

    async def accounts(request: web.Request) -> web.Response:
        return web.Response(text="12.50")

    app = web.Application()
    app.router.add_get("/form", form)
    app.router.add_post("/login", login)
    app.router.add_get("/accounts", accounts)
    async with serve(app) as url:
        code, detail = await _scrape(tmp_path, url)
    assert (code, detail) == (ResultCode.SUCCESS, "")
    assert posts == ["pw", "pw"]  # the whole login again: form, then one more POST


async def test_a_bank_that_keeps_ending_sessions_is_unavailable(tmp_path: Path) -> None:
    logins = 0

    async def form(request: web.Request) -> web.Response:
        return web.Response(text="form")

    async def login(request: web.Request) -> web.Response:
        nonlocal logins
        logins += 1
        return web.Response(text="welcome")

    async def accounts(request: web.Request) -> web.Response:
        return web.Response(text="login first")

    app = web.Application()
    app.router.add_get("/form", form)
    app.router.add_post("/login", login)
    app.router.add_get("/accounts", accounts)
    async with serve(app) as url:
        code, detail = await _scrape(tmp_path, url)
    assert code is ResultCode.BANK_UNAVAILABLE
    assert "ended the session" in detail
    assert logins == 1 + TinyBank.relogins
