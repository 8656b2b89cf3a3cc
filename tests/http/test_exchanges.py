"""What an ``HttpClient`` tells its observers of each exchange: the body as it was sent."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from scrapeflow.http import Exchange, HttpClient
from scrapeflow.sandbox import serve


async def test_a_form_given_as_form_data_is_observed_as_the_bytes_sent() -> None:
    received: list[bytes] = []

    async def echo(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/form", echo)
    seen: list[Exchange] = []
    async with serve(app) as url, HttpClient() as http:
        http.observers.append(seen.append)
        form = aiohttp.FormData()
        form.add_field("user", "ana")
        form.add_field("note", "a b&c")
        await http.request("POST", f"{url}/form", data=form)
        await http.request("POST", f"{url}/form", data={"user": "bob"})
    assert [e.request_body for e in seen] == received == [b"user=ana&note=a+b%26c", b"user=bob"]
