"""The dashboard: ``/`` (one HTML page) and ``/static/<name>`` (its scripts, style and icon).

The files ship inside the package (``scrapeflow/server/static/``) and hold no data: the page
asks the JSON API for everything, with the API key the user pastes, like any other client.
The script is a handful of ES modules (``dashboard.js`` imports the others by relative URL), with
no build step and nothing from another host, so a strict Content-Security-Policy holds: only
this origin's scripts, style and connections; no inline script; no framing.

Only the files found in the static folder are served, looked up by exact name: a path that
is not one of them (``../_app.py``, an encoded slash, a sub-folder) is a 404.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.resources import files

from fastapi import APIRouter, Request, Response

from scrapeflow.server._problems import Problem

__all__ = ["SECURITY_HEADERS", "StaticFile", "dashboard", "load_static", "router", "static_file"]

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
"""Sent with every dashboard file."""

# No file name carries a version, so a browser revalidates every time (a 304 when unchanged):
# an upgraded service never runs with yesterday's script.
_CACHE_CONTROL = "no-cache"
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class StaticFile:
    """One dashboard file, read once: its bytes, media type and entity tag."""

    body: bytes
    media_type: str
    etag: str


def load_static() -> dict[str, StaticFile]:
    """The files of the package's ``static`` folder with a known media type, by name."""
    folder = files("scrapeflow.server").joinpath("static")
    found: dict[str, StaticFile] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if not entry.is_file() or suffix not in _MEDIA_TYPES:
            continue
        body = entry.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        found[entry.name] = StaticFile(body, _MEDIA_TYPES[suffix], etag)
    return found


router = APIRouter(include_in_schema=False)
_FILES = load_static()


def _serve(request: Request, name: str) -> Response:
    found = _FILES.get(name)
    if found is None:
        raise Problem(404, "not-found", "no such file")
    headers = {**SECURITY_HEADERS, "Cache-Control": _CACHE_CONTROL, "ETag": found.etag}
    if found.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    body = b"" if request.method == "HEAD" else found.body
    response = Response(body, media_type=found.media_type, headers=headers)
    response.headers["Content-Length"] = str(len(found.body))
    return response


@router.api_route("/", methods=["GET", "HEAD"])
async def dashboard(request: Request) -> Response:
    """The dashboard page."""
    return _serve(request, "index.html")


@router.api_route("/static/{name}", methods=["GET", "HEAD"])
async def static_file(name: str, request: Request) -> Response:
    """One of the dashboard's files, by exact name."""
    return _serve(request, name)
