"""Executors that fetch ``status["params"]["url"]`` into ``<dir>/<key>.scrape``.

``scrape`` sends a GET, or a POST of ``params["post_payload"]`` (a dict, sent form-encoded) when
it is set; ``params["headers"]`` adds request headers. Its output in the status::

    {"size": 95534, "content": "<md5 of the body>", "response_headers": {...},
     "http_status": 200, "final_url": "http://.../after-redirects"}

Anything but a 200 fails the task with ``HTTPStatusError``. The body file is written only once
the response is complete and accepted, and before the status that declares it: whenever a task's
status says it succeeded, its ``.scrape`` file is whole (an existing one is replaced atomically).

``scrape_with_validation`` is the same with a ``response_callback(content)`` that raises
``RuntimeError`` when the content is not what was expected (a CAPTCHA page served with a 200);
then no scrape file is left for the task and the error is recorded. Call it from your own
executor, whose name is the one recorded::

    async def scrape(context, status):
        return await scrape_with_validation(context, status, callback)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, overload

from scrapeflow._taskify import Context, taskify
from scrapeflow._util.atomic import write_new_or_replace
from scrapeflow.errors import (
    CaptchaDetected,
    HTTPStatusError,
    NoProxyAvailable,
    ScrapeError,
    ValidationFailed,
)
from scrapeflow.status import StatusData

__all__ = [
    "SCRAPE_SUFFIX",
    "NoProxyAvailable",
    "ResponseCallback",
    "scrape",
    "scrape_path",
    "scrape_with_validation",
]

SCRAPE_SUFFIX = ".scrape"
ResponseCallback = Callable[[bytes], None]

# Bodies from this size on are hashed and written from a worker thread (both release the GIL),
# so the event loop serves other responses meanwhile. Below it, the hop to the thread (a
# future, a wake-up, GIL hand-offs) costs more CPU than it frees: measured on 20,000 pages of
# ~95 kB, a hop per page cost 14% more CPU for no gain in time.
_THREAD_STORE_BYTES = 256 * 1024


async def _fetch(
    context: Context, status: StatusData, validate: ResponseCallback | None = None
) -> tuple[bytes, dict[str, Any]]:
    """Send the task's request through the run's HTTP layer. The body, and the output."""
    http = context.http
    if http is None:
        raise ScrapeError("the context has no HTTP client: run executors with execute_async")
    params = status["params"]
    url = params.get("url")
    if not isinstance(url, str) or not url:
        raise ScrapeError("params has no 'url'")
    payload = params.get("post_payload")
    response = await http.request(
        "POST" if payload is not None else "GET",
        url,
        session=http.pooled_session(country=params.get("country")),
        data=payload,
        headers=params.get("headers"),
        validate=validate,
    )
    if response.status != 200:
        raise HTTPStatusError(response.status, url)
    body = response.body
    headers = response.headers
    output = {
        "size": len(body),
        "content": "",  # the body's MD5, filled in as it is stored (see _store_body)
        "response_headers": {k: headers.getone(k) for k in headers},
        "http_status": response.status,
        "final_url": response.url,
    }
    return body, output


async def _store_body(path: str, body: bytes, output: dict[str, Any]) -> None:
    """Write ``body`` to ``path`` and put its MD5 in ``output["content"]``.

    The task's status, saved after this, is what declares the body complete."""
    if len(body) >= _THREAD_STORE_BYTES:
        output["content"] = await asyncio.to_thread(_digest_and_write, path, body)
    else:
        output["content"] = _digest_and_write(path, body)


def _digest_and_write(path: str, body: bytes) -> str:
    write_new_or_replace(path, body)
    return hashlib.md5(body, usedforsecurity=False).hexdigest()


def scrape_path(context: Context, key: str) -> Path:
    """Where ``scrape`` stores the body of task ``key``."""
    return Path(_body_path(context, key))


def _body_path(context: Context, key: str) -> str:
    # A plain string: this runs for every task, and pathlib costs microseconds here.
    return os.path.join(context.dir, key + SCRAPE_SUFFIX)


@taskify
async def scrape(context: Context, key: str, status: StatusData) -> StatusData:
    """GET (or POST ``post_payload``) the task's URL; store the body in ``<key>.scrape``."""
    body, output = await _fetch(context, status)
    await _store_body(_body_path(context, key), body, output)
    return output


@overload
async def scrape_with_validation(
    context: Context, key: str, status: StatusData, response_callback: ResponseCallback | None
) -> StatusData: ...
@overload
async def scrape_with_validation(
    context: Context, status: StatusData, response_callback: ResponseCallback | None = None
) -> StatusData: ...
async def scrape_with_validation(context: Context, *args: Any, **kwargs: Any) -> StatusData:
    """Like ``scrape``, then ``response_callback(body)``; if it raises, no scrape file is kept.

    Both call forms of the seed work: ``(context, key, status, response_callback)`` and
    ``(context, status, response_callback)``; the key defaults to ``status["name"]``.
    """
    key, status, callback = _validation_args(args, kwargs)
    path = _body_path(context, key)
    try:
        # The HTTP layer runs the callback: a refused page retires the session and is tried
        # again through a fresh one (a CAPTCHA is rarely served twice to a new visitor).
        body, output = await _fetch(context, status, validate=callback)
    except CaptchaDetected as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        cause = exc.__cause__
        if isinstance(cause, RuntimeError):
            raise cause from None  # the seed's contract: the callback's own error is recorded
        raise ValidationFailed(f"{type(cause).__name__}: {cause}") from exc
    await _store_body(path, body, output)
    return output


def _validation_args(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, StatusData, ResponseCallback | None]:
    callback = kwargs.pop("response_callback", None)
    status_kw = kwargs.pop("status", None)
    key_kw = kwargs.pop("key", None)
    if kwargs:
        raise TypeError(f"unexpected arguments: {', '.join(kwargs)}")
    rest = list(args)
    if rest and isinstance(rest[0], str):
        key_kw = rest.pop(0)
    if rest and isinstance(rest[0], dict):
        status_kw = rest.pop(0)
    if rest:
        callback = rest.pop(0)
    if rest or not isinstance(status_kw, dict):
        raise TypeError("scrape_with_validation(context, [key,] status, response_callback)")
    key = key_kw if isinstance(key_kw, str) else status_kw["name"]
    return key, status_kw, callback
