"""Opaque, tamper-proof tokens: cursors, CSRF tokens, signatures' keys, API access tokens.

A token is ``base64url(json payload) + "." + base64url(hmac)``. The server can read it back
without keeping state, a client cannot forge or alter one, and every token carries its expiry.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

__all__ = ["TokenError", "TokenExpired", "TokenSigner"]


class TokenError(ValueError):
    """A token that was forged, altered, expired, or made for another purpose."""


class TokenExpired(TokenError):
    """A genuine token whose time is up (the signature was good)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    """Signs payloads with a secret; ``purpose`` keeps a cursor from passing as a CSRF token."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def sign(self, purpose: str, payload: dict[str, Any], ttl_seconds: float) -> str:
        body = dict(payload, _p=purpose, _x=round(time.time() + ttl_seconds, 3))
        raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        mac = hmac.new(self._secret, raw, hashlib.sha256).digest()[:18]
        return f"{_b64(raw)}.{_b64(mac)}"

    def verify(self, purpose: str, token: str) -> dict[str, Any]:
        """The payload of a good token; :class:`TokenError` saying why otherwise."""
        try:
            raw_text, mac_text = token.split(".", 1)
            raw, mac = _unb64(raw_text), _unb64(mac_text)
        except (ValueError, TypeError) as exc:
            raise TokenError("malformed token") from exc
        expected = hmac.new(self._secret, raw, hashlib.sha256).digest()[:18]
        if not hmac.compare_digest(mac, expected):
            raise TokenError("forged token")
        body = json.loads(raw)
        if body.get("_p") != purpose:
            raise TokenError("token made for something else")
        if body.get("_x", 0) < time.time():
            raise TokenExpired("expired token")
        return {k: v for k, v in body.items() if not k.startswith("_")}
