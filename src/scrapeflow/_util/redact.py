"""Scrub secrets from text before it reaches a log line, an error message or a status file."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["redact", "redact_value"]

# The userinfo of anything URL-like, up to the LAST "@" of its token (passwords may hold "@",
# "/" or ":"): "scheme://user:pass@host", "scheme://token@host", and "user:pass@host" without a
# scheme. Over-masking (an "@" in a path) is the safe side.
_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^\s'\"<>]*@"
    r"|(?<![^\s'\"(\[<=,])[^\s'\"<>()\[\]]*@(?=[\w\[])"
)


def redact(text: str) -> str:
    """Return ``text`` with the credentials of every URL in it replaced by ``***``.

    >>> redact("Cannot connect via http://bob:hunter2@127.0.0.2:8888")
    'Cannot connect via http://***@127.0.0.2:8888'
    >>> redact("bob:p@ss@10.0.0.1:3128 and http://token@h:1")
    '***@10.0.0.1:3128 and http://***@h:1'
    """
    return _USERINFO.sub(lambda m: f"{m.group('scheme') or ''}***@", text)


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
