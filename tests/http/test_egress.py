"""The egress policy, as a client's URL meets it: every spelling of a blocked address is refused
before any connection, at the check and at dial time (an IP literal, a name, a redirect hop),
through an egress proxy too; and no failure ever carries a byte of what the peer said."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from scrapeflow.errors import ConnectionFailed, EgressBlocked, InputError
from scrapeflow.http import (
    FAILURE_CLASSES,
    EgressPolicy,
    HttpClient,
    HttpConfig,
    RetryPolicy,
    parse_egress_allow,
)
from tests._tinyproxy import require_tinyproxy, run_tinyproxy

BLOCKED = {
    "http://127.0.0.1/": "loopback",
    "http://127.1/": "loopback",
    "http://0x7f.0.0.1/": "loopback",
    "http://0x7f000001/": "loopback",
    "http://2130706433/": "loopback",
    "http://017700000001/": "loopback",
    "http://0177.0.0.1/": "loopback",
    "http://localhost:8080/": "loopback",
    "http://LocalHost/": "loopback",
    "http://[::1]/": "loopback",
    "http://[::ffff:127.0.0.1]/": "loopback",
    "http://[::ffff:7f00:1]/": "loopback",
    "http://[::ffff:0:7f00:1]/": "loopback",
    "http://[64:ff9b::7f00:1]/": "loopback",
    "http://[2002:7f00:1::]/": "loopback",
    "http://0.0.0.0/": "unspecified",
    "http://0/": "unspecified",
    "http://[::]/": "unspecified",
    "http://10.1.2.3/": "private",
    "http://172.16.0.1/": "private",
    "http://192.168.1.1/": "private",
    "http://[fd00::1]/": "private",
    "http://[64:ff9b:1::a]/": "private",
    "http://100.64.0.1/": "shared (CGNAT)",
    "http://169.254.169.254/latest/meta-data/": "link-local",
    "http://[fe80::1]/": "link-local",
    "http://168.63.129.16/": "cloud metadata",
    "http://224.0.0.1/": "multicast",
    "http://[ff02::1]/": "multicast",
    "http://198.18.0.1/": "benchmarking",
    "http://240.0.0.1/": "reserved",
    "http://255.255.255.255/": "broadcast",
    "http://192.0.2.1/": "documentation",
    "http://[3fff::1]/": "documentation",
}


@pytest.mark.parametrize(("url", "address_class"), BLOCKED.items())
async def test_every_spelling_of_a_blocked_address_is_refused(url: str, address_class: str) -> None:
    with pytest.raises(EgressBlocked) as refused:
        await EgressPolicy().check_url(url)
    assert refused.value.address_class == address_class
    assert str(refused.value) == f"blocked by egress policy: {address_class} address"


@pytest.mark.parametrize(
    "url", ["http://93.184.216.34/", "https://[2606:4700:4700::1111]/", "http://8.8.8.8:53/"]
)
async def test_public_addresses_pass(url: str) -> None:
    await EgressPolicy().check_url(url)


async def test_egress_allow_opens_cidrs_names_and_suffixes() -> None:
    allow = parse_egress_allow(["127.0.0.2", "10.0.0.0/8", "Hooks.Internal.", ".corp.example"])
    assert allow == ("127.0.0.2/32", "10.0.0.0/8", "hooks.internal", ".corp.example")
    policy = EgressPolicy(allow=allow)
    await policy.check_url("http://127.0.0.2:9000/hook")
    await policy.check_url("http://10.9.8.7/")
    assert policy.allows_host("hooks.internal")
    assert policy.allows_host("a.b.corp.example")
    assert not policy.allows_host("corp.example.evil")
    with pytest.raises(EgressBlocked):
        await policy.check_url("http://127.0.0.3/")  # the neighbour of an allowed address
    with pytest.raises(ValueError, match="neither a CIDR nor a host name"):
        parse_egress_allow(["http://x/"])


async def test_a_name_that_does_not_resolve_is_judged_when_it_is_dialled() -> None:
    await EgressPolicy().check_url("http://no-such-host.invalid/")  # nothing to dial yet
    with pytest.raises(InputError, match="does not resolve"):
        await EgressPolicy().check_url("http://no-such-host.invalid/", unresolved=False)
    async with client(EgressPolicy()) as http:
        with pytest.raises(ConnectionFailed, match="name not resolved"):
            await http.get("http://no-such-host.invalid/")


@dataclass
class Site:
    url: str
    connections: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def serving(
    host: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> AsyncIterator[Site]:
    site = Site("")

    async def counted(request: web.Request) -> web.StreamResponse:
        site.peers.append(request.remote or "")
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", counted)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, host, 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    site.url = f"http://{host}:{port}"
    try:
        yield site
    finally:
        await runner.cleanup()


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="internal", headers={"X-Internal-Secret": "s3cr3t"})


def client(policy: EgressPolicy) -> HttpClient:
    return HttpClient(
        HttpConfig(egress=policy, retry=RetryPolicy(attempts=4, backoff=0.01), identities="none")
    )


async def test_the_connector_refuses_a_blocked_address_as_it_dials() -> None:
    async with serving("127.0.0.1", ok) as internal:
        port = internal.url.rsplit(":", 1)[1]
        async with client(EgressPolicy()) as http:
            for url in (internal.url, f"http://localhost:{port}/", f"http://0x7f.1:{port}/"):
                with pytest.raises(EgressBlocked) as refused:
                    await http.get(url)
                assert refused.value.address_class == "loopback"
                assert refused.value.attempts == 1  # final: never retried
    assert internal.peers == []  # not one request reached it


async def test_a_redirect_to_a_blocked_address_is_refused_at_the_hop() -> None:
    async with serving("127.0.0.1", ok) as internal:

        async def bounce(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"{internal.url}/admin")

        async with serving("127.0.0.2", bounce) as outside:
            policy = EgressPolicy(allow=parse_egress_allow(["127.0.0.2"]))
            async with client(policy) as http:
                with pytest.raises(EgressBlocked):
                    await http.get(f"{outside.url}/go")
    assert outside.peers == ["127.0.0.1"]
    assert internal.peers == []


async def test_an_allowed_address_is_reached() -> None:
    async with serving("127.0.0.2", ok) as allowed:
        policy = EgressPolicy(allow=parse_egress_allow(["127.0.0.2"]))
        async with client(policy) as http:
            response = await http.get(f"{allowed.url}/page")
    assert (response.status, response.body) == (200, b"internal")


@contextlib.asynccontextmanager
async def raw_peer(host: str, answer: bytes) -> AsyncIterator[str]:
    """A TCP service that says ``answer`` to whoever connects, then hangs up."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(reader.read(1024), 1)
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(talk, host, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}/"
    finally:
        server.close()
        await server.wait_closed()


BANNERS = (
    b"+INTERNAL-SERVICE v1 requirepass=hunter2\r\n",
    b"HTTP/1.1 200 requirepass=hunter2\r\nContent-Length: 10\r\n\r\nhun",
    b"HTTP/9.9 999 requirepass=hunter2\r\n\r\n",
    b"\x0a\x00\x00\x00\x0a5.5.5-MariaDB requirepass=hunter2\x00",
)


@pytest.mark.parametrize("banner", BANNERS)
async def test_a_failure_never_carries_what_the_peer_said(banner: bytes) -> None:
    policy = EgressPolicy(allow=parse_egress_allow(["127.0.0.2"]))
    async with raw_peer("127.0.0.2", banner) as url, client(policy) as http:
        with pytest.raises(ConnectionFailed) as failed:
            await http.get(url)
    said = str(failed.value)
    assert "hunter2" not in said and "requirepass" not in said and "MariaDB" not in said
    phrase = said.rsplit(": ", 1)[-1]
    assert phrase in FAILURE_CLASSES, said


async def test_through_an_egress_proxy_the_target_is_judged_first() -> None:
    require_tinyproxy()
    async with serving("127.0.0.1", ok) as internal, serving("127.0.0.2", ok) as allowed:
        with run_tinyproxy("127.0.0.3") as proxy:
            policy = EgressPolicy(allow=parse_egress_allow(["127.0.0.2"]), proxy=proxy)
            async with client(policy.trusting([proxy])) as http:
                response = await http.get(f"{allowed.url}/through")
                with pytest.raises(EgressBlocked):
                    await http.get(f"{internal.url}/")
    assert response.status == 200
    assert allowed.peers == ["127.0.0.3"]  # it came through the proxy's address
    assert internal.peers == []


def test_the_standard_proxy_variables_are_followed() -> None:
    from scrapeflow.config import Settings

    settings = Settings.load()
    environ = {"HTTPS_PROXY": "http://proxy.internal:3128", "NO_PROXY": "hooks.internal"}
    policy = EgressPolicy.from_settings(settings, environ)
    import yarl

    assert policy.proxy_for(yarl.URL("https://example.com/")) == "http://proxy.internal:3128"
    assert policy.proxy_for(yarl.URL("http://hooks.internal/")) is None
    assert ("proxy.internal", 3128) in policy.trusted  # dialled as the proxy, on its port
    assert not policy.allows_host("proxy.internal")  # as a target, judged like any other


@pytest.mark.parametrize("header", ["Location", "URI"])
async def test_through_an_egress_proxy_each_redirect_hop_is_judged(header: str) -> None:
    require_tinyproxy()
    async with serving("127.0.0.1", ok) as internal:

        async def bounce(request: web.Request) -> web.Response:
            # aiohttp follows URI when there is no Location: both must be judged.
            return web.Response(status=302, headers={header: f"{internal.url}/secret"})

        async with serving("127.0.0.2", bounce) as outside:
            with run_tinyproxy("127.0.0.3") as proxy:
                policy = EgressPolicy(allow=parse_egress_allow(["127.0.0.2"]), proxy=proxy)
                async with client(policy.trusting([proxy])) as http:
                    with pytest.raises(EgressBlocked):
                        await http.get(f"{outside.url}/go")
    assert outside.peers == ["127.0.0.3"]
    assert internal.peers == []


async def test_a_trusted_proxy_is_reachable_on_its_own_port_only() -> None:
    async with serving("127.0.0.1", ok) as internal:
        # The operator's proxy on 127.0.0.1, some other port: dialled as the proxy, but a
        # client's request straight to another port of that address is refused.
        policy = EgressPolicy().trusting(["http://127.0.0.1:3128"])
        async with client(policy) as http:
            with pytest.raises(EgressBlocked):
                await http.get(f"{internal.url}/")
    assert internal.peers == []
