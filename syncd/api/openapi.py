"""The route table's type and the OpenAPI 3.1 document generated from it.

The application registers exactly the routes of one table (``syncd.api.routes.ROUTES``) and
this module describes exactly that table, so a route cannot be served without being
documented: a path and an operation per route, with the responses every route of its kind
may give. The schemas and parameters they name are in :mod:`syncd.api.components`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from syncd.api.components import CONNECTOR_EXAMPLE, PARAMETERS, SCHEMAS, ref

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Reply:
    """One documented response of a route: its description and body schema (a component
    name, or ``None`` for a body that is not JSON)."""

    description: str
    schema: str | None = "Error"
    media_type: str = "application/json"


TAGS: tuple[dict[str, str], ...] = (
    {"name": "connectors", "description": "Connectors: configuration, state, syncs."},
    {"name": "runs", "description": "The history of a connector's sync runs."},
    {"name": "documents", "description": "A connector's documents and their indexing."},
    {"name": "events", "description": "Connector and run changes as Server-Sent Events."},
    {"name": "system", "description": "Health, readiness, metrics and this document."},
)


@dataclass(frozen=True)
class Route:
    """One route: what the application registers and what the OpenAPI document says."""

    method: str
    path: str
    handler: Handler
    summary: str
    responses: Mapping[int, Reply]
    request: str | None = None  # component schema of the JSON body
    request_required: bool = True  # False: the body may be left out
    query: tuple[str, ...] = ()  # names of PARAMETERS components
    auth: bool = True  # needs the bearer token when one is configured
    tag: str = "connectors"
    backend: bool = True  # reads or writes the store or the queue: may answer 503
    # JSON pointer into the success body to the connector id it names: the document then
    # links this response to every operation that takes that id (a client, or a stateful
    # fuzzer, can chain create → read → sync → abort).
    links_id: str | None = None
    # More links from the success response: operationId → its parameters (runtime
    # expressions), e.g. from a page of documents to the first one.
    links: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def operation_id(self) -> str:
        """The handler's name, unique in the table."""
        return self.handler.__name__


UNAUTHORIZED = Reply("Missing or wrong bearer token")
INVALID = Reply("Invalid request: one entry per bad field", "ValidationError")
TOO_LARGE = Reply("Request body too large")
UNAVAILABLE = Reply("Store unavailable / Queue unavailable: retry later")
NOT_FOUND = Reply("Connector not found")
# Answered by the HTTP parser itself, before any handler: a plain-text body.
MALFORMED = Reply("Malformed request (a request line or a header over 8 KiB)", None, "text/plain")


def build_openapi(
    routes: Sequence[Route],
    *,
    connector_schemas: Mapping[str, Any],
    title: str = "syncd control API",
    version: str = "0",
) -> dict[str, Any]:
    """The OpenAPI 3.1 document describing ``routes``; ``connector_schemas`` are the
    components generated from the connector model (``ConnectorCreate``, ``ConnectorPatch``,
    each kind's config), for the kinds this daemon knows."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(openapi_path(route.path), {})[route.method.lower()] = _operation(
            route, routes
        )
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "tags": list(TAGS),
        "paths": paths,
        "components": {
            "schemas": _schemas(connector_schemas),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def _schemas(connector_schemas: Mapping[str, Any]) -> dict[str, Any]:
    schemas = {**SCHEMAS, **connector_schemas}
    create = dict(schemas["ConnectorCreate"])
    create["examples"] = [CONNECTOR_EXAMPLE]
    schemas["ConnectorCreate"] = create
    return schemas


def _operation(route: Route, routes: Sequence[Route]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
    }
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _path_params(route.path)
    ]
    params.extend(PARAMETERS[name] for name in route.query)
    if params:
        op["parameters"] = params
    if route.request is not None:
        op["requestBody"] = {
            "required": route.request_required,
            "content": {"application/json": {"schema": ref(route.request)}},
        }
    responses = dict(route.responses)
    if route.request is not None:
        responses.setdefault(413, TOO_LARGE)
    if route.request is not None or route.query or "{id}" in route.path:
        # A path id no store can hold (a NUL) is a 404; a forged cursor, a 422.
        responses.setdefault(422, INVALID)
    if route.query or _path_params(route.path):
        # The HTTP parser refuses a request line over 8 KiB before any handler runs.
        responses.setdefault(400, MALFORMED)
    if "{id}" in route.path:
        responses.setdefault(404, NOT_FOUND)
    if route.backend:
        responses.setdefault(503, UNAVAILABLE)
    if route.auth:
        responses.setdefault(401, UNAUTHORIZED)
    else:
        op["security"] = []
    op["responses"] = {str(status): _response(reply) for status, reply in sorted(responses.items())}
    links = _links(route.links_id, routes) if route.links_id is not None else {}
    links.update(
        (target, {"operationId": target, "parameters": dict(parameters)})
        for target, parameters in route.links.items()
    )
    if links:
        success = min(s for s in responses if s < 300)
        op["responses"][str(success)]["links"] = links
    return op


def _links(pointer: str, routes: Sequence[Route]) -> dict[str, Any]:
    """Links from a response naming a connector id to every operation taking only it."""
    return {
        r.operation_id: {
            "operationId": r.operation_id,
            "parameters": {"id": f"$response.body#{pointer}"},
        }
        for r in routes
        if _path_params(r.path) == ["id"]
    }


def _response(reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = {"description": reply.description}
    if reply.schema is not None:
        out["content"] = {reply.media_type: {"schema": ref(reply.schema)}}
    elif reply.media_type != "application/json":
        out["content"] = {reply.media_type: {"schema": {"type": "string"}}}
    return out


def _path_params(path: str) -> list[str]:
    """``/a/{id}/b/{external_id:.+}`` → ``["id", "external_id"]``."""
    names: list[str] = []
    for part in path.split("/"):
        if part.startswith("{") and part.endswith("}"):
            names.append(part[1:-1].split(":", 1)[0])
    return names


def openapi_path(path: str) -> str:
    """The route's path as OpenAPI writes it (no aiohttp regex)."""
    return "/".join(
        "{" + part[1:-1].split(":", 1)[0] + "}" if part.startswith("{") else part
        for part in path.split("/")
    )
