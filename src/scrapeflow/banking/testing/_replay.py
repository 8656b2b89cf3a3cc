"""A recording played back: the HTTP client's wire answered from a HAR file, offline.

:class:`ReplayWire` takes the place of the network in an ``HttpClient``
(``HttpClient(wire=ReplayWire(recording))``): everything above it runs as it does live —
sessions, retries, the scraper's own steps — and each request is answered by the recorded
exchange with the same method, URL and body (strict; fields a scraper makes anew each run,
:data:`~scrapeflow.banking.testing.VOLATILE_FIELDS`, are not compared). Requests made more than
once are answered in the order they were recorded. A field whose recorded value is a
placeholder no recorded answer holds was made by the scraper from a secret (a password
encrypted in the page's script): it cannot be the same in a replay, and is not compared
either. A request the recording does not hold raises :class:`~scrapeflow.errors.NotRecorded`,
naming it and the recorded requests nearest.
Cookies the recorded answers set go into the session's jar, as they would live. A volatile
value the bank echoes back (OAuth's ``state`` in a redirect) is answered with the value the
scraper sent this time, not the recorded one, so a scraper that checks the echo passes.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import deque
from collections.abc import Iterable
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import aiohttp
import yarl
from multidict import CIMultiDict, CIMultiDictProxy

from scrapeflow.banking.testing._recording import RecordedExchange, Recording
from scrapeflow.banking.testing._redact import (
    VOLATILE_FIELDS,
    cookie_pairs,
    json_fields,
    normalized_name,
)
from scrapeflow.errors import NotRecorded
from scrapeflow.http import Exchange, Hop, Response, request_body, requested_url
from scrapeflow.http._stale import Sending

__all__ = ["ReplayWire", "request_key"]

_SHOWN_BODY = 200
_SHORTEST_ECHO = 8
"""A volatile value shorter than this is not replaced in answers (it could be anything)."""


def request_key(
    method: str, url: str, body: bytes | None, volatile: frozenset[str] = VOLATILE_FIELDS
) -> tuple[str, str, str]:
    """What a request is matched on: its method, its URL and its body, with the values of
    ``volatile`` fields left out (in the query, a form or a JSON body)."""
    parts = urlsplit(url)
    query = _masked_form(parts.query, volatile) if parts.query else ""
    shown_url = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", query, ""))
    return method.upper(), shown_url, _masked_body(body, volatile)


class ReplayWire:
    """The wire of an ``HttpClient`` that answers from ``recording``; see the module."""

    def __init__(
        self,
        recording: Recording,
        *,
        volatile: Iterable[str] = VOLATILE_FIELDS,
        name: str = "the recording",
    ) -> None:
        self.recording = recording
        self.name = name
        self.volatile = frozenset(normalized_name(v) for v in volatile) | _client_made(recording)
        self._left: dict[tuple[str, str, str], deque[RecordedExchange]] = {}
        for recorded in recording:
            key = request_key(recorded.method, recorded.url, recorded.request_body, self.volatile)
            self._left.setdefault(key, deque()).append(recorded)
        self.played = 0
        self._echoes: dict[str, str] = {}  # a recorded volatile value: the one sent this time
        self.missing: NotRecorded | None = None
        """The first request the recording did not hold (the scraper may have caught it)."""

    @property
    def unplayed(self) -> list[RecordedExchange]:
        """Recorded exchanges no request asked for (yet)."""
        return [recorded for left in self._left.values() for recorded in left]

    async def __call__(
        self,
        http: aiohttp.ClientSession,
        method: str,
        url: yarl.URL,
        proxy: str | None,
        attempt: int,
        started: float,
        sending: Sending,
        kwargs: dict[str, Any],
        *,
        max_body_bytes: int,
    ) -> Exchange:
        asked = requested_url(url, kwargs)
        body = request_body(kwargs)
        key = request_key(method, str(asked), body, self.volatile)
        left = self._left.get(key)
        if not left:
            missing = NotRecorded(self._not_recorded(key))
            self.missing = self.missing or missing
            raise missing
        recorded = left.popleft()
        self.played += 1
        sending.answered = True
        self._learn_echoes(recorded, str(asked), body)
        echo = self._echo
        hops = []
        for status, hop_url, hop_headers in recorded.redirects:
            headers = [(name, echo(value)) for name, value in hop_headers]
            _keep_cookies(http, headers, echo(hop_url))
            hops.append(Hop(status=status, url=echo(hop_url), headers=tuple(headers)))
        response_headers = [(name, echo(value)) for name, value in recorded.response_headers]
        _keep_cookies(http, response_headers, echo(recorded.final_url))
        response_body = recorded.response_body
        for old, new in self._echoes.items():
            response_body = response_body.replace(old.encode(), new.encode())
        response = Response(
            method=method,
            url=echo(recorded.final_url),
            status=recorded.status,
            headers=CIMultiDictProxy(CIMultiDict(response_headers)),
            body=response_body,
            elapsed=0.0,
            attempts=attempt,
            proxy=None,
        )
        return Exchange(
            method=method,
            url=str(asked),
            request_headers=(),
            request_body=body,
            redirects=tuple(hops),
            response=response,
            started_at=recorded.started_at,
        )

    def _learn_echoes(self, recorded: RecordedExchange, url: str, body: bytes | None) -> None:
        """Pair the volatile values the recording sent with the ones sent now."""
        sent = _volatile_values(url, body, self.volatile)
        for name, old in _volatile_values(
            recorded.url, recorded.request_body, self.volatile
        ).items():
            new = sent.get(name)
            if new is not None and new != old and len(old) >= _SHORTEST_ECHO:
                self._echoes[old] = new
                self._echoes[quote(old, safe="")] = quote(new, safe="")

    def _echo(self, text: str) -> str:
        for old, new in self._echoes.items():
            text = text.replace(old, new)
        return text

    def _not_recorded(self, key: tuple[str, str, str]) -> str:
        method, url, body = key
        shown = f"{method} {url}" + (f" with body {body[:_SHOWN_BODY]!r}" if body else "")
        path = urlsplit(url).path
        near = [
            recorded
            for recorded in self.recording
            if recorded.method == method and urlsplit(recorded.url).path == path
        ]
        if near:
            listed = "; ".join(
                " ".join(request_key(r.method, r.url, r.request_body, self.volatile)).strip()[:300]
                for r in near[:3]
            )
            played = len(near) - sum(1 for left in self._left.values() for r in left if r in near)
            return (
                f"{shown}: not in {self.name} ({len(near)} recorded at this path, {played} "
                f"played already: {listed})"
            )
        return f"{shown}: not in {self.name} (nothing recorded at {method} {path})"


_PLACEHOLDER = re.compile(r"REDACTED-[A-Z0-9-]+")
_FED = frozenset({"REDACTED-LOGIN", "REDACTED-PASSWORD", "REDACTED-OTP"})
"""The placeholders a replay gives the scraper itself: sent as recorded."""


def _client_made(recording: Recording) -> frozenset[str]:
    """The names of request fields whose recorded values are placeholders that no answer
    holds: values the scraper made from a secret (see the module's documentation)."""
    answered: set[str] = set()
    for recorded in recording:
        texts = [recorded.final_url, recorded.response_body.decode("latin-1")]
        texts += [value for _, value in recorded.response_headers]
        texts += [url for _, url, _ in recorded.redirects]
        texts += [value for _, _, headers in recorded.redirects for _, value in headers]
        for text in texts:
            answered.update(_PLACEHOLDER.findall(text))
    made: set[str] = set()
    for recorded in recording:
        for name, value in _request_fields(recorded.url, recorded.request_body):
            placeholders = set(_PLACEHOLDER.findall(str(value)))
            if placeholders - answered - _FED:
                made.add(normalized_name(name))
    return frozenset(made)


def _request_fields(url: str, body: bytes | None) -> list[tuple[str, str]]:
    """A request's fields: its query's, and its form's or JSON body's (string values)."""
    pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    text = (body or b"").decode("latin-1")
    if text.lstrip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            pairs += [(k, v) for k, v in json_fields(json.loads(text)) if isinstance(v, str)]
    elif "=" in text:
        pairs += parse_qsl(text, keep_blank_values=True)
    return pairs


def _volatile_values(url: str, body: bytes | None, volatile: frozenset[str]) -> dict[str, str]:
    """The values of ``volatile`` fields in a request."""
    return {
        normalized_name(k): v
        for k, v in _request_fields(url, body)
        if normalized_name(k) in volatile
    }


def _keep_cookies(
    http: aiohttp.ClientSession, headers: Iterable[tuple[str, str]], url: str
) -> None:
    for name, value in headers:
        if name.lower() != "set-cookie":
            continue
        jar = SimpleCookie()
        try:
            jar.load(value)
        except CookieError:  # an odd cookie: its name and value, without its attributes
            http.cookie_jar.update_cookies(
                dict(cookie_pairs(value, set_cookie=True)), yarl.URL(url)
            )
            continue
        http.cookie_jar.update_cookies(jar, yarl.URL(url))


def _masked_form(text: str, volatile: frozenset[str]) -> str:
    pairs = parse_qsl(text, keep_blank_values=True)
    return urlencode([(k, "*" if normalized_name(k) in volatile else v) for k, v in pairs])


def _masked_body(body: bytes | None, volatile: frozenset[str]) -> str:
    if body is None:
        return ""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return body.hex()
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return json.dumps(_masked_json(json.loads(text), volatile), sort_keys=True)
        except ValueError:
            return text
    if "=" in text and " " not in text.strip() and "<" not in text:
        return _masked_form(text, volatile)
    return text


def _masked_json(value: Any, volatile: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: "*" if normalized_name(str(k)) in volatile else _masked_json(v, volatile)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked_json(v, volatile) for v in value]
    return value
