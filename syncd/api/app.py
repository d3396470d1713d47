"""The aiohttp application of the control API: routes, errors, auth and metrics.

``build_app(service, system, api)`` is called by the daemon, which hands over its operations:
the :class:`~syncd.service.operations.ConnectorService` the connector routes call, and the
:class:`~syncd.api.routes.System` (readiness, ``/status``, metrics, the events hub) the system
routes read. It registers every route of :data:`syncd.api.routes.ROUTES` (a wrong method on a
path answers 405 with that path's methods), the dashboard's assets (:mod:`syncd.ui`), and
serves the OpenAPI document generated from that same table. Middlewares, outermost first:

1. pacing (with a :class:`~syncd.runtime.pacing.Pacer`): the request counts as in flight until
   its handler returns, its answer starts (a stream) or ``REQUEST_PRIORITY_SECONDS`` have
   passed, and background work waits meanwhile;
2. access (only with ``log.access``): one structured ``api.access`` debug line per request
   (method, path, status, duration_ms), instead of aiohttp's Apache-style access log;
3. metrics: request latency per canonical route pattern, method and status;
4. errors: syncd's exceptions and aiohttp's HTTP errors become ``{"detail": ...}`` JSON; a
   store or queue outage is answered 503; an unexpected exception is logged and answered 500
   without a traceback;
5. auth (only with a token configured): ``Authorization: Bearer <token>`` on every route
   but ``/healthz`` (and ``/readyz`` with ``api.public_health``) and the dashboard's static
   assets (``/ui/``, :mod:`syncd.ui`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from syncd import ui
from syncd.api.openapi import Route, build_openapi
from syncd.api.params import SERVICE
from syncd.api.routes import CLIENT_CLOSED_REQUEST, OPENAPI, ROUTES, SYSTEM, System
from syncd.config.sections import ApiConfig
from syncd.errors import (
    Conflict,
    NameConflict,
    NotFound,
    QueueError,
    StoreError,
    ValidationError,
)
from syncd.observability.metrics import Metrics
from syncd.runtime import pacing
from syncd.runtime.pacing import Pacer
from syncd.schema import model_json_schemas
from syncd.service.operations import ConnectorService
from syncd.version import VERSION

log = structlog.get_logger("syncd.api")
#: The access lines' own logger: at debug level, shown whatever ``log.level`` when enabled.
ACCESS_LOGGER = "syncd.api.access"
access_log = structlog.get_logger(ACCESS_LOGGER)

UNMATCHED_ROUTE = "unmatched"
"""Metrics label of requests no route matched (never the raw path: unbounded cardinality)."""

_LOC_ROOTS = ("body", "query", "path")


def build_app(
    service: ConnectorService,
    system: System,
    api: ApiConfig,
    *,
    access: bool = False,
    pacer: Pacer | None = None,
) -> web.Application:
    """The control API application: ``service``'s operations, ``system``'s readiness and
    metrics, configured by the ``[api]`` section; ``access`` (``log.access``) logs one
    structured ``api.access`` line per request; with ``pacer``, background work yields to
    requests in flight."""
    middlewares: list[Middleware] = [
        _metrics_middleware(system.metrics),
        _error_middleware(api.max_body_bytes),
    ]
    if access:
        # Outermost: it sees the status the client gets, errors included. Its lines are
        # debug lines, yet asked for: let them through whatever the root level.
        logging.getLogger(ACCESS_LOGGER).setLevel(logging.DEBUG)
        middlewares.insert(0, _access_middleware())
    if pacer is not None:
        middlewares.insert(0, _pacing_middleware(pacer))
    # api.public_health: readiness probes (a load balancer's, say) hold no token either.
    table = [
        replace(r, auth=False) if api.public_health and r.path == "/readyz" else r for r in ROUTES
    ]
    paths = _paths(table)
    if api.token:
        # The dashboard's assets hold no data: public (the page asks for the token itself).
        public = frozenset(route.handler for route in table if not route.auth) | ui.HANDLERS
        # A wrong method on a public path is a 405, not a 401.
        public |= {na for routes, na in paths.values() if not any(r.auth for r in routes)}
        middlewares.append(_auth_middleware(api.token, public))
    app = web.Application(client_max_size=api.max_body_bytes, middlewares=middlewares)
    if pacer is not None:
        app.on_response_prepare.append(_answer_started(pacer))
    app[SERVICE] = service
    app[SYSTEM] = system
    # Concrete paths first: as in OpenAPI, `/connectors/preview` is that path, not
    # `/connectors/{id}` with the id "preview" (aiohttp would try both, in order).
    for path in sorted(paths, key=lambda p: "{" in p):
        routes, not_allowed = paths[path]
        for route in routes:
            app.router.add_route(route.method, path, route.handler)
        app.router.add_route("*", path, not_allowed)
    ui.add_routes(app.router)  # not API operations: absent from the OpenAPI document
    app[OPENAPI] = build_openapi(
        table, connector_schemas=model_json_schemas(service.registry), version=_version()
    )
    return app


def _paths(routes: Sequence[Route]) -> dict[str, tuple[list[Route], Handler]]:
    """Each path of ``routes``: its routes, and the handler of every other method (405 with
    exactly the path's methods in ``Allow``, where aiohttp would list the methods of every
    path the request matches)."""
    paths: dict[str, list[Route]] = {}
    for route in routes:
        paths.setdefault(route.path, []).append(route)
    return {path: (rs, _not_allowed(rs)) for path, rs in paths.items()}


def _not_allowed(routes: Sequence[Route]) -> Handler:
    allowed = sorted(route.method for route in routes)

    async def method_not_allowed(request: web.Request) -> web.StreamResponse:
        raise web.HTTPMethodNotAllowed(request.method, allowed)

    return method_not_allowed


def _version() -> str:
    return VERSION


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


# aiohttp's typed request keys (and its warning for plain ones) are newer than the oldest
# aiohttp supported: a plain string key there.
_IN_FLIGHT: Any = (
    web.RequestKey("syncd_in_flight", bool) if hasattr(web, "RequestKey") else "syncd.in_flight"
)


def _pacing_middleware(pacer: Pacer) -> Middleware:
    @web.middleware
    async def paced(request: web.Request, handler: Handler) -> web.StreamResponse:
        pacer.begin()
        request[_IN_FLIGHT] = True
        # A slow request (a preview of a slow source) gives its priority up after a while.
        expiry = asyncio.get_running_loop().call_later(
            pacing.REQUEST_PRIORITY_SECONDS, _served, pacer, request
        )
        try:
            return await handler(request)
        finally:
            expiry.cancel()
            _served(pacer, request)

    return paced


def _answer_started(
    pacer: Pacer,
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    async def started(request: web.Request, response: web.StreamResponse) -> None:
        # A stream (the events) is served from its first byte on, for as long as the client
        # listens: background work must not wait for it.
        _served(pacer, request)

    return started


def _served(pacer: Pacer, request: web.Request) -> None:
    if request.get(_IN_FLIGHT):
        request[_IN_FLIGHT] = False
        pacer.end()


def _access_middleware() -> Middleware:
    # Bound once: the lazy module-level logger would assemble a logger on every line. The
    # processors it captures are those of the logging configuration in force (a reload keeps
    # them: only levels and the handler's formatter change).
    logger = access_log.bind()

    @web.middleware
    async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500  # an exception no middleware answered: aiohttp sends a 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_CLOSED_REQUEST  # the client went away first
            raise
        finally:
            logger.debug(
                "api.access",
                method=request.method,
                path=request.path,
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
            )

    return access


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
