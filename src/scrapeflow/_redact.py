"""Scrub secrets from text before it reaches a log line, an error message or a status file."""

from __future__ import annotations

import re

# user:password@ in any URL-like text ("http://bob:hunter2@10.0.0.1:3128").
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]*@")


def redact(text: str) -> str:
    """Return ``text`` with the credentials of every URL in it replaced by ``***:***``.

    >>> redact("Cannot connect via http://bob:hunter2@127.0.0.2:8888")
    'Cannot connect via http://***:***@127.0.0.2:8888'
    """
    return _URL_CREDENTIALS.sub(r"\g<scheme>***:***@", text)
