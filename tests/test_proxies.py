"""Proxy providers: static lists, checking proxies through a real tinyproxy, remote services.

The remote services are fakes on 127.0.0.1 that answer the way the services' documentation
says; each records what it was sent so the tests can check the documented auth and params.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from scrapeflow.errors import (
    ConfigError,
    InputError,
    MissingSetting,
    ProxiesNotLoaded,
    ProxyListUnavailable,
)
from scrapeflow.proxies import (
    NO_COUNTRY,
    ProxyProvider,
    ProxyProviderFromDict,
    ProxyProviderFromIPRoyal,
    ProxyProviderFromList,
    ProxyProviderFromProxyscrape,
    ProxyProviderFromWebshare,
)
from scrapeflow.sandbox import PlainSite, SiteConfig, serve
from tests._tinyproxy import free_port, run_tinyproxy

API_KEY = "sk-test-9f8e7d6c5b4a"
PROXY_PASSWORD = "pr0xy-pa55w0rd"


def picks(provider: ProxyProvider, country: str | None = None, n: int = 200) -> set[str | None]:
    """Every proxy ``get_one_proxy`` hands out over ``n`` draws."""
    return {provider.get_one_proxy(country) for _ in range(n)}


# --- Static providers --------------------------------------------------------------------------


def test_list_provider_hands_out_its_proxies() -> None:
    proxies = ["http://127.0.0.2:8888", "http://user:pw@127.0.0.3:8888"]
    provider = ProxyProviderFromList(proxies)
    assert provider.loaded
    assert provider.proxies == {"": proxies}
    assert picks(provider) == set(proxies)


def test_dict_provider_uses_star_when_no_country_is_asked() -> None:
    provider = ProxyProviderFromDict(
        {
            "US": ["http://127.0.0.2:1001", "http://127.0.0.2:1002"],
            "DE": ["http://127.0.0.3:1003"],
            "*": ["http://127.0.0.4:1004"],
        }
    )
    assert picks(provider) == {"http://127.0.0.4:1004"}
    assert picks(provider, "US") == {"http://127.0.0.2:1001", "http://127.0.0.2:1002"}
    assert picks(provider, "DE") == {"http://127.0.0.3:1003"}
    assert provider.get_one_proxy("FR") is None


def test_dict_provider_without_star_picks_from_every_country() -> None:
    provider = ProxyProviderFromDict({"US": ["http://127.0.0.2:1"], "DE": ["http://127.0.0.3:2"]})
    assert picks(provider) == {"http://127.0.0.2:1", "http://127.0.0.3:2"}


def test_bad_proxies_are_not_handed_out_and_none_when_all_are_bad() -> None:
    provider = ProxyProviderFromList(["http://127.0.0.2:1", "http://127.0.0.3:2"])
    provider.mark_bad("http://127.0.0.2:1")
    assert picks(provider) == {"http://127.0.0.3:2"}
    provider.mark_bad("http://127.0.0.3:2")
    assert provider.get_one_proxy() is None


@pytest.mark.parametrize(
    "proxy",
    [
        "ftp://bob:hunter2@127.0.0.2:21",  # not http(s)
        "http://bob:hunter2@127.0.0.2",  # no port
        "127.0.0.2:8888",  # no scheme
        "http://bob:hunter2@:8888",  # no host
    ],
)
def test_invalid_proxy_url_is_an_input_error_without_the_password(proxy: str) -> None:
    with pytest.raises(InputError, match="not a proxy URL") as info:
        ProxyProviderFromList(["http://127.0.0.2:8888", proxy])
    assert "hunter2" not in str(info.value)


def test_repr_hides_passwords() -> None:
    provider = ProxyProviderFromDict({"US": [f"http://bob:{PROXY_PASSWORD}@127.0.0.2:8888"]})
    text = repr(provider)
    assert "ProxyProviderFromDict" in text
    assert "'US': 1" in text
    assert PROXY_PASSWORD not in text
    assert "bob" not in text


# --- check_proxies through a real proxy ----------------------------------------------------------


@pytest.fixture
async def check_target() -> AsyncIterator[tuple[PlainSite, str]]:
    """The plain site in this loop; check_proxies fetches one of its pages."""
    site = PlainSite(SiteConfig(pages=10))
    async with serve(site.app()) as url:
        yield site, f"{url}/page/1"


async def test_check_proxies_marks_a_dead_proxy_bad_and_keeps_the_live_one(check_target) -> None:
    site, check_url = check_target
    dead = f"http://127.0.0.1:{free_port()}"
    with run_tinyproxy("127.0.0.2") as alive:
        provider = ProxyProviderFromList([alive, dead], check_url=check_url)
        await provider.check_proxies(timeout=5, retries=2)
    assert provider.bad_proxies == {dead}
    assert site.hits["/page/1"] == 1  # the live proxy really fetched the check page
    assert picks(provider) == {alive}


async def test_a_proxy_that_comes_back_alive_is_taken_out_of_bad_proxies(check_target) -> None:
    _site, check_url = check_target
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    provider = ProxyProviderFromList([proxy], check_url=check_url)
    await provider.check_proxies(timeout=5, retries=1)
    assert provider.bad_proxies == {proxy}
    assert provider.get_one_proxy() is None

    with run_tinyproxy("127.0.0.3", port=port) as url:
        assert url == proxy
        await provider.check_proxies(timeout=5, retries=1)
    assert provider.bad_proxies == set()
    assert provider.get_one_proxy() == proxy


# --- Fakes of the remote services ----------------------------------------------------------------


@dataclass
class FakeService:
    """A loopback stand-in for a proxy service: the answer it gives and the requests it got."""

    answer: Callable[[web.Request], web.Response]
    requests: list[web.Request] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request)
        return self.answer(request)


@pytest.fixture
async def fake_service() -> AsyncIterator[Callable[[str, Any], Any]]:
    """``await start(route, answer)`` serves ``answer`` at ``route`` and returns the FakeService."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(route: str, answer: Callable[[web.Request], web.Response]) -> FakeService:
            service = FakeService(answer)
            app = web.Application()
            app.router.add_get(route, service.handle)
            service.url = await stack.enter_async_context(serve(app))
            return service

        yield start


def proxyscrape_entry(ip: str, port: int, country: str | None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "alive": True,
        "anonymity": "elite",
        "ip": ip,
        "port": port,
        "protocol": "http",
        "proxy": f"{ip}:{port}",
        "ssl": False,
        "timeout": 512.4,
        "uptime": 97.5,
    }
    if country is not None:
        entry["ip_data"] = {"countryCode": country, "country": "?", "as": "AS0 test"}
    entry.update(extra)
    return entry


def proxyscrape_answer(entries: list[dict[str, Any]]) -> Callable[[web.Request], web.Response]:
    body = {"shown_records": len(entries), "total_records": len(entries), "proxies": entries}
    return lambda request: web.json_response(body)


async def test_proxyscrape_files_live_http_proxies_by_country(fake_service) -> None:
    entries = [
        proxyscrape_entry("127.0.0.2", 8080, "US"),
        proxyscrape_entry("127.0.0.3", 3128, "US"),
        proxyscrape_entry("127.0.0.4", 80, "DE"),
        proxyscrape_entry("127.0.0.5", 8888, None),
        proxyscrape_entry("127.0.0.6", 1080, "US", protocol="socks5"),
        proxyscrape_entry("127.0.0.7", 8080, "US", alive=False),
    ]
    fake = await fake_service("/v3/free-proxy-list/get", proxyscrape_answer(entries))
    provider = ProxyProviderFromProxyscrape(base_url=f"{fake.url}/v3", country="all")
    with pytest.raises(ProxiesNotLoaded):
        provider.get_one_proxy()

    await provider.load()

    assert provider.proxies == {
        "US": ["http://127.0.0.2:8080", "http://127.0.0.3:3128"],
        "DE": ["http://127.0.0.4:80"],
        "": ["http://127.0.0.5:8888"],
    }
    assert picks(provider, "DE") == {"http://127.0.0.4:80"}
    (request,) = fake.requests
    assert request.query["request"] == "displayproxies"
    assert request.query["protocol"] == "http"
    assert request.query["format"] == "json"
    assert request.query["country"] == "all"
    assert request.query["timeout"] == "10000"


async def test_load_fetches_once_and_refresh_fetches_again(fake_service) -> None:
    fake = await fake_service(
        "/v3/free-proxy-list/get", proxyscrape_answer([proxyscrape_entry("127.0.0.2", 80, "FR")])
    )
    provider = ProxyProviderFromProxyscrape(base_url=f"{fake.url}/v3")
    await provider.load()
    await provider.load()
    assert len(fake.requests) == 1
    provider.mark_bad("http://127.0.0.2:80")
    await provider.refresh()
    assert len(fake.requests) == 2
    assert provider.bad_proxies == {"http://127.0.0.2:80"}  # still listed, so still bad


def webshare_result(n: int, country: str, *, valid: bool = True) -> dict[str, Any]:
    return {
        "id": f"d-{n}",
        "username": f"user{n}",
        "password": f"{PROXY_PASSWORD}{n}",
        "proxy_address": f"127.0.1.{n}",
        "port": 6000 + n,
        "valid": valid,
        "last_verification": "2024-05-01T10:00:00.000000-07:00",
        "country_code": country,
        "city_name": "Somewhere",
        "created_at": "2024-04-01T10:00:00.000000-07:00",
    }


def webshare_answer(pages: list[list[dict[str, Any]]]) -> Callable[[web.Request], web.Response]:
    """Webshare's paginated answer; ``next`` is the absolute URL the real service would give."""

    def answer(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Token {API_KEY}":
            return web.json_response({"detail": "Invalid token."}, status=401)
        page = int(request.query.get("page", "1"))
        size = request.query.get("page_size", "25")
        more = page < len(pages)
        base = "https://proxy.webshare.io/api/v2/proxy/list/?mode=direct"
        count = sum(len(p) for p in pages)
        return web.json_response(
            {
                "count": count,
                "next": f"{base}&page={page + 1}&page_size={size}" if more else None,
                "previous": f"{base}&page={page - 1}&page_size={size}" if page > 1 else None,
                "results": pages[page - 1] if page <= len(pages) else [],
            }
        )

    return answer


async def test_webshare_reads_every_page_with_the_token_header(fake_service) -> None:
    pages = [
        [webshare_result(1, "US"), webshare_result(2, "DE"), webshare_result(3, "US", valid=False)],
        [webshare_result(4, "US")],
    ]
    fake = await fake_service("/api/v2/proxy/list/", webshare_answer(pages))
    provider = ProxyProviderFromWebshare(api_key=API_KEY, base_url=f"{fake.url}/api/v2")

    await provider.load()

    assert provider.proxies == {
        "US": [
            f"http://user1:{PROXY_PASSWORD}1@127.0.1.1:6001",
            f"http://user4:{PROXY_PASSWORD}4@127.0.1.4:6004",
        ],
        "DE": [f"http://user2:{PROXY_PASSWORD}2@127.0.1.2:6002"],
    }
    assert [r.query["page"] for r in fake.requests] == ["1", "2"]
    for request in fake.requests:
        assert request.headers["Authorization"] == f"Token {API_KEY}"
        assert request.query["mode"] == "direct"
        assert int(request.query["page_size"]) > 0
        assert API_KEY not in str(request.rel_url)  # the key travels in the header only
    assert PROXY_PASSWORD not in repr(provider)
    assert API_KEY not in repr(provider)


async def test_webshare_key_from_the_environment(fake_service, monkeypatch) -> None:
    monkeypatch.setenv("WEBSHARE_API_KEY", API_KEY)
    fake = await fake_service("/api/v2/proxy/list/", webshare_answer([[webshare_result(1, "GB")]]))
    provider = ProxyProviderFromWebshare(base_url=f"{fake.url}/api/v2")
    await provider.load()
    assert provider.get_one_proxy("GB") == f"http://user1:{PROXY_PASSWORD}1@127.0.1.1:6001"
    assert fake.requests[0].headers["Authorization"] == f"Token {API_KEY}"


def iproyal_answer(order_id: int, proxies: list[Any]) -> Callable[[web.Request], web.Response]:
    """IPRoyal's "Get Order" answer for one order, as documented."""

    def answer(request: web.Request) -> web.Response:
        if request.headers.get("X-Access-Token") != API_KEY:
            return web.json_response({"message": "Unauthenticated."}, status=401)
        if request.match_info["order_id"] != str(order_id):
            return web.json_response({"message": "Not found."}, status=404)
        return web.json_response(
            {
                "id": order_id,
                "note": None,
                "product_name": "Static Residential",
                "plan_name": "30 Days",
                "expire_date": "2030-04-20 10:25:12",
                "status": "confirmed",
                "location": "United States",
                "quantity": len(proxies),
                "questions_answers": [],
                "proxy_data": {"ports": {"socks5": 12324, "http|https": 12323}, "proxies": proxies},
                "auto_extend_settings": None,
                "extended_history": [],
            }
        )

    return answer


async def test_iproyal_reads_the_order_with_the_access_token(fake_service) -> None:
    proxies = [
        {"ip": "127.0.2.1", "username": "royal", "password": PROXY_PASSWORD},
        {"ip": "127.0.2.2", "username": "royal", "password": PROXY_PASSWORD},
        f"127.0.2.3:12323:royal:{PROXY_PASSWORD}",  # IPRoyal's host:port:user:password string
    ]
    fake = await fake_service("/v1/reseller/orders/{order_id}", iproyal_answer(4242, proxies))
    provider = ProxyProviderFromIPRoyal(
        api_key=API_KEY, order_id=4242, base_url=f"{fake.url}/v1/reseller"
    )

    await provider.load()

    assert provider.proxies == {
        "": [f"http://royal:{PROXY_PASSWORD}@127.0.2.{n}:12323" for n in (1, 2, 3)]
    }
    (request,) = fake.requests
    assert request.path == "/v1/reseller/orders/4242"
    assert request.headers["X-Access-Token"] == API_KEY
    assert PROXY_PASSWORD not in repr(provider)


async def test_iproyal_key_and_order_from_the_environment(fake_service, monkeypatch) -> None:
    monkeypatch.setenv("IPROYAL_API_KEY", API_KEY)
    monkeypatch.setenv("IPROYAL_ORDER_ID", "77")
    answer = iproyal_answer(77, [{"ip": "127.0.2.9", "username": "u", "password": "p"}])
    fake = await fake_service("/v1/reseller/orders/{order_id}", answer)
    provider = ProxyProviderFromIPRoyal(base_url=f"{fake.url}/v1/reseller")
    await provider.load()
    assert provider.get_one_proxy() == "http://u:p@127.0.2.9:12323"


@pytest.mark.parametrize(
    ("make", "variable"),
    [
        (lambda: ProxyProviderFromWebshare(), "WEBSHARE_API_KEY"),
        (lambda: ProxyProviderFromIPRoyal(order_id=1), "IPROYAL_API_KEY"),
        (lambda: ProxyProviderFromIPRoyal(api_key=API_KEY), "IPROYAL_ORDER_ID"),
    ],
)
def test_missing_setting_names_the_argument_and_the_variable(make, variable, monkeypatch) -> None:
    for name in ("WEBSHARE_API_KEY", "IPROYAL_API_KEY", "IPROYAL_ORDER_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(MissingSetting) as info:
        make()
    assert info.value.name == variable
    argument = "order_id" if variable == "IPROYAL_ORDER_ID" else "api_key"
    assert f"{argument}=" in str(info.value)
    assert variable in str(info.value)


def test_iproyal_order_id_must_be_a_number() -> None:
    with pytest.raises(ConfigError, match="order_id must be a number"):
        ProxyProviderFromIPRoyal(api_key=API_KEY, order_id="12/../../user")


# --- Failures ----------------------------------------------------------------------------------

SERVICES = {
    "proxyscrape": ("/v3/free-proxy-list/get", "/v3", "ProxyScrape"),
    "webshare": ("/api/v2/proxy/list/", "/api/v2", "Webshare"),
    "iproyal": ("/v1/reseller/orders/{order_id}", "/v1/reseller", "IPRoyal"),
}


def make_provider(service: str, base_url: str) -> ProxyProvider:
    if service == "proxyscrape":
        return ProxyProviderFromProxyscrape(base_url=base_url, timeout=5)
    if service == "webshare":
        return ProxyProviderFromWebshare(api_key=API_KEY, base_url=base_url, timeout=5)
    return ProxyProviderFromIPRoyal(api_key=API_KEY, order_id=9, base_url=base_url, timeout=5)


EMPTY = {
    "proxyscrape": {"shown_records": 0, "total_records": 0, "proxies": []},
    "webshare": {"count": 0, "next": None, "previous": None, "results": []},
    "iproyal": {"id": 9, "status": "expired", "proxy_data": {"ports": {}, "proxies": []}},
}


def failing(kind: str, service: str) -> Callable[[web.Request], web.Response]:
    if kind == "unauthorized":
        return lambda r: web.json_response({"detail": f"Invalid token {API_KEY}"}, status=401)
    if kind == "server error":
        return lambda r: web.Response(status=503, text="maintenance")
    if kind == "not json":
        return lambda r: web.Response(text="<html>captcha</html>", content_type="text/html")
    if kind == "wrong shape":
        return lambda r: web.json_response(["not", "an", "object"])
    return lambda r: web.json_response(EMPTY[service])


@pytest.mark.parametrize("service", sorted(SERVICES))
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("unauthorized", r"HTTP 401 Unauthorized from http://127\.0\.0\.1:\d+/"),
        ("server error", r"HTTP 503 Service Unavailable from "),
        ("not json", r"did not answer JSON"),
        ("wrong shape", r"no '[a-z_.]+' list in "),
        ("empty", r"no usable proxy|order 9 has no proxies \(status 'expired'\)"),
    ],
)
async def test_a_failed_fetch_is_proxy_list_unavailable_without_the_key(
    fake_service, service: str, kind: str, expected: str
) -> None:
    route, prefix, name = SERVICES[service]
    fake = await fake_service(route, failing(kind, service))
    provider = make_provider(service, fake.url + prefix)
    with pytest.raises(ProxyListUnavailable) as info:
        await provider.load()
    message = str(info.value)
    assert message.startswith(f"{name} proxy list unavailable: ")
    assert re.search(expected, message), message
    assert "\n" not in message
    assert API_KEY not in message
    assert not provider.loaded
    with pytest.raises(ProxiesNotLoaded):
        provider.get_one_proxy()


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_an_unreachable_service_is_proxy_list_unavailable(service: str) -> None:
    _route, prefix, name = SERVICES[service]
    base_url = f"http://127.0.0.1:{free_port()}{prefix}"
    provider = make_provider(service, base_url)
    with pytest.raises(
        ProxyListUnavailable, match=f"^{name} proxy list unavailable: cannot"
    ) as info:
        await provider.load()
    assert "127.0.0.1" in str(info.value)
    assert API_KEY not in str(info.value)


async def test_the_key_is_not_sent_where_next_points(fake_service) -> None:
    """A `next` URL naming another host is not followed: the key goes to base_url only."""
    elsewhere = await fake_service("/steal", lambda r: web.json_response({"results": []}))

    def answer(request: web.Request) -> web.Response:
        page = int(request.query["page"])
        return web.json_response(
            {
                "count": 2,
                "next": f"{elsewhere.url}/steal?page=2" if page == 1 else None,
                "previous": None,
                "results": [webshare_result(page, "US")],
            }
        )

    fake = await fake_service("/api/v2/proxy/list/", answer)
    provider = ProxyProviderFromWebshare(api_key=API_KEY, base_url=f"{fake.url}/api/v2")
    await provider.load()
    assert len(provider.all_proxies()) == 2
    assert elsewhere.requests == []
    assert [r.query["page"] for r in fake.requests] == ["1", "2"]


async def test_a_service_that_does_not_answer_in_time_is_proxy_list_unavailable() -> None:
    async def too_slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.json_response({"results": [webshare_result(1, "US")], "next": None})

    app = web.Application()
    app.router.add_get("/api/v2/proxy/list/", too_slow)
    async with serve(app) as url:
        provider = ProxyProviderFromWebshare(api_key=API_KEY, base_url=f"{url}/api/v2", timeout=0.2)
        with pytest.raises(ProxyListUnavailable, match=r"no answer from .* within 0\.2 s$"):
            await provider.load()


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_a_redirect_is_not_followed_with_the_key(fake_service, service: str) -> None:
    elsewhere = await fake_service("/collect", lambda r: web.json_response({}))
    route, prefix, name = SERVICES[service]

    def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{elsewhere.url}/collect")

    fake = await fake_service(route, redirect)
    provider = make_provider(service, fake.url + prefix)
    with pytest.raises(ProxyListUnavailable, match=f"^{name} proxy list unavailable: HTTP 302"):
        await provider.load()
    assert len(fake.requests) == 1
    assert elsewhere.requests == []


def test_remote_providers_do_no_io_when_constructed() -> None:
    """No event loop runs here: a constructor that fetched or needed a loop would fail."""
    closed = f"http://127.0.0.1:{free_port()}"
    for provider in (
        ProxyProviderFromProxyscrape(base_url=closed),
        ProxyProviderFromWebshare(api_key=API_KEY, base_url=closed),
        ProxyProviderFromIPRoyal(api_key=API_KEY, order_id=1, base_url=closed),
    ):
        assert not provider.loaded
        assert provider.proxies == {}


def test_a_proxy_file_is_read_line_by_line_and_a_bad_line_named_by_number(tmp_path) -> None:
    good = tmp_path / "proxies.txt"
    good.write_text("# exits\n\nhttp://u:p@127.0.0.2:8888\nhttps://127.0.0.3:443\n")
    provider = ProxyProviderFromList.from_file(good)
    assert sorted(provider.proxies[NO_COUNTRY]) == [
        "http://u:p@127.0.0.2:8888",
        "https://127.0.0.3:443",
    ]

    bad = tmp_path / "bad.txt"
    bad.write_text("http://127.0.0.2:8888\nhttp://user:hunter2@\n")
    with pytest.raises(InputError, match=r"bad.txt:2: ") as caught:
        ProxyProviderFromList.from_file(bad)
    assert "hunter2" not in str(caught.value)

    latin = tmp_path / "latin1.txt"
    latin.write_bytes("http://usér:p@127.0.0.2:8888\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.txt: the proxy list is not UTF-8 text"):
        ProxyProviderFromList.from_file(latin)
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(InputError, match="no proxy in the file"):
        ProxyProviderFromList.from_file(empty)
    with pytest.raises(InputError, match=r"missing\.txt: no such file"):
        ProxyProviderFromList.from_file(tmp_path / "missing.txt")
