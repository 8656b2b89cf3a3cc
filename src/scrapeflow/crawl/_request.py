"""Requests of a crawl, and their fingerprints: a URL is fetched once, whatever the path to it.

A request's fingerprint is Scrapy's recipe: the SHA-1 of its method, its canonical URL
(w3lib's ``canonicalize_url``: query arguments sorted, fragment dropped, percent-encoding
normalised) and its body. The fingerprint is the request's task key in the engine, so users
never invent file-safe keys, and a page reached by eight paths is one task.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from w3lib.url import canonicalize_url

from scrapeflow.errors import InputError

__all__ = ["Request", "canonical_url", "fingerprint"]

_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def canonical_url(url: str) -> str:
    """``url`` as the de-duplication compares it.

    >>> canonical_url("http://Example.com/a?b=2&a=1#top")
    'http://example.com/a?a=1&b=2'
    """
    return canonicalize_url(url)


def fingerprint(url: str, method: str = "GET", body: str | None = None) -> str:
    """The request's fingerprint, 40 hex digits: its task key.

    >>> fingerprint("http://example.com/?b=2&a=1") == fingerprint("http://example.com/?a=1&b=2#x")
    True
    """
    text = json.dumps(
        {"method": method, "url": canonical_url(url), "body": body or ""},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class Request:
    """A page to fetch, and what to do with it.

    ``label`` picks the router's handler (None: the default handler); ``user_data`` travels
    with the request to its handler (``response.request.user_data``); ``depth`` is the number
    of links followed from a start URL (set by the crawler).

    >>> Request("http://example.com/", label="home").key == fingerprint("http://example.com/")
    True
    """

    url: str
    label: str | None = None
    method: str = "GET"
    body: str | None = None
    headers: dict[str, str] | None = None
    user_data: dict[str, Any] = field(default_factory=dict)
    depth: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise InputError(f"a request needs an absolute http(s) URL, got {self.url!r}")
        if self.method not in _METHODS:
            raise InputError(f"unknown HTTP method {self.method!r} for {self.url}")
        if self.label is not None and not isinstance(self.label, str):
            raise InputError(f"a request's label is a string, got {self.label!r}")

    @property
    def key(self) -> str:
        """The task key: the fingerprint."""
        return fingerprint(self.url, self.method, self.body)

    def at_depth(self, depth: int) -> Request:
        return self if depth == self.depth else replace(self, depth=depth)

    def params(self) -> dict[str, Any]:
        """The task's params: only what differs from the defaults, so that they stay small."""
        params: dict[str, Any] = {"url": self.url, "depth": self.depth}
        if self.label is not None:
            params["label"] = self.label
        if self.method != "GET":
            params["method"] = self.method
        if self.body is not None:
            params["body"] = self.body
        if self.headers:
            params["headers"] = dict(self.headers)
        if self.user_data:
            params["user_data"] = self.user_data
        return params

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Request:
        """The request a task's params describe (see :meth:`params`)."""
        return cls(
            url=params["url"],
            label=params.get("label"),
            method=params.get("method", "GET"),
            body=params.get("body"),
            headers=params.get("headers"),
            user_data=params.get("user_data") or {},
            depth=int(params.get("depth", 0)),
        )
