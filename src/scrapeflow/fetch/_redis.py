"""gofetch's push2redis: announce every stored item on a Redis stream for downstream processors.

Each stored fetch becomes one stream entry (``XADD <stream> * ...``) with the fields
``checksum``, ``location``, ``requested_url``, ``final_url``, ``processor``, ``meta`` (JSON),
``fetch_id`` and ``fetched_at``. Consumers read it with ``XREAD`` or a consumer group
(``XREADGROUP``), which gives each processor its own position and at-least-once delivery.
"""

from __future__ import annotations

from typing import Any

import orjson

from scrapeflow._util.redact import redact
from scrapeflow.errors import ConfigError, MissingExtra, StorageError
from scrapeflow.storage import IndexEntry

__all__ = ["RedisPush"]

_CONNECT_TIMEOUT = 10.0
_COMMAND_TIMEOUT = 60.0


class RedisPush:
    """Pushes stored items to the Redis stream ``stream`` at ``url``."""

    def __init__(self, url: str, *, stream: str) -> None:
        try:
            import redis.asyncio as redis_asyncio
        except ImportError as exc:
            raise MissingExtra("pushing to Redis", "redis") from exc
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"REDIS_URL must be a redis:// URL, got {redact(url)!r}")
        self.stream = stream
        self._url = url
        # Bounded waits: a host that swallows packets must not hang the check or a writer.
        self._client: Any = redis_asyncio.from_url(
            url, socket_connect_timeout=_CONNECT_TIMEOUT, socket_timeout=_COMMAND_TIMEOUT
        )

    async def connect(self) -> None:
        try:
            await self._client.ping()
        except Exception as exc:
            raise StorageError(f"cannot reach Redis at {redact(self._url)}: {exc}") from None

    async def push(self, entry: IndexEntry) -> None:
        await self._client.xadd(
            self.stream,
            {
                "checksum": entry.checksum,
                "location": entry.content_location,
                "requested_url": entry.requested_link,
                "final_url": entry.final_link,
                "processor": entry.parser_name,
                "meta": orjson.dumps(dict(entry.parser_meta)),
                "fetch_id": entry.fetch_id,
                "fetched_at": entry.fetch_started.isoformat(),
            },
        )

    async def close(self) -> None:
        await self._client.aclose()
