"""The ``feed.page`` job kind: a cursor-paginated feed walked as a chain of jobs.

Aerocene chained the pages of a cursor feed event by event, one cloud function per page. Here
each page is a job: it fetches its page of the feed's JSON API (the sandbox's Instagram-like
``/graphql/query/``, signed with the profile page's ``rhx_gis`` token), and queues the next
cursor's page as a follow-up job (:meth:`~scrapeflow.jobs.JobContext.submit`) under the key
``page-<n+1>``. Any worker of the queue takes the next page; a page whose worker died runs
again elsewhere and queues the same follow-up job, never a second one, so the chain never
forks and every page ends exactly once. A page's posts are its job's result (``ids``), read
back in page order by :func:`chain_posts`.

Params: ``url`` (the feed's base URL), ``profile`` (a username), ``first`` (posts per page, 1
to 50, default 50), ``pages`` (stop after that many pages; default: the whole feed); a
follow-up adds ``after`` (the cursor), ``page`` and ``chain`` (the first page's job id).
Result: ``{"chain", "page", "posts", "ids", "next", "follow_up"}`` (``next`` the cursor of the
next page, ``follow_up`` its job's id; both null on the last page).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from scrapeflow.errors import InputError
from scrapeflow.http import HttpClient, HttpConfig
from scrapeflow.jobs import Job, JobContext, JobQueue, JobState
from scrapeflow.urllist import check_url

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = ["FEED_PAGE_KIND", "FeedChainJobs", "FeedPageParams", "chain_posts"]

FEED_PAGE_KIND: Final = "feed.page"
MAX_FIRST: Final = 50
_SHARED = re.compile(r"window\._sharedData = (\{.*?\});</script>")
_USERNAME = re.compile(r"[A-Za-z0-9_.]{1,64}")
_MAX_CURSOR = 2_000


@dataclass(frozen=True, slots=True)
class FeedPageParams:
    """One page's params, checked (:class:`~scrapeflow.errors.InputError` names the bad one)."""

    url: str
    profile: str
    first: int = MAX_FIRST
    pages: int | None = None
    page: int = 1
    after: str | None = None
    chain: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FeedPageParams:
        url = params.get("url")
        problem = check_url(url) if isinstance(url, str) else "not a string"
        if problem is not None or not isinstance(url, str):
            raise InputError(f"a feed page's 'url' is the feed's http(s) URL: {problem}")
        profile = params.get("profile")
        if not isinstance(profile, str) or not _USERNAME.fullmatch(profile):
            raise InputError(f"a feed page's 'profile' is a username, got {profile!r}")
        first = _whole(params, "first", MAX_FIRST, high=MAX_FIRST)
        pages = None if params.get("pages") is None else _whole(params, "pages", 1)
        page = _whole(params, "page", 1)
        after, chain = params.get("after"), params.get("chain")
        if after is not None and not (isinstance(after, str) and 0 < len(after) <= _MAX_CURSOR):
            raise InputError("a feed page's 'after' is a cursor string")
        if (after is None) != (page == 1):
            raise InputError("a feed page's 'after' is its cursor: only the first page has none")
        if chain is not None and not isinstance(chain, str):
            raise InputError("a feed page's 'chain' is a job id")
        return cls(url.rstrip("/"), profile, first, pages, page, after, chain)

    def as_params(self) -> dict[str, Any]:
        params = {"url": self.url, "profile": self.profile, "first": self.first}
        if self.pages is not None:
            params["pages"] = self.pages
        if self.page > 1:
            params |= {"page": self.page, "after": self.after, "chain": self.chain}
        return params


def _whole(params: Mapping[str, Any], name: str, default: int, *, high: int = 10**9) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InputError(f"a feed page's {name!r} is a whole number from 1 to {high}")
    return value


@dataclass(frozen=True, slots=True)
class _Profile:
    profile_id: str
    rhx_gis: str


class FeedChainJobs:
    """The ``feed.page`` handler of one process. The pages it runs share one HTTP client
    (opened by the first page that runs, closed ``linger`` seconds after the last) and each
    profile's token."""

    def __init__(self, config: HttpConfig, *, linger: float = 10.0) -> None:
        self.config = config
        self.linger = linger
        """Seconds the HTTP client is kept after the last page, for the next one."""
        self._closing: asyncio.Task[None] | None = None
        self._http: HttpClient | None = None
        self._users = 0
        self._lock = asyncio.Lock()
        self._profiles: dict[tuple[str, str], _Profile] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> FeedChainJobs:
        return cls(HttpConfig.from_settings(settings, max_connections=settings.parallelism))

    async def run(self, context: JobContext) -> dict[str, Any]:
        """Fetch the job's page; queue the next one; the page's posts as the result."""
        page = FeedPageParams.from_params(context.params)
        chain = page.chain or context.job.id
        http = await self._acquire()
        try:
            media = await self._media(http, page)
        finally:
            await asyncio.shield(self._release())
        ids = [str(edge["node"]["id"]) for edge in media["edges"]]
        info = media["page_info"]
        cursor = info["end_cursor"] if info["has_next_page"] else None
        follow_up = None
        if cursor is not None and (page.pages is None or page.page < page.pages):
            following = replace(page, page=page.page + 1, after=cursor, chain=chain)
            queued = await context.submit(
                FEED_PAGE_KIND, following.as_params(), key=f"page-{following.page}"
            )
            follow_up = queued.id
        context.progress(posts=len(ids))
        return {
            "chain": chain,
            "page": page.page,
            "posts": len(ids),
            "ids": ids,
            "next": cursor,
            "follow_up": follow_up,
        }

    async def _media(self, http: HttpClient, page: FeedPageParams) -> dict[str, Any]:
        for fresh in (False, True):  # a token that expired is read again, once
            profile = await self._profile(http, page, fresh=fresh)
            variables: dict[str, Any] = {"id": profile.profile_id, "first": page.first}
            if page.after is not None:
                variables["after"] = page.after
            text = json.dumps(variables, separators=(",", ":"))
            signature = hashlib.md5(
                f"{profile.rhx_gis}:{text}".encode(), usedforsecurity=False
            ).hexdigest()
            response = await http.get(
                f"{page.url}/graphql/query/?variables={quote(text)}",
                headers={"X-Instagram-GIS": signature},
                validate=_a_page,
            )
            if response.status == 403 and not fresh and b"signature" in response.body:
                continue
            if response.status != 200:
                raise RuntimeError(
                    f"page {page.page} of {page.profile} refused: HTTP {response.status}"
                )
            media: dict[str, Any] = response.json()["data"]["user"]["edge_owner_to_timeline_media"]
            return media
        raise AssertionError("unreachable")

    async def _profile(self, http: HttpClient, page: FeedPageParams, *, fresh: bool) -> _Profile:
        key = (page.url, page.profile)
        if fresh or key not in self._profiles:
            response = await http.get(f"{page.url}/u/{page.profile}")
            found = _SHARED.search(response.text()) if response.status == 200 else None
            if found is None:
                raise RuntimeError(
                    f"no profile page for {page.profile} at {page.url} (HTTP {response.status})"
                )
            shared = json.loads(found.group(1))
            self._profiles[key] = _Profile(str(shared["profile_id"]), str(shared["rhx_gis"]))
        return self._profiles[key]

    async def _acquire(self) -> HttpClient:
        async with self._lock:
            if self._closing is not None:  # the next page came before the client was let go
                self._closing.cancel()
                self._closing = None
            if self._http is None:
                http = HttpClient(self.config)
                await http.__aenter__()
                self._http = http
            self._users += 1
            return self._http

    async def _release(self) -> None:
        async with self._lock:
            self._users -= 1
            if self._users == 0 and self._http is not None and self._closing is None:
                # A chain runs one page at a time: the client (its connections, the site's
                # session) is kept a while for the next page rather than made anew each time.
                self._closing = asyncio.create_task(self._close_idle(), name="feed-client-linger")

    async def _close_idle(self) -> None:
        await asyncio.sleep(self.linger)
        async with self._lock:
            self._closing = None
            if self._users == 0 and self._http is not None:
                http, self._http = self._http, None
                await http.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client now (it closes by itself ``linger`` seconds after the last
        page)."""
        async with self._lock:
            if self._closing is not None:
                self._closing.cancel()
                self._closing = None
            if self._http is not None:
                http, self._http = self._http, None
                await http.aclose()


def _a_page(body: bytes) -> None:
    """A 200 that is not a page (the feed's JSON CAPTCHA) is refused, so it is retried."""
    if b'"status": "ok"' not in body and b'"status":"ok"' not in body:
        raise RuntimeError("not a page: " + body[:80].decode(errors="replace"))


async def chain_posts(queue: JobQueue, first: Job) -> list[str]:
    """The posts of a finished chain, in page order, read from its jobs' results from ``first``.

    Raises :class:`RuntimeError` naming the page when a job of the chain did not succeed."""
    ids: list[str] = []
    job: Job | None = first
    while job is not None:
        job = await queue.get(job.id)
        if job.state is not JobState.SUCCEEDED or job.result is None:
            raise RuntimeError(f"job {job.id} of the chain is {job.state.value}: {job.error}")
        ids += job.result["ids"]
        follow_up = job.result.get("follow_up")
        job = None if follow_up is None else await queue.get(follow_up)
    return ids
