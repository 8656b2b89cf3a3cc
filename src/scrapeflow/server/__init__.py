"""The scrapeflow service: ``create_app(settings)`` builds the FastAPI app (``scrapeflow serve``).

Versioned under ``/v1``; OpenAPI at ``/openapi.json`` (``/docs`` when ``api_docs`` is on); API
keys with scopes, expiry, rotation and revocation (``scrapeflow keys``); errors as
``application/problem+json``. See ``docs/service.md``.
"""

from __future__ import annotations

from scrapeflow.server._app import create_app
from scrapeflow.server._keys import ApiKey, Scope, create_key, find_key
from scrapeflow.server._listen import tcp_listener

__all__ = ["ApiKey", "Scope", "create_app", "create_key", "find_key", "tcp_listener"]
