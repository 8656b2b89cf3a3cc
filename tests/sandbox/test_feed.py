"""The feed over HTTP: both pagings yield every post exactly once, cursors and signatures hold."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from scrapeflow.errors import SandboxAdminError
from scrapeflow.sandbox import FeedProfile, SandboxAdmin, serve
from scrapeflow.sandbox._feed import FeedSite
from scrapeflow.sandbox._hostility import Hostility
from scrapeflow.sandbox._site import SandboxState

BIG, SMALL, TINY = "user0000", "user0001", "user0023"  # 3,499, 364 and 5 posts with seed 0
ARTICLE_ID = re.compile(r'<article class="post" data-id="(\d+)"')
NEXT = re.compile(r'<a class="next" rel="next" href="([^"]+)"')
SHARED = re.compile(r"window\._sharedData = (\{.*?\});</script>")


def gis(rhx_gis: str, variables: str) -> str:
    return hashlib.md5(f"{rhx_gis}:{variables}".encode()).hexdigest()


@dataclass
class Feed:
    site: FeedSite
    url: str
    session: aiohttp.ClientSession
    admin: SandboxAdmin

    async def truth(self, profile: str) -> FeedProfile:
        return await self.admin.profile("feed", profile)

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(self.url + path) as r:
            return r.status, await r.text()

    async def shared_data(self, profile: str) -> dict[str, Any]:
        status, html = await self.get(f"/u/{profile}")
        assert status == 200
        return json.loads(SHARED.search(html).group(1))

    async def graphql(
        self, variables: dict[str, Any] | str, *, rhx_gis: str | None = None, sign: bool = True
    ) -> tuple[int, dict[str, Any]]:
        text = variables if isinstance(variables, str) else json.dumps(variables)
        headers = {}
        if sign:
            token = rhx_gis if rhx_gis is not None else (await self.shared_data(SMALL))["rhx_gis"]
            headers["X-Instagram-GIS"] = gis(token, text)
        async with self.session.get(
            f"{self.url}/graphql/query/", params={"variables": text}, headers=headers
        ) as r:
            assert r.content_type == "application/json"
            return r.status, await r.json()

    async def walk_html(self, profile: str) -> list[str]:
        ids: list[str] = []
        path: str | None = f"/u/{profile}?page=1"
        for _ in range(1000):
            if path is None:
                return ids
            status, html = await self.get(path)
            assert status == 200
            ids += ARTICLE_ID.findall(html)
            found = NEXT.search(html)
            path = found.group(1) if found else None
        raise AssertionError("the next links never end")

    async def walk_json(self, profile: str, first: int) -> tuple[int, list[str]]:
        token = (await self.shared_data(profile))["rhx_gis"]
        variables: dict[str, Any] = {"id": profile, "first": first}
        ids: list[str] = []
        for _ in range(1000):
            status, body = await self.graphql(variables, rhx_gis=token)
            assert status == 200, body
            assert body["status"] == "ok"
            media = body["data"]["user"]["edge_owner_to_timeline_media"]
            ids += [edge["node"]["id"] for edge in media["edges"]]
            if not media["page_info"]["has_next_page"]:
                assert media["page_info"]["end_cursor"] is None
                return media["count"], ids
            assert len(media["edges"]) == first
            variables["after"] = media["page_info"]["end_cursor"]
        raise AssertionError("the cursors never end")


@contextlib.asynccontextmanager
async def running(seed: int = 0, **options: Any) -> AsyncIterator[Feed]:
    site = FeedSite(SandboxState(seed=seed, admin_token="t"), **options)
    async with (
        serve(site.app()) as url,
        aiohttp.ClientSession() as session,
        SandboxAdmin({"feed": url}, "t", session=session) as admin,
    ):
        yield Feed(site, url, session, admin)


async def test_html_pages_give_every_post_once() -> None:
    async with running() as feed:
        for profile in (BIG, SMALL, TINY):
            truth = await feed.truth(profile)
            ids = await feed.walk_html(profile)
            assert ids == truth["post_ids"]
            assert len(set(ids)) == truth["count"] == feed.site.post_count(profile)
        assert truth["count"] < 50 < len(await feed.walk_html(BIG))
        last = -(-3499 // 50)
        assert (await feed.get(f"/u/{BIG}?page={last}"))[0] == 200
        for path in (f"/u/{BIG}?page={last + 1}", f"/u/{BIG}?page=0", f"/u/{BIG}?page=x"):
            assert (await feed.get(path))[0] == 404
        for profile in ("user1000", "user01", "nobody"):
            assert (await feed.get(f"/u/{profile}"))[0] == 404


async def test_json_cursors_give_every_post_once() -> None:
    async with running() as feed:
        for profile, first in ((BIG, 50), (SMALL, 37), (TINY, 50)):
            truth = await feed.truth(profile)
            count, ids = await feed.walk_json(profile, first)
            assert ids == truth["post_ids"]
            assert count == truth["count"] == len(set(ids))
        # The profile id from the page names the profile too; nodes carry what the docs say.
        shared = await feed.shared_data(SMALL)
        status, body = await feed.graphql({"id": shared["profile_id"], "first": 2})
        assert status == 200
        edges = body["data"]["user"]["edge_owner_to_timeline_media"]["edges"]
        node = edges[0]["node"]
        assert node["id"] == (await feed.truth(SMALL))["post_ids"][0]
        assert node["owner"] == {"id": shared["profile_id"], "username": SMALL}
        assert node["edge_media_to_caption"]["edges"][0]["node"]["text"]
        assert isinstance(node["taken_at_timestamp"], int)
        assert edges[0]["node"]["taken_at_timestamp"] > edges[1]["node"]["taken_at_timestamp"]


async def test_bad_variables_are_refused() -> None:
    async with running() as feed:
        for variables, status in (
            ("not json", 400),
            ("[1, 2]", 400),
            ({"id": SMALL, "first": 0}, 400),
            ({"id": SMALL, "first": 51}, 400),
            ({"id": SMALL, "first": "10"}, 400),
            ({"id": "user5000", "first": 10}, 404),
        ):
            got, body = await feed.graphql(variables)
            assert (got, body["status"]) == (status, "fail"), variables
        assert (await feed.graphql({"id": SMALL, "first": 50}))[0] == 200


async def test_same_seed_same_posts_other_seed_other_posts() -> None:
    async def first_page(seed: int) -> tuple[list[str], str]:
        async with running(seed=seed) as feed:
            _, html = await feed.get(f"/u/{SMALL}")
            return (await feed.truth(SMALL))["post_ids"], html.split("<main>")[1].split("</main>")[
                0
            ]

    (ids_a, page_a), (ids_b, page_b), (ids_c, page_c) = [await first_page(s) for s in (0, 0, 1)]
    assert ids_a == ids_b and page_a == page_b
    assert page_a.count("<article") == 50
    assert not set(ids_a) & set(ids_c) and page_a != page_c


def _altered(cursor: str, **changes: Any) -> str:
    raw, mac = cursor.split(".")
    payload = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    payload.update(changes)
    text = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(text).rstrip(b"=").decode() + "." + mac


async def test_forged_altered_foreign_and_expired_cursors_are_refused() -> None:
    async with running(cursor_ttl_seconds=0.5) as feed:
        token = (await feed.shared_data(SMALL))["rhx_gis"]
        _, body = await feed.graphql({"id": SMALL, "first": 10}, rhx_gis=token)
        cursor = body["data"]["user"]["edge_owner_to_timeline_media"]["page_info"]["end_cursor"]
        status, body = await feed.graphql(
            {"id": SMALL, "first": 10, "after": cursor}, rhx_gis=token
        )
        assert status == 200
        truth = (await feed.truth(SMALL))["post_ids"]
        assert [
            e["node"]["id"] for e in body["data"]["user"]["edge_owner_to_timeline_media"]["edges"]
        ] == truth[10:20]
        for after in (
            "abc.def",
            "not a cursor",
            _altered(cursor, offset=300),
            _altered(cursor, profile=2),
            cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB"),
            12,
        ):
            variables = {"id": SMALL, "first": 10, "after": after}
            status, body = await feed.graphql(variables, rhx_gis=token)
            assert (status, body["status"]) == (400, "fail"), after
            assert "cursor" in body["message"]
        status, body = await feed.graphql(
            {"id": "user0002", "first": 10, "after": cursor}, rhx_gis=token
        )
        assert (status, body["message"]) == (400, "invalid cursor (made for another profile)")
        await asyncio.sleep(0.6)
        status, body = await feed.graphql(
            {"id": SMALL, "first": 10, "after": cursor}, rhx_gis=token
        )
        assert (status, body["status"]) == (400, "fail")
        assert "expired" in body["message"]


async def test_missing_or_wrong_signature_is_refused() -> None:
    async with running() as feed:
        feed.site.gis_ttl_seconds = 0.6
        token = (await feed.shared_data(SMALL))["rhx_gis"]
        variables = json.dumps({"id": SMALL, "first": 5})
        other = json.dumps({"id": SMALL, "first": 6})
        assert (await feed.graphql(variables, rhx_gis=token))[0] == 200
        never_served = feed.site.state.signer.sign("feed-gis", {"slot": -1}, 3600)
        for headers in (
            {},
            {"X-Instagram-GIS": ""},
            {"X-Instagram-GIS": "0" * 32},
            {"X-Instagram-GIS": gis(token, other)},
            {"X-Instagram-GIS": gis(never_served, variables)},
            {"X-Instagram-GIS": gis(token + "x", variables)},
            {"X-Instagram-GIS": "é".encode().decode("latin-1")},  # not ASCII
        ):
            async with feed.session.get(
                f"{feed.url}/graphql/query/", params={"variables": variables}, headers=headers
            ) as r:
                assert r.status == 403, headers
                assert (await r.json())["status"] == "fail"
        await asyncio.sleep(0.7)  # the token has expired
        assert (await feed.graphql(variables, rhx_gis=token))[0] == 403
        assert (await feed.graphql(variables))[0] == 200  # with a fresh token from a page


async def test_banned_ip_gets_silent_empty_pages_in_empty_mode() -> None:
    async with running(hostility=Hostility(ban_mode="empty")) as feed:
        variables = {"id": SMALL, "first": 10}
        status, html = await feed.get(f"/u/{SMALL}?page=2")
        assert status == 200 and ARTICLE_ID.search(html) and NEXT.search(html)
        status, body = await feed.graphql(variables)
        assert status == 200 and body["data"]["user"]["edge_owner_to_timeline_media"]["edges"]

        await feed.admin.block("feed", "127.0.0.1")

        status, html = await feed.get(f"/u/{SMALL}?page=2")
        assert status == 200
        assert not ARTICLE_ID.search(html) and not NEXT.search(html)
        assert 'data-count="364"' in html  # the count stays true
        status, body = await feed.graphql(variables)
        media = body["data"]["user"]["edge_owner_to_timeline_media"]
        assert (status, body["status"], media["edges"]) == (200, "ok", [])
        assert media["page_info"] == {"has_next_page": False, "end_cursor": None}


async def test_admin_profiles_needs_the_token() -> None:
    async with running(profiles=10) as feed:
        async with feed.session.get(f"{feed.url}/__admin/profiles/{SMALL}") as r:
            assert r.status == 401  # no token at all
        async with SandboxAdmin({"feed": feed.url}, "wrong", session=feed.session) as wrong:
            with pytest.raises(SandboxAdminError) as refused:
                await wrong.profile("feed", SMALL)
        assert refused.value.status == 401
        with pytest.raises(SandboxAdminError) as unknown:
            await feed.truth("user0010")
        assert unknown.value.status == 404
        truth = await feed.truth("user0009")
        assert truth["profile"] == "user0009" and len(truth["post_ids"]) == truth["count"]


@pytest.mark.parametrize(
    "options",
    [{"profiles": 0}, {"profiles": 8193}, {"page_size": 0}, {"cursor_ttl_seconds": 0}],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        FeedSite(SandboxState(seed=0, admin_token="t"), **options)
