"""A whole HTTP answer as :class:`~scrapeflow.http.HttpClient` gives it, decoded by the
rules every scraper follows (strict charsets, never replacement characters)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yarl
from multidict import CIMultiDictProxy

__all__ = ["BanCheck", "Response", "Validator"]

Validator = Callable[[bytes], None]
BanCheck = Callable[["Response"], bool]


@dataclass(frozen=True, slots=True)
class Response:
    """A whole answer: status, headers, body, final URL, and how it was obtained."""

    method: str
    url: str
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    elapsed: float
    attempts: int
    proxy: str | None  # host:port of the proxy, never its credentials

    def text(self, encoding: str | None = None, *, default_encoding: str = "utf-8") -> str:
        """The body as text, decoded strictly.

        The charset is ``encoding`` when given (it overrides what the server declares: for a
        site known to mislabel its pages), else the ``charset`` of ``Content-Type``, else
        ``default_encoding``. A byte that does not decode, or a charset Python does not know,
        raises :class:`~scrapeflow.errors.UndecodableBody` (also a ``ValueError``): replacement
        characters would be parsed and stored as if the site had sent them.
        """
        from scrapeflow.errors import UndecodableBody  # kept local: may join the imports above

        charset = encoding
        if charset is None:
            for param in self.headers.get("Content-Type", "").split(";")[1:]:
                name, _, value = param.partition("=")
                if name.strip().lower() == "charset":
                    charset = value.strip().strip("\"'") or None
            charset = charset or default_encoding
        try:
            return self.body.decode(charset)
        except (LookupError, UnicodeDecodeError) as exc:
            # The query may carry a token: the URL is named without it.
            where = str(yarl.URL(self.url).with_user(None).with_query(None).with_fragment(None))
            if isinstance(exc, UnicodeDecodeError):
                bad = self.body[exc.start : exc.start + 4].hex(" ")
                problem = f"the body is not {charset[:40]} (bytes {bad} at offset {exc.start})"
                position: int | None = exc.start
            else:
                problem, position = f"unknown charset {charset[:40]!r}", None
            raise UndecodableBody(
                f"{self.method} {where}: {problem}", url=where, encoding=charset, position=position
            ) from None

    def json(self) -> Any:
        return json.loads(self.body)
