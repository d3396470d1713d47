"""The dashboard: static assets (``index.html``, ``app.js``, ``app.css``) served at ``/ui/``.

The assets hold no data, so they are public even when the API has a token: a browser cannot
add an ``Authorization`` header to a page load, and the page itself asks for the token and
sends it as a bearer token on every data call. These routes are not API operations: they
are absent from the OpenAPI document.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from aiohttp import web
from aiohttp.typedefs import Handler

PREFIX = "/ui"

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)

ASSETS = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "app.css": "text/css",
}
"""The files served, with their media types; nothing else under ``/ui/`` exists."""

_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (the ETag makes that cheap), so an upgrade is seen at once.
    "Cache-Control": "no-cache",
}


def add_routes(router: web.UrlDispatcher) -> None:
    """Register ``/ui`` (a redirect), ``/ui/`` and ``/ui/{file}`` (and their HEADs)."""
    router.add_get(PREFIX, redirect)
    router.add_get(f"{PREFIX}/", index)
    router.add_get(f"{PREFIX}/{{file}}", asset)


async def redirect(request: web.Request) -> web.StreamResponse:
    """``GET /ui`` → ``/ui/``, so that the page's relative URLs resolve under it."""
    # Relative, so that it also holds behind a reverse proxy that mounts the API on a prefix.
    raise web.HTTPFound("ui/")


async def index(request: web.Request) -> web.StreamResponse:
    """``GET /ui/``: the page."""
    return _serve(request, "index.html")


async def asset(request: web.Request) -> web.StreamResponse:
    """``GET /ui/{file}``: one of :data:`ASSETS`, else 404."""
    name = request.match_info["file"]
    if name not in ASSETS:
        raise web.HTTPNotFound()
    return _serve(request, name)


def _serve(request: web.Request, name: str) -> web.Response:
    body, etag = _load(name)
    if etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers={**_HEADERS, "ETag": etag})
    return web.Response(
        body=body,
        content_type=ASSETS[name],
        charset="utf-8",
        headers={**_HEADERS, "ETag": etag},
    )


@functools.cache
def _load(name: str) -> tuple[bytes, str]:
    """The file's bytes and ETag, read once from the installed package."""
    body = resources.files(__name__).joinpath(name).read_bytes()
    return body, f'"{hashlib.sha256(body).hexdigest()[:16]}"'


HANDLERS: frozenset[Handler] = frozenset({redirect, index, asset})
"""The handlers of these routes: public, they need no token."""
