"""SandboxAdmin against a real sandbox on loopback: every admin route, errors, manifests."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import traceback
from collections.abc import AsyncIterator, Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from scrapeflow.errors import ConfigError, MissingSetting, SandboxAdminError
from scrapeflow.sandbox import (
    Hostility,
    Sandbox,
    SandboxAdmin,
    SandboxConfig,
    serve,
)
from scrapeflow.sandbox.banks import BankSettings

TOKEN = "admin-token-that-must-never-show-0123456789"
WRONG = "a-wrong-token-that-must-never-show-either-9876"
OTP_CUSTOMER = 2  # n % 4 == 2: a one-time code at the legacy bank


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    config = SandboxConfig(hostility="none", latency_ms=(0, 0), customers=100, admin_token=TOKEN)
    with Sandbox.in_thread(config) as running:
        yield running


@pytest.fixture
async def admin(sandbox: Sandbox) -> AsyncIterator[SandboxAdmin]:
    async with SandboxAdmin.from_sandbox(sandbox) as client:
        yield client


def never_shows_a_token(exc: BaseException) -> None:
    text = "".join(traceback.format_exception(exc)) + repr(exc)
    assert TOKEN not in text and WRONG not in text, text


# -- every route ----------------------------------------------------------------------------------


async def test_health_names_every_site_with_an_admin_api(
    sandbox: Sandbox, admin: SandboxAdmin
) -> None:
    names = [name for name in sandbox.urls if name != "plain"]
    assert sorted(names) == ["apibank", "feed", "formbank", "legacybank", "neobank"]
    assert [await admin.health(name) for name in names] == names


async def test_the_clock_is_shared_and_only_moves_forward(
    sandbox: Sandbox, admin: SandboxAdmin
) -> None:
    start = sandbox.clock.now()
    assert await admin.now() == start
    moved = await admin.advance(timedelta(days=3, hours=1), site="apibank")
    assert moved == start + timedelta(days=3, hours=1) == sandbox.clock.now()
    assert await admin.now(site="feed") == moved  # one clock for every site
    with pytest.raises(SandboxAdminError) as refused:
        await admin.advance(timedelta(seconds=-1))
    error = refused.value
    assert (error.status, error.method, error.path) == (400, "POST", "/__admin/clock")
    assert "400" in str(error) and "only moves forward" in str(error)
    assert sandbox.clock.now() == moved


async def test_customers_and_their_ground_truth(sandbox: Sandbox, admin: SandboxAdmin) -> None:
    for bank in ("formbank", "apibank", "legacybank"):
        login = await admin.customer(bank, OTP_CUSTOMER)
        assert login == dataclasses.asdict(sandbox.state.world.login(bank, OTP_CUSTOMER))
    assert login["otp_required"] and login["username"] == "L0000002"

    whole = await admin.truth("formbank", "00000002W")
    assert whole["username"] == "00000002W" and whole["customer"] == 2
    assert whole["at"] == sandbox.clock.now().isoformat()
    site = sandbox.sites["formbank"]
    assert [a["id"] for a in whole["accounts"]] == [a.id for a in site.accounts_of(2)]
    since = sandbox.clock.now().date() - timedelta(days=5)
    recent = await admin.truth("formbank", "00000002W", since=since)
    for account, movements in recent["movements"].items():
        assert all(date.fromisoformat(m["operation_date"]) >= since for m in movements)
        assert len(movements) < len(whole["movements"][account]) or not movements
    assert sum(map(len, recent["movements"].values())) > 0

    with pytest.raises(SandboxAdminError) as unknown:
        await admin.truth("formbank", "nobody", since=since)
    error = unknown.value
    assert (error.site, error.status, error.detail) == ("formbank", 404, "no such user")
    assert f"GET /__admin/truth/nobody?since={since.isoformat()} on formbank" in str(error)
    with pytest.raises(SandboxAdminError, match="answered 404"):
        await admin.customer("apibank", 101)  # the sandbox has 100 customers


async def test_one_time_codes(sandbox: Sandbox, admin: SandboxAdmin) -> None:
    login = await admin.customer("legacybank", OTP_CUSTOMER)
    with pytest.raises(SandboxAdminError) as none_yet:
        await admin.otp("legacybank", login["username"])
    assert (none_yet.value.status, none_yet.value.detail) == (404, "no pending code")

    bank = sandbox.urls["legacybank"]
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        async with http.get(f"{bank}/login.jsp") as r:
            assert r.status == 200
        form = {"usuario": login["username"], "password": login["password"]}
        async with http.post(f"{bank}/j_security_check", data=form) as r:
            assert r.url.path == "/otp.jsp"
    code = await admin.otp("legacybank", login["username"])
    assert code.isdigit() and len(code) == 6
    assert code == sandbox.sites["legacybank"].pending_code(OTP_CUSTOMER)


async def test_bank_settings_all_or_nothing(sandbox: Sandbox, admin: SandboxAdmin) -> None:
    site = sandbox.sites["legacybank"]
    assert await admin.bank_settings("legacybank") == BankSettings() == site.settings
    changed = await admin.update_bank_settings("legacybank", layout=2, session_max_requests=5)
    assert changed == BankSettings(layout=2, session_max_requests=5) == site.settings
    with pytest.raises(SandboxAdminError) as refused:
        await admin.update_bank_settings("legacybank", maintenance_rate=0.5, layout=3)
    assert refused.value.status == 400 and "layout" in refused.value.detail
    assert await admin.bank_settings("legacybank") == changed  # nothing applied


async def test_hostility_per_site(sandbox: Sandbox, admin: SandboxAdmin) -> None:
    assert await admin.hostility("feed") == Hostility.profile("none")
    hostile = await admin.set_hostility("feed", profile="hostile", captcha_rate=0)
    assert hostile == dataclasses.replace(Hostility.profile("hostile"), captcha_rate=0.0)
    assert sandbox.sites["feed"].guard.hostility == hostile
    assert await admin.hostility("apibank") == Hostility()  # another site's own switches
    lenient = await admin.set_hostility("feed", check_headers="off")  # from the current ones
    assert (lenient.check_headers, lenient.rate_limit_rps) == (False, 5)
    for bad in ({"profile": "friendly"}, {"nope": 1}):
        with pytest.raises(SandboxAdminError, match="answered 400: unknown hostility"):
            await admin.set_hostility("feed", **bad)


async def test_block_unblock_and_stats(sandbox: Sandbox, admin: SandboxAdmin) -> None:
    page = f"{sandbox.urls['feed']}/u/user0001"
    async with aiohttp.ClientSession() as http:
        async with http.get(page) as r:
            assert r.status == 200
        assert (await admin.stats("feed"))["banned"] == 0  # not counted yet: 0
        await admin.block("feed", "127.0.0.1", seconds=60)
        async with http.get(page) as r:
            assert r.status == 403
        async with http.get(f"{sandbox.urls['apibank']}/api/v2/accounts") as r:
            assert r.status == 401  # a ban is the site's own: the bank still answers
        stats = await admin.stats("feed")
        assert stats["requests"] == 2 and stats["banned"] == 1
        await admin.unblock_all("feed")
        async with http.get(page) as r:
            assert r.status == 200


async def test_feed_profiles(sandbox: Sandbox, admin: SandboxAdmin) -> None:
    feed = sandbox.sites["feed"]
    profile = await admin.profile("feed", "user0001")
    assert profile["profile"] == "user0001"
    assert profile["count"] == feed.post_count("user0001") == len(profile["post_ids"])
    with pytest.raises(SandboxAdminError, match="answered 404: no such profile"):
        await admin.profile("feed", "nobody")


async def test_any_route_through_request(admin: SandboxAdmin) -> None:
    assert await admin.request("feed", "GET", "/__admin/health") == {"site": "feed"}
    with pytest.raises(ConfigError, match="starts with /__admin/"):
        await admin.request("feed", "GET", "/u/user0001")  # the token goes to admin routes only
    with pytest.raises(ConfigError, match="no site 'nope'"):
        await admin.health("nope")
    with pytest.raises(SandboxAdminError, match="answered 404"):
        await admin.health("plain")  # the plain site has no admin API


# -- errors never show the token ------------------------------------------------------------------


async def test_a_wrong_token_is_401_and_no_token_is_shown(sandbox: Sandbox) -> None:
    async with SandboxAdmin(sandbox.urls, WRONG) as wrong:
        assert WRONG not in repr(wrong)
        with pytest.raises(SandboxAdminError) as refused:
            await wrong.now()
    error = refused.value
    assert error.status == 401 and "admin token required" in str(error)
    never_shows_a_token(error)


async def test_refusals_and_dead_sites_do_not_show_the_token(
    sandbox: Sandbox, admin: SandboxAdmin
) -> None:
    with pytest.raises(SandboxAdminError) as refused:
        await admin.otp("legacybank", "L0000001")
    never_shows_a_token(refused.value)

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with SandboxAdmin({"feed": dead}, TOKEN) as client:
        with pytest.raises(SandboxAdminError) as gone:
            await client.stats("feed")
    assert gone.value.status is None and "got no answer" in str(gone.value)
    never_shows_a_token(gone.value)


async def test_slow_and_malformed_answers() -> None:
    """A site that answers too late, or not with a JSON object (a real server on loopback)."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({"now": "2026-03-02T09:00:00+00:00"})

    async def text(request: web.Request) -> web.Response:
        return web.Response(text=f"echo {request.headers['Authorization']}")

    async def listed(request: web.Request) -> web.Response:
        return web.json_response([1, 2])

    async def empty(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/__admin/clock", slow)
    app.router.add_get("/__admin/health", text)
    app.router.add_get("/__admin/stats", listed)
    app.router.add_get("/__admin/otp/{username}", empty)
    app.router.add_get("/__admin/hostility", empty)
    async with serve(app) as url, SandboxAdmin({"feed": url}, TOKEN, timeout=0.2) as client:
        with pytest.raises(SandboxAdminError, match=r"got no answer: nothing within 0\.2 s"):
            await client.now()
        with pytest.raises(SandboxAdminError, match="not a JSON object") as echoed:
            await client.health("feed")
        never_shows_a_token(echoed.value)
        with pytest.raises(SandboxAdminError, match="not a JSON object"):
            await client.stats("feed")
        with pytest.raises(SandboxAdminError, match="answered 200: no 'code' in the answer"):
            await client.otp("feed", "L0000002")
        assert await client.hostility("feed") == Hostility()  # an empty object: the defaults


async def test_a_refusal_that_echoes_the_token_is_redacted() -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"error": request.headers["Authorization"]}, status=403)

    app = web.Application()
    app.router.add_get("/__admin/health", echo)
    async with serve(app) as url, SandboxAdmin({"feed": url}, TOKEN) as client:
        with pytest.raises(SandboxAdminError, match="answered 403: Bearer <admin token>") as got:
            await client.health("feed")
    never_shows_a_token(got.value)


# -- sessions -------------------------------------------------------------------------------------


async def test_a_given_session_is_used_and_left_open(sandbox: Sandbox) -> None:
    async with aiohttp.ClientSession() as http:
        async with SandboxAdmin.from_sandbox(sandbox, session=http) as admin:
            assert await admin.health("feed") == "feed"
        assert not http.closed
        assert await admin.health("apibank") == "apibank"  # still usable: the session is open


async def test_a_client_not_entered_says_so(sandbox: Sandbox) -> None:
    admin = SandboxAdmin.from_sandbox(sandbox)
    with pytest.raises(RuntimeError, match="async with"):
        await admin.now()
    async with admin:
        await admin.now()
    with pytest.raises(RuntimeError, match="not open"):
        await admin.now()  # closed on exit


def test_a_sandbox_not_started_has_no_urls() -> None:
    with pytest.raises(ConfigError, match="not running"):
        SandboxAdmin.from_sandbox(Sandbox(SandboxConfig(admin_token=TOKEN)))


# -- manifests ------------------------------------------------------------------------------------


async def test_from_the_manifest_file_the_sandbox_command_writes(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    path = tmp_path / "sandbox.json"
    path.write_text(json.dumps(sandbox.manifest()))
    async with SandboxAdmin.from_manifest_file(path) as admin:
        assert admin.sites == sandbox.urls
        assert await admin.now() == sandbox.clock.now()
    async with SandboxAdmin.from_manifest(sandbox.manifest()) as admin:
        assert await admin.health("legacybank") == "legacybank"


GOOD_SITES = {"feed": "http://127.0.0.1:8001", "plain": "http://127.0.0.1:8000/"}


@pytest.mark.parametrize(
    ("manifest", "error", "field"),
    [
        ({"admin_token": TOKEN}, MissingSetting, "sites"),
        ({"sites": GOOD_SITES}, MissingSetting, "admin_token"),
        ({"sites": GOOD_SITES, "admin_token": ""}, ConfigError, "admin_token"),
        ({"sites": GOOD_SITES, "admin_token": 12}, ConfigError, "admin_token"),
        ({"sites": [], "admin_token": TOKEN}, ConfigError, "sites must be"),
        ({"sites": {}, "admin_token": TOKEN}, ConfigError, "sites must be"),
        ({"sites": {"feed": "ftp://127.0.0.1"}, "admin_token": TOKEN}, ConfigError, "sites.feed"),
        ({"sites": {"feed": "127.0.0.1:8001"}, "admin_token": TOKEN}, ConfigError, "sites.feed"),
        ({"sites": {"feed": "http://"}, "admin_token": TOKEN}, ConfigError, "sites.feed"),
        ({"sites": {"feed": 8001}, "admin_token": TOKEN}, ConfigError, "sites.feed"),
        (
            {"sites": {"plain": "http://127.0.0.1:8000"}, "admin_token": TOKEN},
            ConfigError,
            "no site with an admin API",
        ),
        (["sites", "admin_token"], ConfigError, "JSON object"),
    ],
)
def test_bad_manifests_name_the_field(manifest: Any, error: type[Exception], field: str) -> None:
    with pytest.raises(error, match=field) as refused:
        SandboxAdmin.from_manifest(manifest)
    assert "the sandbox manifest" in str(refused.value)
    assert TOKEN not in str(refused.value)
    if error is MissingSetting:
        assert refused.value.name == field


def test_a_good_manifest_keeps_only_what_the_client_needs() -> None:
    admin = SandboxAdmin.from_manifest({"sites": GOOD_SITES, "admin_token": TOKEN, "seed": 7})
    assert admin.sites == {"feed": "http://127.0.0.1:8001", "plain": "http://127.0.0.1:8000"}
    assert repr(admin) == "SandboxAdmin(sites=['feed', 'plain'])"


def test_manifest_files_that_cannot_be_used(tmp_path: Path) -> None:
    missing = tmp_path / "absent.json"
    with pytest.raises(ConfigError, match=f"cannot read the sandbox manifest {missing}"):
        SandboxAdmin.from_manifest_file(missing)
    broken = tmp_path / "broken.json"
    broken.write_text('{"admin_token": "' + TOKEN + '", "sites": ')
    with pytest.raises(ConfigError, match="is not JSON") as refused:
        SandboxAdmin.from_manifest_file(broken)
    assert TOKEN not in str(refused.value)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"sites": {"feed": "gopher://x"}, "admin_token": TOKEN}))
    with pytest.raises(ConfigError, match=f"manifest {partial}: sites.feed must be an http"):
        SandboxAdmin.from_manifest_file(partial)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ConfigError, match="admin token"):
        SandboxAdmin(GOOD_SITES, " ")
    with pytest.raises(ConfigError, match="timeout"):
        SandboxAdmin(GOOD_SITES, TOKEN, timeout=0)
