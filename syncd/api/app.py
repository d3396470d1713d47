"""The aiohttp application of the control API: routes, errors, auth and metrics.

``build_app(daemon)`` registers every route of :data:`syncd.api.routes.ROUTES` and serves the
OpenAPI document generated from that same table. Middlewares, outermost first:

1. metrics: request latency per canonical route pattern, method and status;
2. errors: syncd's exceptions and aiohttp's HTTP errors become ``{"detail": ...}`` JSON; a
   store or queue outage is answered 503; an unexpected exception is logged and answered 500
   without a traceback;
3. auth (only with a token configured): ``Authorization: Bearer <token>`` on every route
   but ``/healthz``.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Collection
from importlib import metadata
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from syncd.api.openapi import build_openapi
from syncd.api.routes import OPENAPI, ROUTES, SERVICE, SYSTEM, System
from syncd.config import ApiConfig
from syncd.errors import (
    Conflict,
    NameConflict,
    NotFound,
    QueueError,
    StoreError,
    ValidationError,
)
from syncd.metrics import Metrics
from syncd.service import ConnectorService

log = structlog.get_logger("syncd.api")

UNMATCHED_ROUTE = "unmatched"
"""Metrics label of requests no route matched (never the raw path: unbounded cardinality)."""

_LOC_ROOTS = ("body", "query", "path")


def build_app(service: ConnectorService, system: System, api: ApiConfig) -> web.Application:
    """The control API application: ``service``'s operations, ``system``'s readiness and
    metrics, configured by the ``[api]`` section."""
    middlewares: list[Middleware] = [
        _metrics_middleware(system.metrics),
        _error_middleware(api.max_body_bytes),
    ]
    if api.token:
        public = frozenset(route.handler for route in ROUTES if not route.auth)
        middlewares.append(_auth_middleware(api.token, public))
    app = web.Application(client_max_size=api.max_body_bytes, middlewares=middlewares)
    app[SERVICE] = service
    app[SYSTEM] = system
    for route in ROUTES:
        app.router.add_route(route.method, route.path, route.handler)
    app[OPENAPI] = build_openapi(ROUTES, version=_version())
    return app


def _version() -> str:
    try:
        return metadata.version("syncd")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0"


def error_body(exc: ValidationError) -> dict[str, Any]:
    """The 422 body of a validation error: one ``{"loc", "msg"}`` per field."""
    return {"detail": [{"loc": _loc(key), "msg": msg} for key, msg in exc.errors.items()]}


def _loc(key: str) -> list[str | int]:
    """``source.headers.0`` → ``["body", "source", "headers", 0]``."""
    parts: list[str | int] = [_index(p) for p in key.split(".")]
    if parts[0] not in _LOC_ROOTS:
        parts.insert(0, "body")
    return parts


def _index(part: str) -> str | int:
    # An array index. Any other key stays text: "²" is a digit to isdigit() but not to int(),
    # and int() refuses more than 4300 digits.
    return int(part) if part.isascii() and part.isdigit() and len(part) <= 18 else part


def _detail(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"detail": message}, status=status, headers=headers or None)


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else UNMATCHED_ROUTE


def _metrics_middleware(metrics: Metrics) -> Middleware:
    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # a redirect, let through by the error middleware
            _observe(metrics, request, exc.status, started)
            raise
        except Exception:
            # The error middleware answers every other Exception; this is a last resort.
            _observe(metrics, request, 500, started)
            raise
        _observe(metrics, request, response.status, started)
        return response

    return observe


def _observe(metrics: Metrics, request: web.Request, status: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    metrics.observe_request(_route_label(request), request.method, status, elapsed)


def _error_middleware(max_body_bytes: int) -> Middleware:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except NotFound as exc:
            return _detail(404, str(exc))
        except NameConflict:
            return _detail(409, "Connector name already exists")
        except Conflict as exc:
            return web.json_response({"detail": exc.message, **exc.extra}, status=409)
        except ValidationError as exc:
            return web.json_response(error_body(exc), status=422)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            if isinstance(exc, web.HTTPRequestEntityTooLarge):
                message = f"Request body too large (limit: {max_body_bytes} bytes)"
            else:
                message = exc.reason
            keep = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
            return _detail(exc.status, message, **keep)
        except (StoreError, QueueError) as exc:
            # A backend outage: worth retrying later, unlike a bug (500). The driver's message
            # may name hosts or users, so it goes to the log only.
            part = "Store" if isinstance(exc, StoreError) else "Queue"
            log.error(
                "api.backend_unavailable",
                method=request.method,
                route=_route_label(request),
                error=str(exc),
            )
            return _detail(503, f"{part} unavailable")
        except asyncio.CancelledError:
            raise
        except Exception:
            # Logged with its traceback for the operator; the client learns nothing of it.
            log.exception("api.unhandled_error", method=request.method, route=_route_label(request))
            return _detail(500, "Internal server error")

    return errors


def _auth_middleware(token: str, public: Collection[Handler]) -> Middleware:
    expected = token.encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.handler in public:
            return await handler(request)
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        # compare_digest: the time taken does not reveal how much of the token matched.
        if scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), expected
        ):
            return await handler(request)
        return _detail(401, "Unauthorized", **{"WWW-Authenticate": "Bearer"})

    return auth
