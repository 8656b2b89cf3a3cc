"""The scrape and scrape_with_validation executors against the sandbox site."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from scrapeflow.executor import Context, execute_async
from scrapeflow.scrape import scrape, scrape_with_validation
from scrapeflow.statusdata import StatusData


def load(directory: Path, key: str) -> dict:
    return json.loads((directory / f"{key}.status.json").read_text())


async def test_get_stores_the_body_unchanged(tmp_path: Path, plain_site) -> None:
    url = f"{plain_site.url}/bytes/300000"  # large enough to be written from a thread
    await execute_async([scrape], tmp_path, {"big": {"url": url}})
    body = (tmp_path / "big.scrape").read_bytes()
    status = load(tmp_path, "big")
    assert len(body) == 300000
    assert status["scrape"]["content"] == hashlib.md5(body).hexdigest()
    assert status["scrape"]["http_status"] == 200
    assert status["scrape"]["final_url"] == url


async def test_post_payload_is_sent_as_a_form(tmp_path: Path, plain_site) -> None:
    tasks = {"post": {"url": f"{plain_site.url}/echo", "post_payload": {"q": "river", "n": "2"}}}
    await execute_async([scrape], tmp_path, tasks)
    echoed = json.loads((tmp_path / "post.scrape").read_bytes())
    assert echoed["method"] == "POST"
    assert echoed["body"] == {"q": "river", "n": "2"}


async def test_get_without_payload_and_custom_headers(tmp_path: Path, plain_site) -> None:
    tasks = {"get": {"url": f"{plain_site.url}/echo?a=1", "headers": {"Accept-Language": "es"}}}
    await execute_async([scrape], tmp_path, tasks)
    echoed = json.loads((tmp_path / "get.scrape").read_bytes())
    assert echoed["method"] == "GET"
    assert echoed["query"] == {"a": "1"}
    assert echoed["headers"]["Accept-Language"] == "es"


async def test_non_200_is_an_error_and_stores_no_body(tmp_path: Path, plain_site) -> None:
    tasks = {
        "e503": {"url": f"{plain_site.url}/status/503"},
        "e201": {"url": f"{plain_site.url}/status/201"},
    }
    assert await execute_async([scrape], tmp_path, tasks) == []
    assert load(tmp_path, "e503")["scrape_status"] == "ERROR HTTPStatusError::HTTP response 503"
    assert load(tmp_path, "e201")["scrape_status"] == "ERROR HTTPStatusError::HTTP response 201"
    assert not list(tmp_path.glob("*.scrape"))


async def test_redirect_is_followed_and_final_url_recorded(tmp_path: Path, plain_site) -> None:
    url = f"{plain_site.url}/redirect/5"
    await execute_async([scrape], tmp_path, {"r": {"url": url}})
    assert load(tmp_path, "r")["scrape"]["final_url"] == plain_site.page_url(5)
    assert b'data-page="5"' in (tmp_path / "r.scrape").read_bytes()


async def test_validation_with_key_form_and_removal_of_old_body(tmp_path: Path, plain_site) -> None:
    verdict = {"accept": True}

    def callback(content: bytes) -> None:
        if not verdict["accept"]:
            raise RuntimeError("captcha page")

    async def guarded(context: Context, key: str, status: StatusData) -> StatusData:
        return await scrape_with_validation(context, key, status, callback)

    tasks = {"p": {"url": plain_site.page_url(7)}}
    await execute_async([guarded], tmp_path, tasks)
    assert (tmp_path / "p.scrape").exists()

    verdict["accept"] = False
    await execute_async([guarded], tmp_path, ["p"], force_executors=["guarded"])
    assert load(tmp_path, "p")["guarded_status"] == "ERROR RuntimeError::captcha page"
    assert not (tmp_path / "p.scrape").exists()


async def test_callback_raising_another_error_fails_the_task(tmp_path: Path, plain_site) -> None:
    def callback(content: bytes) -> None:
        raise KeyError("no ytInitialData")

    async def checked(context, status):
        return await scrape_with_validation(context, status, response_callback=callback)

    assert await execute_async([checked], tmp_path, {"p": {"url": plain_site.page_url(1)}}) == []
    assert (
        load(tmp_path, "p")["checked_status"]
        == "ERROR ValidationFailed::KeyError: 'no ytInitialData'"
    )
