"""The route table's type and the OpenAPI 3.1 document generated from it.

The application registers exactly the routes of one table (``syncd.api.routes.ROUTES``) and
this module describes exactly that table, so a route cannot be served without being
documented.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Reply:
    """One documented response of a route: its description and body schema (a component
    name, or ``None`` for a body that is not JSON)."""

    description: str
    schema: str | None = "Error"
    media_type: str = "application/json"


@dataclass(frozen=True)
class Route:
    """One route: what the application registers and what the OpenAPI document says."""

    method: str
    path: str
    handler: Handler
    summary: str
    responses: Mapping[int, Reply]
    request: str | None = None  # component schema of the JSON body
    query: tuple[str, ...] = ()  # names of PARAMETERS components
    auth: bool = True  # needs the bearer token when one is configured

    @property
    def operation_id(self) -> str:
        """The handler's name, unique in the table."""
        return self.handler.__name__


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_TIME = {"type": ["string", "null"], "format": "date-time"}
_STR_OR_NULL = {"type": ["string", "null"]}
_COUNT = {"type": "integer", "minimum": 0}
_CONNECTOR_STATUS = ["active", "paused", "error", "deleting"]
_DOC_STATUS = ["pending", "running", "indexed", "failed"]

_CONFIG_PROPERTIES: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "maxLength": 200},
    "source": {
        "type": "object",
        "description": "Source configuration; `type` defaults to `http`.",
        "properties": {"type": {"type": "string"}},
        "additionalProperties": True,
    },
    "indexer": {
        "type": "object",
        "description": '`{"type": "store"}` (default), `{"type": "webhook", "url", "headers"}` '
        "or a plugin.",
        "properties": {"type": {"type": "string"}},
        "required": ["type"],
        "additionalProperties": True,
    },
    "sync_schedule": {"type": ["string", "null"], "description": "5-field cron expression."},
    "sync_timezone": {"type": ["string", "null"], "description": "IANA time zone; UTC if null."},
    "page_retries": {"type": "integer", "minimum": 0, "maximum": 20},
    "page_retry_backoff": {"type": "number", "minimum": 0, "maximum": 3600},
    "throttle_seconds": {"type": "number", "minimum": 0, "maximum": 3600},
    "retry_on_status": {
        "type": "array",
        "items": {"type": "integer", "minimum": 400, "maximum": 599},
    },
}


def _page_of(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {"data": {"type": "array", "items": _ref(item)}, "next_cursor": _STR_OR_NULL},
    }


def _object(properties: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(properties), "properties": dict(properties), **extra}


SCHEMAS: dict[str, Any] = {
    "Error": _object({"detail": {"type": "string"}}, additionalProperties=True),
    "ValidationError": _object(
        {
            "detail": {
                "type": "array",
                "items": _object(
                    {
                        "loc": {"type": "array", "items": {"type": ["string", "integer"]}},
                        "msg": {"type": "string"},
                    }
                ),
            }
        }
    ),
    "ConnectorCreate": {
        "type": "object",
        "required": ["name", "source"],
        "properties": _CONFIG_PROPERTIES,
        "additionalProperties": False,
    },
    "ConnectorPatch": {
        "type": "object",
        "properties": {**_CONFIG_PROPERTIES, "status": {"enum": ["active", "paused"]}},
        "additionalProperties": False,
    },
    "Connector": _object(
        {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "status": {"enum": _CONNECTOR_STATUS},
            "sync_status": {"enum": ["idle", "running"]},
            "last_error": _STR_OR_NULL,
            "run_id": _STR_OR_NULL,
            "sync_started_at": _TIME,
            "last_synced_at": _TIME,
            "sync_schedule": _STR_OR_NULL,
            "sync_timezone": _STR_OR_NULL,
            "next_run_at": _TIME,
            "created_at": _TIME,
            "updated_at": _TIME,
            "source": {"type": "object", "description": 'Secrets are shown as "***".'},
            "indexer": {"type": "object", "description": 'Secrets are shown as "***".'},
            "page_retries": {"type": "integer"},
            "page_retry_backoff": {"type": "number"},
            "throttle_seconds": {"type": "number"},
            "retry_on_status": {"type": "array", "items": {"type": "integer"}},
            "progress": _object({"pages": _COUNT, "documents": _COUNT}),
            "waiting": {
                "oneOf": [
                    {"type": "null"},
                    _object(
                        {
                            "reason": {"enum": ["backoff", "retry_after", "throttle"]},
                            "until": {"type": "string", "format": "date-time"},
                        }
                    ),
                ]
            },
            "sync_owner": _STR_OR_NULL,
            "sync_heartbeat_at": _TIME,
            "documents": _object(dict.fromkeys(_DOC_STATUS, _COUNT)),
        }
    ),
    "ConnectorList": _page_of("Connector"),
    "Run": _object(
        {
            "id": {"type": "string"},
            "connector_id": {"type": "string"},
            "trigger": {"enum": ["manual", "schedule", "stale_lock"]},
            "outcome": {"enum": ["running", "succeeded", "failed", "aborted", "interrupted"]},
            "started_at": _TIME,
            "finished_at": _TIME,
            "pages": _COUNT,
            "documents_seen": _COUNT,
            "documents_enqueued": _COUNT,
            "documents_rejected": _COUNT,
            "rejections": {
                "type": "array",
                "items": _object(
                    {
                        "page": {"type": ["integer", "null"]},
                        "record": {"type": ["integer", "string"]},
                        "reason": {"type": "string"},
                    }
                ),
            },
            "note": _STR_OR_NULL,
            "error": _STR_OR_NULL,
            "owner": _STR_OR_NULL,
        }
    ),
    "RunList": _page_of("Run"),
    "Document": _object(
        {
            "external_id": {"type": "string"},
            "status": {"enum": _DOC_STATUS},
            "error": _STR_OR_NULL,
            "content_hash": {"type": "string"},
            "attempts": _COUNT,
            "created_at": _TIME,
            "updated_at": _TIME,
            "indexed_at": _TIME,
        }
    ),
    "DocumentWithPayload": {"allOf": [_ref("Document"), _object({"payload": {}})]},
    "DocumentList": _page_of("Document"),
    "SyncStarted": _object(
        {
            "connector_id": {"type": "string"},
            "run_id": {"type": "string"},
            "sync_status": {"const": "running"},
        }
    ),
    "AbortRequested": _object(
        {
            "connector_id": {"type": "string"},
            "run_id": {"type": "string"},
            "status": {"const": "abort_requested"},
        }
    ),
    "Deleting": _object({"connector_id": {"type": "string"}, "status": {"const": "deleting"}}),
    "Requeued": _object({"requeued": _COUNT}),
    "Health": _object({"status": {"const": "ok"}}),
    "Readiness": _object({"store": {"type": "string"}, "queue": {"type": "string"}}),
    "OpenAPI": {"type": "object"},
}

PARAMETERS: dict[str, Any] = {
    "limit": {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    },
    "cursor": {
        "name": "cursor",
        "in": "query",
        "required": False,
        "description": "The `next_cursor` of the previous page.",
        "schema": {"type": "string"},
    },
    "connector_status": {
        "name": "status",
        "in": "query",
        "required": False,
        "schema": {"enum": _CONNECTOR_STATUS},
    },
    "document_status": {
        "name": "status",
        "in": "query",
        "required": False,
        "schema": {"enum": _DOC_STATUS},
    },
}

UNAUTHORIZED = Reply("Missing or wrong bearer token")
INVALID = Reply("Invalid request", "ValidationError")


def build_openapi(
    routes: Sequence[Route], *, title: str = "syncd control API", version: str = "0"
) -> dict[str, Any]:
    """The OpenAPI 3.1 document describing ``routes``."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(openapi_path(route.path), {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def _operation(route: Route) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": route.operation_id, "summary": route.summary}
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _path_params(route.path)
    ]
    params.extend(PARAMETERS[name] for name in route.query)
    if params:
        op["parameters"] = params
    if route.request is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(route.request)}},
        }
    responses = dict(route.responses)
    if route.request is not None or route.query:
        responses.setdefault(422, INVALID)
    if route.auth:
        responses.setdefault(401, UNAUTHORIZED)
    else:
        op["security"] = []
    op["responses"] = {str(status): _response(reply) for status, reply in sorted(responses.items())}
    return op


def _response(reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = {"description": reply.description}
    if reply.schema is not None:
        out["content"] = {reply.media_type: {"schema": _ref(reply.schema)}}
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
