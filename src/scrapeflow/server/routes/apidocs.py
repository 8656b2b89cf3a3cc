"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc): the interactive API docs, only when the
``api_docs`` setting is on (``/openapi.json`` is always served).

Their scripts and styles come from an installed package, ``fastapi-offline`` (the
``scrapeflow[apidocs]`` extra, which ships Swagger UI's and ReDoc's built files), and are served
from this origin under ``/docs/assets/``: nothing is loaded from another host. The pages run
under the dashboard's Content-Security-Policy (this origin's scripts only, no inline script: the
Swagger UI page starts from a script file of ours), since the dashboard's key lives in this
origin's session storage. ReDoc alone also needs inline styles (its styled-components write
``<style>`` elements) and a ``blob:`` worker for its search; its page allows those two, and
still no inline or foreign script.
"""

from __future__ import annotations

import hashlib
from importlib.resources import files

from fastapi import APIRouter, FastAPI, Request, Response

from scrapeflow.errors import ConfigError
from scrapeflow.server._problems import Problem
from scrapeflow.server.routes.dashboard import SECURITY_HEADERS

__all__ = ["install_api_docs"]

_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
_SWAGGER_PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>scrapeflow API - Swagger UI</title>
<link rel="icon" href="/docs/assets/favicon.png">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/start.js"></script>
</body>
</html>
"""
_SWAGGER_START = b"""// Swagger UI (a file, as the page allows no inline script).
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
"""
_REDOC_PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>scrapeflow API - ReDoc</title>
<link rel="icon" href="/docs/assets/favicon.png">
</head>
<body>
<redoc spec-url="/openapi.json"></redoc>
<script src="/docs/assets/redoc.standalone.js"></script>
</body>
</html>
"""
_REDOC_HEADERS = {
    **SECURITY_HEADERS,
    "Content-Security-Policy": SECURITY_HEADERS["Content-Security-Policy"]
    .replace("style-src 'self'", "style-src 'self' 'unsafe-inline'; worker-src 'self' blob:")
    .replace("img-src 'self'", "img-src 'self' data:"),
}


def _load_assets() -> dict[str, tuple[bytes, str, str]]:
    try:
        folder = files("fastapi_offline").joinpath("static")
    except ModuleNotFoundError:
        raise ConfigError(
            "api_docs is on, but the docs' assets are not installed: "
            "pip install 'scrapeflow[apidocs]' (or turn api_docs off)"
        ) from None
    found: dict[str, tuple[bytes, str, str]] = {}
    for name, media_type in _ASSETS.items():
        body = folder.joinpath(name).read_bytes()
        found[name] = (body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    found["start.js"] = (_SWAGGER_START, _ASSETS["swagger-ui-bundle.js"], '"start-1"')
    return found


def install_api_docs(app: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets on ``app``; :class:`ConfigError` when the
    assets' package is missing."""
    assets = _load_assets()
    router = APIRouter(include_in_schema=False)

    @router.get("/docs")
    async def swagger_ui() -> Response:
        return Response(
            _SWAGGER_PAGE, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS
        )

    @router.get("/redoc")
    async def redoc() -> Response:
        return Response(_REDOC_PAGE, media_type="text/html; charset=utf-8", headers=_REDOC_HEADERS)

    @router.get("/docs/assets/{name}")
    async def asset(name: str, request: Request) -> Response:
        found = assets.get(name)
        if found is None:
            raise Problem(404, "not-found", "no such file")
        body, media_type, etag = found
        headers = {**SECURITY_HEADERS, "ETag": etag, "Cache-Control": "no-cache"}
        if etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=media_type, headers=headers)

    app.include_router(router)
