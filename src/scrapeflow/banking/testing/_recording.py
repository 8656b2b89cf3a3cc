"""A bank session on disk: every request a scraper sent and what came back, as HAR 1.2.

One HAR entry is one request as the scraper made it (``HttpClient.request``'s try) with its
final answer; the redirects followed on the way are kept in the entry's ``_redirects`` (HAR
allows fields of one's own, named with ``_``), the URL that answered in ``_finalUrl``, and
the log's ``_scrapeflow`` holds what the session ran with: the bank, its URL, the day it
believed it was, whether a one-time code was given. Bodies are text in their charset
(``_charset``), or base64 when they are not text.

A recording is written redacted (:class:`~scrapeflow.banking.testing.Redactor`), atomically.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from scrapeflow._util.atomic import atomic_write_bytes
from scrapeflow.banking.testing._redact import Redactor
from scrapeflow.errors import InputError
from scrapeflow.http import Exchange

__all__ = ["RecordedExchange", "Recorder", "Recording"]

_FORMAT = "1.2"


@dataclass(frozen=True, slots=True)
class RecordedExchange:
    """One request and its final answer, as kept in a recording."""

    method: str
    url: str
    request_headers: tuple[tuple[str, str], ...]
    request_body: bytes | None
    status: int
    response_headers: tuple[tuple[str, str], ...]
    response_body: bytes
    final_url: str
    redirects: tuple[tuple[int, str, tuple[tuple[str, str], ...]], ...] = ()
    """(status, URL, headers) of each redirect followed on the way."""
    started_at: float = 0.0
    elapsed: float = 0.0

    @classmethod
    def of(cls, exchange: Exchange) -> RecordedExchange:
        response = exchange.response
        return cls(
            method=exchange.method,
            url=exchange.url,
            request_headers=exchange.request_headers,
            request_body=exchange.request_body,
            status=response.status,
            response_headers=tuple(response.headers.items()),
            response_body=response.body,
            final_url=response.url,
            redirects=tuple((h.status, h.url, h.headers) for h in exchange.redirects),
            started_at=exchange.started_at,
            elapsed=response.elapsed,
        )

    def header(self, name: str) -> str:
        """The first response header called ``name`` ("" without one)."""
        return next((v for k, v in self.response_headers if k.lower() == name.lower()), "")


@dataclass
class Recording:
    """A recorded session: what it ran with (``meta``) and its exchanges, in the order sent."""

    exchanges: list[RecordedExchange] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    """``bank``, ``base_url``, ``today`` (ISO), ``otp`` (a code was given), ``result``."""
    redactor: Redactor | None = field(default=None, repr=False, compare=False)
    """The rules that redacted it (kept in memory only; never written)."""

    def __iter__(self) -> Iterator[RecordedExchange]:
        return iter(self.exchanges)

    def __len__(self) -> int:
        return len(self.exchanges)

    # -- redaction ------------------------------------------------------------------------

    def redacted(self, redactor: Redactor) -> Recording:
        """A copy with the secrets the whole session holds taken out (learnt from all of it
        first: a token the last page gave is taken out of the first request that sent it)."""
        for exchange in self.exchanges:
            _learn(redactor, exchange)
        return Recording(
            exchanges=[_redact(redactor, exchange) for exchange in self.exchanges],
            meta={k: redactor.apply(v) if isinstance(v, str) else v for k, v in self.meta.items()},
            redactor=redactor,
        )

    def as_recorded(self, value: Any) -> Any:
        """``value`` (JSON data: what a live scrape read, :func:`golden_of`) with the secrets
        this recording's redaction took out spelled as the recording spells them."""
        if self.redactor is None:
            return value
        return json.loads(self.redactor.apply(json.dumps(value, ensure_ascii=False)))

    # -- HAR ------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the recording as HAR, atomically (a file cut by a crash is never left)."""
        target = Path(path)
        document = {
            "log": {
                "version": _FORMAT,
                "creator": {"name": "scrapeflow", "version": _version()},
                "_scrapeflow": self.meta,
                "entries": [_entry(exchange) for exchange in self.exchanges],
            }
        }
        text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, text.encode(), fsync=True)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Recording:
        """Read a HAR file; :class:`~scrapeflow.errors.InputError` naming what is wrong."""
        source = Path(path)
        try:
            document = json.loads(source.read_text(encoding="utf-8"))
            log = document["log"]
            entries = log["entries"]
            return cls(
                exchanges=[_exchange(entry) for entry in entries],
                meta=dict(log.get("_scrapeflow") or {}),
            )
        except FileNotFoundError:
            raise InputError(f"{source}: no such recording") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(
                f"{source}: not a HAR recording ({type(exc).__name__}: {exc})"
            ) from None


class Recorder:
    """An ``HttpClient`` observer that keeps every exchange::

    recorder = Recorder()
    http.observers.append(recorder)
    ...
    recorder.recording(meta).redacted(Redactor(known=...)).save("session.har")
    """

    def __init__(self) -> None:
        self.exchanges: list[RecordedExchange] = []

    def __call__(self, exchange: Exchange) -> None:
        self.exchanges.append(RecordedExchange.of(exchange))

    def recording(self, meta: dict[str, Any] | None = None) -> Recording:
        return Recording(list(self.exchanges), dict(meta or {}))


# -- redaction of one exchange ----------------------------------------------------------------


def _learn(redactor: Redactor, exchange: RecordedExchange) -> None:
    for url in (exchange.url, exchange.final_url, *(hop[1] for hop in exchange.redirects)):
        redactor.learn_query(url)
        redactor.learn_ibans(url)
    redactor.learn_headers(exchange.request_headers)
    redactor.learn_headers(exchange.response_headers)
    for hop in exchange.redirects:
        redactor.learn_headers(hop[2])
    request_type = next((v for k, v in exchange.request_headers if k.lower() == "content-type"), "")
    for body, content_type in (
        (exchange.request_body, request_type),
        (exchange.response_body, exchange.header("Content-Type")),
    ):
        text = _redactable(body or b"", content_type)[0]
        if text is not None:
            redactor.learn_body(text, content_type)
            redactor.learn_ibans(text)


def _redact(redactor: Redactor, exchange: RecordedExchange) -> RecordedExchange:
    request_type = next((v for k, v in exchange.request_headers if k.lower() == "content-type"), "")
    return replace(
        exchange,
        url=redactor.apply(exchange.url),
        final_url=redactor.apply(exchange.final_url),
        request_headers=_redact_headers(redactor, exchange.request_headers),
        response_headers=_redact_headers(redactor, exchange.response_headers),
        request_body=None
        if exchange.request_body is None
        else _redact_body(redactor, exchange.request_body, request_type),
        response_body=_redact_body(
            redactor, exchange.response_body, exchange.header("Content-Type")
        ),
        redirects=tuple(
            (status, redactor.apply(url), _redact_headers(redactor, headers))
            for status, url, headers in exchange.redirects
        ),
    )


def _redact_headers(
    redactor: Redactor, headers: Iterable[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    kept = []
    for name, value in headers:
        lower = name.lower()
        if lower in ("authorization", "proxy-authorization"):
            scheme, _, _ = value.partition(" ")
            value = f"{scheme} REDACTED" if scheme and " " in value else "REDACTED"
        kept.append((name, redactor.apply(value)))
    return tuple(kept)


def _redact_body(redactor: Redactor, body: bytes, content_type: str) -> bytes:
    text, charset = _redactable(body, content_type)
    if text is None or charset is None:
        return body  # not text (an image, a spreadsheet): kept as it is
    return redactor.apply(text).encode(charset, errors="replace")


def _redactable(body: bytes, content_type: str) -> tuple[str | None, str | None]:
    """``body`` as text to redact, and its charset: as :func:`_as_text` reads it, or, for text
    in neither its declared charset nor UTF-8 (a Windows-1252 page that says nothing), byte
    for byte as Latin-1, so that every secret spelled in ASCII or Latin-1 is found."""
    text, charset = _as_text(body, content_type)
    if text is None and _textual(content_type):
        return body.decode("latin-1"), "latin-1"
    return text, charset


def _textual(content_type: str) -> bool:
    kind = content_type.split(";")[0].strip().lower()
    return (
        not kind
        or kind.startswith("text/")
        or any(word in kind for word in ("json", "xml", "javascript", "x-www-form-urlencoded"))
    )


# -- HAR entries ------------------------------------------------------------------------------


def _charset(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip("\"'") or None
    return None


def _as_text(body: bytes, content_type: str) -> tuple[str | None, str | None]:
    """``body`` as text and the charset it was read in; (None, None) when it is not text."""
    for charset in (_charset(content_type), "utf-8"):
        if charset is None:
            continue
        try:
            return body.decode(charset), charset
        except (LookupError, UnicodeDecodeError):
            continue
    return None, None


def _content(body: bytes, content_type: str) -> dict[str, Any]:
    text, charset = _as_text(body, content_type)
    content: dict[str, Any] = {"size": len(body), "mimeType": content_type}
    if text is None:
        content.update(text=base64.b64encode(body).decode(), encoding="base64")
    else:
        content.update(text=text, _charset=charset)
    return content


def _body(content: dict[str, Any]) -> bytes:
    text = content.get("text", "")
    if content.get("encoding") == "base64":
        return base64.b64decode(text)
    return str(text).encode(content.get("_charset") or "utf-8")


def _headers(pairs: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in pairs]


def _pairs(headers: Iterable[dict[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(h["name"]), str(h["value"])) for h in headers)


def _entry(exchange: RecordedExchange) -> dict[str, Any]:
    request_type = next((v for k, v in exchange.request_headers if k.lower() == "content-type"), "")
    request: dict[str, Any] = {
        "method": exchange.method,
        "url": exchange.url,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _headers(exchange.request_headers),
        "queryString": [
            {"name": k, "value": v}
            for k, v in parse_qsl(urlsplit(exchange.url).query, keep_blank_values=True)
        ],
        "headersSize": -1,
        "bodySize": len(exchange.request_body or b""),
    }
    if exchange.request_body is not None:
        posted = _content(exchange.request_body, request_type)
        request["postData"] = {
            "mimeType": request_type,
            "text": posted["text"],
            **{k: v for k, v in posted.items() if k in ("encoding", "_charset")},
        }
    milliseconds = round(exchange.elapsed * 1000, 1)
    return {
        "startedDateTime": datetime.fromtimestamp(exchange.started_at, UTC).isoformat(),
        "time": milliseconds,
        "request": request,
        "response": {
            "status": exchange.status,
            "statusText": "",
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": _headers(exchange.response_headers),
            "content": _content(exchange.response_body, exchange.header("Content-Type")),
            "redirectURL": exchange.header("Location"),
            "headersSize": -1,
            "bodySize": len(exchange.response_body),
        },
        "cache": {},
        "timings": {"send": 0, "wait": milliseconds, "receive": 0},
        "_finalUrl": exchange.final_url,
        "_redirects": [
            {"status": status, "url": url, "headers": _headers(headers)}
            for status, url, headers in exchange.redirects
        ],
    }


def _exchange(entry: dict[str, Any]) -> RecordedExchange:
    request, response = entry["request"], entry["response"]
    posted = request.get("postData")
    started = entry.get("startedDateTime")
    return RecordedExchange(
        method=str(request["method"]).upper(),
        url=str(request["url"]),
        request_headers=_pairs(request.get("headers", [])),
        request_body=None if posted is None else _body(posted),
        status=int(response["status"]),
        response_headers=_pairs(response.get("headers", [])),
        response_body=_body(response.get("content", {})),
        final_url=str(entry.get("_finalUrl") or request["url"]),
        redirects=tuple(
            (int(hop["status"]), str(hop["url"]), _pairs(hop.get("headers", [])))
            for hop in entry.get("_redirects", [])
        ),
        started_at=datetime.fromisoformat(started).timestamp() if started else 0.0,
        elapsed=float(entry.get("time", 0)) / 1000,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scrapeflow")
    except PackageNotFoundError:
        return "unknown"
