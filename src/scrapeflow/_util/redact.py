"""Scrub secrets from text before it reaches a log line, an error message or a status file.

What is masked is the userinfo of anything URL-like, up to the LAST "@" of its token (passwords
may hold "@", "/" or ":"): ``scheme://user:pass@host``, ``scheme://token@host``, and
``user:pass@host`` without a scheme. Over-masking (an "@" in a path) is the safe side.

The scan is linear in the text's length, whatever the text: a single regular expression for
this backtracks (3 s for a 40,000-character URL, minutes for one of 400,000, blocking the event
loop and with it Ctrl-C). Here only the tokens holding an "@" are looked at, each with
``str.find`` / ``rfind`` and anchored searches that never go back over what they passed. The
result is the one of the pattern (``_REFERENCE`` in the tests)::

    (?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^\\s'"<>]*@
    |(?<![^\\s'"(\\[<=,])[^\\s'"<>()\\[\\]]*@(?=[\\w\\[])
"""

from __future__ import annotations

import re
import sys
from typing import Any

__all__ = ["redact", "redact_url", "redact_value"]

_MASK = "***@"
# A token ends at whitespace, a quote or an angle bracket (the first alternative's alphabet).
_TOKEN_END = re.compile(r"""[\s'"<>]""")
# Inside a token, a scheme-less "user:pass@" also stops at brackets (the second alternative's).
_GROUP_END = re.compile(r"[()\[\]]")
# Where a scheme-less "user:pass@" may start inside a token: right after one of these.
_STARTERS = frozenset("([=,")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_EQUALS_OR_COMMA = re.compile(r"[=,]")
# "password=secret" or "password='se cret'" in a key=value connection string (libpq, psycopg).
_CONNINFO_PASSWORD = re.compile(r"(?i)\b(password)=('(?:[^'\\]|\\.)*'|[^\s'\"]+)")
# Query parameters whose value is a credential, by a word in their name (case-insensitive):
# ?token=, ?api_key=, ?X-Amz-Signature=, ?session_id=, ?code= (an OAuth code)…
_SECRET_NAME = re.compile(
    r"(?i)(token|key|secret|pass|pwd|auth|sig|session|code|credential|jwt|ticket|nonce|otp)"
)
# "No scheme left in the token": its "://" is past any index, so it is never searched again.
_NO_SCHEME = (-1, sys.maxsize)


def redact(text: str) -> str:
    """Return ``text`` with the credentials of every URL in it replaced by ``***``.

    Takes time linear in ``len(text)``.

    >>> redact("Cannot connect via http://bob:hunter2@127.0.0.2:8888")
    'Cannot connect via http://***@127.0.0.2:8888'
    >>> redact("bob:p@ss@10.0.0.1:3128 and http://token@h:1")
    '***@10.0.0.1:3128 and http://***@h:1'
    >>> redact("connection failed: user=bob password=hunter2 host=db")
    'connection failed: user=bob password=*** host=db'
    """
    if "password=" in text.lower():  # a libpq key=value connection string
        text = _CONNINFO_PASSWORD.sub(r"\1=***", text)
    at = text.find("@")
    if at < 0:
        return text
    parts: list[str] = []
    pos = 0
    while at >= 0:
        # The token around this "@": from after the last token end before it (searched in the
        # reversed gap, which is never scanned again) to the next token end.
        gap = text[pos:at]
        found = _TOKEN_END.search(gap[::-1])
        start = pos + len(gap) - found.start() if found else pos
        found = _TOKEN_END.search(text, at)
        end = found.start() if found else len(text)
        # A scheme-less credential may start the token unless a ">" precedes it.
        starts_clear = start == 0 or text[start - 1] != ">"
        parts.append(text[pos:start])
        parts.append(_redact_token(text[start:end], starts_clear))
        pos = end
        at = text.find("@", end)
    parts.append(text[pos:])
    return "".join(parts)


def _redact_token(token: str, starts_clear: bool) -> str:
    """Mask the credentials of one token (no whitespace, quote or angle bracket in it)."""
    last_at = token.rfind("@")
    parts: list[str] = []
    pos = 0
    # (scheme start, index of "://"): searched again only once ``pos`` has passed the "://"
    # found, so the token is searched for schemes once in all.
    scheme = (-1, -1)
    while pos < len(token):
        if scheme[1] < pos:
            scheme = _next_scheme(token, pos)
        scheme_at = scheme[0] if last_at >= scheme[1] + 3 else -1
        # A scheme-less credential wins only if it starts before the scheme (the pattern tries
        # the scheme first at each position).
        limit = scheme_at if scheme_at >= 0 else len(token)
        plain = _next_plain(token, pos, limit, starts_clear)
        if plain is not None:
            begin, after = plain
            parts += [token[pos:begin], _MASK]
            pos = after
            continue
        if scheme_at >= 0:
            parts += [token[pos:scheme_at], token[scheme_at : scheme[1] + 3], _MASK]
            pos = last_at + 1  # every "@" of the token is behind
        break
    parts.append(token[pos:])
    return "".join(parts)


def _next_scheme(token: str, pos: int) -> tuple[int, int]:
    """The first ``scheme://`` at or after ``pos``: (where the scheme starts, where "://" is),
    or ``_NO_SCHEME``.

    The scheme is the run of scheme characters before "://", from its first letter. A run never
    holds "@" (and ``pos`` is 0 or just after an "@"), so it never reaches back before ``pos``.
    """
    search_from = pos
    while True:
        colon = token.find("://", search_from)
        if colon < 0:
            return _NO_SCHEME
        run_start = colon
        while run_start > pos and token[run_start - 1] in _SCHEME_CHARS:
            run_start -= 1
        first_letter = next((i for i in range(run_start, colon) if token[i] in _LETTERS), -1)
        if first_letter >= 0:
            return first_letter, colon
        search_from = colon + 1


def _next_plain(token: str, pos: int, limit: int, starts_clear: bool) -> tuple[int, int] | None:
    """The first scheme-less ``user:pass@`` starting in ``[pos, limit)``: (start, after its "@").

    It starts at the token's start or right after one of ``([=,``, runs to the last "@" of its
    bracket-free group that is followed by a word character or "[".
    """
    group_start = pos
    while group_start < limit:
        found = _GROUP_END.search(token, group_start)
        group_end = found.start() if found else len(token)
        last = _last_credential_at(token, group_start, group_end)
        if last >= 0:
            begin = -1
            if _is_start(token, group_start, starts_clear):
                begin = group_start
            else:
                sep = _EQUALS_OR_COMMA.search(token, group_start, last)
                if sep is not None:
                    begin = sep.start() + 1
            if 0 <= begin < limit:
                return begin, last + 1
        group_start = group_end + 1
    return None


def _is_start(token: str, index: int, starts_clear: bool) -> bool:
    if index == 0:
        return starts_clear
    return token[index - 1] in _STARTERS


def _last_credential_at(token: str, start: int, end: int) -> int:
    """The last "@" in ``token[start:end]`` followed by a word character or "[", else -1."""
    while True:
        at = token.rfind("@", start, end)
        if at < 0:
            return -1
        after = token[at + 1 : at + 2]
        if after == "[" or (after and (after.isalnum() or after == "_")):
            return at
        end = at


def redact_value(value: Any) -> Any:
    """``redact`` applied to every string inside ``value`` (dicts, lists, tuples, exceptions)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}")
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return type(value)(redact_value(v) for v in value)
    return value


def redact_url(url: str) -> str:
    """``url`` as it may be shown: its credentials (userinfo) and the values of its query
    parameters that name a secret (``token``, ``api_key``, ``sig``, ``password``…) replaced
    by ``***``; the rest as given, byte for byte.

    >>> redact_url("https://shop.example/p?page=2&token=abc&api_key=k1#top")
    'https://shop.example/p?page=2&token=***&api_key=***#top'
    >>> redact_url("http://bob:hunter2@h/?X-Amz-Signature=f00&q=ok")
    'http://***@h/?X-Amz-Signature=***&q=ok'
    """
    url = redact(url)
    start = url.find("?")
    if start < 0:
        return url
    end = url.find("#", start)
    end = len(url) if end < 0 else end
    shown = []
    for pair in url[start + 1 : end].split("&"):
        name, equals, value = pair.partition("=")
        secret = equals and value and _SECRET_NAME.search(name) is not None
        shown.append(f"{name}=***" if secret else pair)
    return f"{url[: start + 1]}{'&'.join(shown)}{url[end:]}"
