"""The feed: an Instagram-like site of profiles and their posts, paged two ways.

It reproduces what made Instagram hard to scrape in 2018: a JSON API paged by opaque cursors
(page n+1 cannot be asked for before page n has answered) and signed by an ``X-Instagram-GIS``
header computed from a token embedded in the HTML profile page.

**Profiles** are ``user0000`` .. ``user{profiles-1:04d}`` (at most 8,192). Each has a number
of posts fixed by the sandbox seed: 1 in 10 has 2,000-5,000, 1 in 25 has 0-49 (rarely none at
all), the others 100-999. Posts are newest first, made on request from (seed, profile, index),
so nothing is stored. A post has:

* ``id``: a decimal string, unique across profiles, made as Instagram makes its ids (41 bits of
  milliseconds, 13 bits of shard = the profile number, 10 bits of sequence);
* ``shortcode``: the id in Instagram's base-64 alphabet (``A-Za-z0-9-_``);
* ``taken_at``: a Unix timestamp (seconds); each profile's newest post is less than a day older
  than the sandbox epoch (the clock's time when the ``SandboxState`` was made), and every post
  is older than the one before;
* a ``caption`` of 3-16 words (the last ones may be ``#hashtags``), a count of ``likes``, and a
  ``display_url`` on ``scontent.feed.invalid`` (nothing serves images).

Same seed, same posts; another seed, other counts, captions, times and ids.

**HTML, paged by page number** (``page_size`` posts a page)::

    GET /u/{profile}?page=N     N from 1 (default 1); N past the last page, 0 or not a number: 404;
                                an unknown profile: 404; a profile with no posts has one empty page

The page holds ``<span class="count" data-count="C">``, one ``<article class="post"
data-id="ID" data-shortcode="SC">`` per post (``<img src>``, ``<p class="caption">``,
``<span class="likes" data-likes="L">``, ``<time datetime="ISO" data-timestamp="T">``), a
``<a class="next" rel="next" href="/u/{profile}?page=N+1">`` when more pages follow, and::

    <script>window._sharedData = {"rhx_gis": "<token>", "profile_id": "<id>", "username": "..."};
    </script>

``rhx_gis`` is a signed token valid for ``gis_ttl_seconds`` (1 hour) from when it was first
served; it changes every half of that, so a token just taken from a page is good for at least
half an hour. It is the same for every profile.

**JSON, paged by cursor** (Instagram's graphql)::

    GET /graphql/query/?variables=<json>         (other query parameters are ignored)
    X-Instagram-GIS: md5(f"{rhx_gis}:{variables}"), hex

``variables`` is a JSON object: ``id`` (the username or the ``profile_id``), ``first`` (posts
wanted, 1-50, default 12) and ``after`` (omitted or null for the first page, else the
``end_cursor`` of the previous page). The signature is taken over ``variables`` exactly as the
server decodes it from the URL, i.e. the JSON text before percent-encoding. The answer::

    {"data": {"user": {"edge_owner_to_timeline_media": {
        "count": C,
        "page_info": {"has_next_page": true, "end_cursor": "<opaque>"},   # null on the last
        "edges": [{"node": {"__typename": "GraphImage", "id", "shortcode", "display_url",
                            "taken_at_timestamp", "edge_liked_by": {"count": L},
                            "edge_media_to_caption": {"edges": [{"node": {"text": "..."}}]},
                            "owner": {"id", "username"}}}, ...]}}},
     "status": "ok"}

Refusals are JSON ``{"status": "fail", "message": "..."}``, checked in this order: 403 when the
signature is missing, wrong, or made with an expired or never-served ``rhx_gis`` (in every
hostility profile: it is part of the protocol, not a defence); 400 when ``variables`` is not a
JSON object or ``first`` is not an integer from 1 to 50; 404 for an unknown profile; 400 for a
cursor that was forged, altered, made for another profile, or is older than
``cursor_ttl_seconds`` (600 by default). A cursor is signed server-side; it carries the profile
and the offset, so any ``first`` may follow any cursor.

**Hostility** (see ``_guards``) applies to both. On ``/graphql/`` the guard answers in JSON: the
CAPTCHA is ``{"status": "fail", "message": "checkpoint_required", ...}`` with status 200, and
its refusals (403 for a ban or incoherent headers, 429, 5xx) are ``{"status": "fail",
"message": ...}``; on HTML paths they are HTML pages.
A banned IP under ``ban_mode="empty"`` gets normal-looking 200 answers with no posts: no
articles and no next link, no edges and ``has_next_page`` false. The counts stay true, so a
careful scraper can notice.

**Admin** (behind the admin token, see ``_site``)::

    GET /__admin/profiles/{profile}   {"profile", "profile_id", "count", "post_ids": [newest first]}
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import time
from dataclasses import dataclass
from html import escape
from typing import Any

from aiohttp import web

from scrapeflow.sandbox._guards import ADMIN_PREFIX, EMPTY_KEY, LatencyRange
from scrapeflow.sandbox._hostility import Hostility
from scrapeflow.sandbox._site import SandboxSite, SandboxState, admin_json, require_admin
from scrapeflow.sandbox._tokens import TokenError

__all__ = ["DEFAULT_FIRST", "MAX_FIRST", "MAX_PROFILES", "FeedSite", "Post"]

MAX_PROFILES = 8192  # the 13 shard bits of an Instagram id
MAX_FIRST = 50
DEFAULT_FIRST = 12
_ID_EPOCH_MS = 1_314_220_021_721  # Instagram's id epoch (August 2011)
_PROFILE_ID_BASE = 5_000_000_000
_DAY = 86_400
_WORDS = (
    "sunset coffee beach friends weekend city lights mountain morning vibes travel summer "
    "golden hour ocean brunch street art garden rain skyline road trip concert autumn snow "
    "forest lake picnic sunday market studio vintage neon harbor bakery cycling desert "
    "festival balcony rooftop island vinyl sketch canvas recipe puppy kitten dance smile"
).split()
_WORD = tuple(_WORDS[b % len(_WORDS)] for b in range(256))  # by a byte of the post's digest
_TAG = tuple("#" + word for word in _WORD)


@dataclass(frozen=True, slots=True)
class Post:
    """One post of the feed, as both the HTML page and the JSON node show it."""

    id: str
    shortcode: str
    caption: str
    likes: int
    taken_at: int
    display_url: str


@dataclass(frozen=True, slots=True)
class _Profile:
    number: int
    count: int
    newest: int  # taken_at of post 0
    gap: int  # mean seconds between posts; a post's jitter stays under 0.9 gap

    @property
    def username(self) -> str:
        return f"user{self.number:04d}"

    @property
    def profile_id(self) -> str:
        return str(_PROFILE_ID_BASE + self.number)


class FeedSite(SandboxSite):
    """The feed site; the module's docstring describes its routes. ``gis_ttl_seconds`` may be
    changed on an instance (tests shorten it).

    >>> state = SandboxState(seed=0, admin_token="secret")
    >>> site = FeedSite(state, hostility=Hostility.profile("realistic"))
    >>> async with serve(site.app()) as url:  # doctest: +SKIP
    ...     ...  # GET f"{url}/u/user0000", then f"{url}/graphql/query/?variables=..."
    """

    name = "feed"
    empty_ban_pages = True
    gis_ttl_seconds: float = 3600.0

    def __init__(
        self,
        state: SandboxState,
        *,
        hostility: Hostility | None = None,
        latency_ms: LatencyRange = (0.0, 0.0),
        profiles: int = 1000,
        page_size: int = 50,
        cursor_ttl_seconds: float = 600.0,
    ) -> None:
        if not 1 <= profiles <= MAX_PROFILES:
            raise ValueError(f"profiles must be from 1 to {MAX_PROFILES}, got {profiles}")
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        if cursor_ttl_seconds <= 0:
            raise ValueError("cursor_ttl_seconds must be positive")
        super().__init__(state, hostility=hostility, latency_ms=latency_ms)
        self.profiles = profiles
        self.page_size = page_size
        self.cursor_ttl_seconds = cursor_ttl_seconds
        self._now = int(state.world.epoch.timestamp())
        self._profiles: dict[int, _Profile] = {}
        self._gis: dict[int, tuple[str, float]] = {}  # rotation slot -> (token, expires at)

    # -- the data -----------------------------------------------------------------------------

    def post_count(self, profile: str) -> int:
        """How many posts ``profile`` (``"user0042"``) has; :class:`KeyError` if none such."""
        return self._known(profile).count

    def posts(self, profile: str, start: int = 0, stop: int | None = None) -> list[Post]:
        """Posts ``start`` to ``stop`` (excluded) of ``profile``, newest first."""
        found = self._known(profile)
        return self._posts(found, start, found.count if stop is None else stop)

    def post_ids(self, profile: str) -> list[str]:
        """Every post id of ``profile``, newest first: the ground truth of a complete scrape."""
        return [post.id for post in self.posts(profile)]

    def _known(self, profile: str) -> _Profile:
        found = self._by_username(profile)
        if found is None:
            raise KeyError(f"no profile {profile!r}")
        return found

    def _by_username(self, username: str) -> _Profile | None:
        number = _small_int(username.removeprefix("user"))
        if number is None or number >= self.profiles or username != f"user{number:04d}":
            return None
        return self._profile(number)

    def _by_id(self, value: object) -> _Profile | None:
        """A profile named in graphql variables by username or ``profile_id``."""
        if not isinstance(value, str):
            return None
        number = _small_int(value)
        if number is None:
            return self._by_username(value)
        number -= _PROFILE_ID_BASE
        if 0 <= number < self.profiles and value == str(_PROFILE_ID_BASE + number):
            return self._profile(number)
        return None

    def _profile(self, number: int) -> _Profile:
        found = self._profiles.get(number)
        if found is None:
            d = _digest(self.state.seed, number, -1)
            kind, draw = d[0] % 100, int.from_bytes(d[1:4])
            if kind < 10:
                count = 2000 + draw % 3001
            elif kind < 14:
                count = draw % 50
            else:
                count = 100 + draw % 900
            span = (200 + int.from_bytes(d[4:6]) % 1800) * _DAY
            gap = max(600, span // max(count, 1))
            newest = self._now - int.from_bytes(d[6:9]) % _DAY
            found = self._profiles[number] = _Profile(number, count, newest, gap)
        return found

    def _posts(self, profile: _Profile, start: int, stop: int) -> list[Post]:
        return [self._post(profile, i) for i in range(max(start, 0), min(stop, profile.count))]

    def _post(self, profile: _Profile, index: int) -> Post:
        d = _digest(self.state.seed, profile.number, index)
        # Jitter under 0.9 gap keeps every post strictly older than the one before it.
        jitter = int.from_bytes(d[0:4]) % (profile.gap * 9 // 10 + 1)
        taken_at = profile.newest - index * profile.gap - jitter
        millis = (taken_at * 1000 - _ID_EPOCH_MS) % 2**41
        number = (millis << 23) | (profile.number << 10) | (index % 1024)
        shortcode = _shortcode(number)
        picks = d[9 : 12 + d[8] % 14]
        plain = len(picks) - d[25] % 3  # the last 0-2 words are hashtags
        caption = " ".join([_WORD[b] for b in picks[:plain]] + [_TAG[b] for b in picks[plain:]])
        return Post(
            id=str(number),
            shortcode=shortcode,
            caption=caption[0].upper() + caption[1:],
            likes=int(math.exp(int.from_bytes(d[4:8]) / 2**32 * 10)),
            taken_at=taken_at,
            display_url=f"https://scontent.feed.invalid/v/t51/{shortcode}_n.jpg",
        )

    # -- the signature token ------------------------------------------------------------------

    def rhx_gis(self) -> str:
        """The token profile pages embed now; it signs the JSON requests."""
        now = time.time()
        slot = int(now // (self.gis_ttl_seconds / 2))
        issued = self._gis.get(slot)
        if issued is None or issued[1] <= now:
            token = self.state.signer.sign("feed-gis", {"slot": slot}, self.gis_ttl_seconds)
            self._gis = {s: t for s, t in self._gis.items() if t[1] > now}
            self._gis[slot] = issued = (token, now + self.gis_ttl_seconds)
        return issued[0]

    def _signed(self, variables: str, signature: str) -> bool:
        now, given = time.time(), signature.strip().lower().encode(errors="replace")
        for token, expires_at in self._gis.values():
            text = f"{token}:{variables}".encode(errors="replace")
            expected = hashlib.md5(text, usedforsecurity=False).hexdigest().encode()
            if expires_at > now and hmac.compare_digest(expected, given):
                return True
        return False

    # -- the site -------------------------------------------------------------------------------

    def is_json(self, request: web.Request) -> bool:
        return request.path.startswith("/graphql/")

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/u/{profile}", self._profile_page)
        app.router.add_get("/graphql/query/", self._graphql)

    def admin_routes(self, admin: web.RouteTableDef) -> None:
        @admin.get(f"{ADMIN_PREFIX}/profiles/{{profile}}")
        async def profile_truth(request: web.Request) -> web.Response:
            require_admin(request, self.state)
            found = self._by_username(request.match_info["profile"])
            if found is None:
                return admin_json({"error": "no such profile"}, status=404)
            return admin_json(
                {
                    "profile": found.username,
                    "profile_id": found.profile_id,
                    "count": found.count,
                    "post_ids": [post.id for post in self._posts(found, 0, found.count)],
                }
            )

    async def _profile_page(self, request: web.Request) -> web.Response:
        found = self._by_username(request.match_info["profile"])
        if found is None:
            raise web.HTTPNotFound(text="no such profile")
        last = max(1, -(-found.count // self.page_size))
        text = request.query.get("page", "1")
        page = _small_int(text)
        if page is None or not 1 <= page <= last:
            raise web.HTTPNotFound(text=f"no page {text} (pages 1-{last})")
        empty = bool(request.get(EMPTY_KEY))
        start = (page - 1) * self.page_size
        posts = [] if empty else self._posts(found, start, start + self.page_size)
        name = found.username
        shared = json.dumps(
            {"rhx_gis": self.rhx_gis(), "profile_id": found.profile_id, "username": name}
        )
        next_link = (
            f'<a class="next" rel="next" href="/u/{name}?page={page + 1}">Older posts</a>'
            if page < last and not empty
            else ""
        )
        html = (
            f"<!doctype html><html><head><title>@{name} - page {page}</title></head><body>"
            f'<header class="profile" data-profile-id="{found.profile_id}"><h1>{name}</h1>'
            f'<span class="count" data-count="{found.count}">{found.count} posts</span></header>'
            f"<main>{''.join(_article(post) for post in posts)}</main><nav>{next_link}</nav>"
            f"<script>window._sharedData = {shared};</script></body></html>"
        )
        return web.Response(text=html, content_type="text/html")

    async def _graphql(self, request: web.Request) -> web.Response:
        variables = request.query.get("variables", "")
        signature = request.headers.get("X-Instagram-GIS", "")
        if not signature:
            return _fail(403, "missing X-Instagram-GIS signature")
        if not self._signed(variables, signature):
            return _fail(403, "invalid X-Instagram-GIS signature")
        try:
            parsed = json.loads(variables)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return _fail(400, "variables must be a JSON object")
        first = parsed.get("first", DEFAULT_FIRST)
        if type(first) is not int or not 1 <= first <= MAX_FIRST:
            return _fail(400, f"first must be an integer from 1 to {MAX_FIRST}")
        found = self._by_id(parsed.get("id"))
        if found is None:
            return _fail(404, "user not found")
        offset, after = 0, parsed.get("after")
        if after is not None:
            try:
                if not isinstance(after, str):
                    raise TokenError("not a string")
                cursor = self.state.signer.verify("feed-cursor", after)
            except TokenError as exc:
                return _fail(400, f"invalid cursor ({exc})")
            if cursor.get("profile") != found.number:
                return _fail(400, "invalid cursor (made for another profile)")
            offset = int(cursor["offset"])
        empty = bool(request.get(EMPTY_KEY))
        stop = min(offset + first, found.count)
        posts = [] if empty else self._posts(found, offset, stop)
        has_next = stop < found.count and not empty
        end_cursor = (
            self.state.signer.sign(
                "feed-cursor", {"profile": found.number, "offset": stop}, self.cursor_ttl_seconds
            )
            if has_next
            else None
        )
        owner = {"id": found.profile_id, "username": found.username}
        media = {
            "count": found.count,
            "page_info": {"has_next_page": has_next, "end_cursor": end_cursor},
            "edges": [{"node": _node(post, owner)} for post in posts],
        }
        return web.json_response(
            {"data": {"user": {"edge_owner_to_timeline_media": media}}, "status": "ok"}
        )


def _digest(seed: int, profile: int, index: int) -> bytes:
    return hashlib.blake2b(f"feed|{seed}|{profile}|{index}".encode(), digest_size=32).digest()


def _small_int(text: str) -> int | None:
    """``text`` as a non-negative integer if it is one of at most 12 ASCII digits."""
    return int(text) if len(text) <= 12 and text.isascii() and text.isdigit() else None


def _shortcode(number: int) -> str:
    # Instagram's alphabet is base64url's; 9 bytes hold the 64-bit id in 12 digits.
    return base64.urlsafe_b64encode(number.to_bytes(9, "big")).lstrip(b"A").decode() or "A"


def _article(post: Post) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(post.taken_at))
    return (
        f'<article class="post" data-id="{post.id}" data-shortcode="{post.shortcode}">'
        f'<img src="{post.display_url}" alt=""><p class="caption">{escape(post.caption)}</p>'
        f'<span class="likes" data-likes="{post.likes}">{post.likes} likes</span> '
        f'<time datetime="{when}" data-timestamp="{post.taken_at}">{when[:10]}</time></article>'
    )


def _node(post: Post, owner: dict[str, str]) -> dict[str, Any]:
    return {
        "__typename": "GraphImage",
        "id": post.id,
        "shortcode": post.shortcode,
        "display_url": post.display_url,
        "taken_at_timestamp": post.taken_at,
        "edge_liked_by": {"count": post.likes},
        "edge_media_to_caption": {"edges": [{"node": {"text": post.caption}}]},
        "owner": owner,
    }


def _fail(status: int, message: str) -> web.Response:
    return web.json_response({"status": "fail", "message": message}, status=status)
