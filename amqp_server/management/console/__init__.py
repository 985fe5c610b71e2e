"""The web console: static files served at `/` of the management port.

The page and its script are public; everything they show comes from the
HTTP API, which the script calls with the credentials the user typed
(HTTP basic), so the console sees and does exactly what the API lets that
user see and do, through the one permission service.  The files ship in
the package: no CDN, no build step.  The one library, uPlot (the charts),
is in vendor/ as its npm package ships it.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

HERE = Path(__file__).parent
FILES = {
    "index.html": "text/html",
    "console.css": "text/css",
    "console.js": "application/javascript",
    "vendor/uPlot.iife.min.js": "application/javascript",
    "vendor/uPlot.min.css": "text/css",
}


def is_public(path: str) -> bool:
    return path == "/" or path.startswith("/console/")


async def index(_request: web.Request) -> web.Response:
    return _file("index.html")


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    if request.match_info.get("folder"):
        name = request.match_info["folder"] + "/" + name
    if name not in FILES:
        raise web.HTTPNotFound()
    return _file(name)


def _file(name: str) -> web.Response:
    response = web.Response(body=(HERE / name).read_bytes(), content_type=FILES[name],
                            charset="utf-8")
    # The page may not be framed, and runs only its own script.
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'")
    response.headers["Cache-Control"] = "no-cache"
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/console/{file}", asset)
    app.router.add_get("/console/{folder}/{file}", asset)
