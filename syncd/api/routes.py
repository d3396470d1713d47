"""Handlers of the control API and the one table that lists them (DESIGN.md §3).

Handlers are thin: parse the request, call one operation of the connector service (or of the
daemon's :class:`System`), map the result to a status code and a body. Errors the operations
raise (``NotFound``, ``Conflict``, ...) are turned into responses by the application's error
middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import orjson
from aiohttp import web

from syncd.api import views
from syncd.api.openapi import Reply, Route
from syncd.api.params import (
    connector_query,
    cursor_param,
    json_object,
    limit_param,
    listing,
    optional_json_object,
    path_id,
    service_of,
    status_param,
)
from syncd.api.steering import STATE_ROUTES
from syncd.errors import ValidationError
from syncd.models import Connector, ConnectorStatus, DocStatus, SyncStatus
from syncd.observability.metrics import Metrics
from syncd.rules.shape import fields_object
from syncd.runtime.tasks import cancel_and_wait
from syncd.schema.spec import text_problem
from syncd.service.events import MAX_FILTER_IDS, EventHub
from syncd.service.preview import Preview


class System(Protocol):
    """What the routes reach of the daemon besides the connector operations of its
    :class:`~syncd.service.operations.ConnectorService`: readiness, status, metrics, the
    events and previews."""

    @property
    def metrics(self) -> Metrics: ...

    @property
    def events(self) -> EventHub: ...

    async def readiness(self) -> dict[str, str]: ...

    async def status(self) -> dict[str, Any]: ...

    async def preview(self, body: Mapping[str, Any]) -> Preview: ...


SYSTEM: web.AppKey[System] = web.AppKey("syncd.system")
OPENAPI: web.AppKey[dict[str, Any]] = web.AppKey("syncd.openapi")


_T = TypeVar("_T")


async def _connector_body(request: web.Request, connector: Connector) -> dict[str, Any]:
    counts = await service_of(request).document_counts(connector.id)
    return views.connector_json(connector, counts)


# --- connectors -----------------------------------------------------------------------


async def create_connector(request: web.Request) -> web.Response:
    """``POST /connectors``."""
    body = await json_object(request)
    connector = await service_of(request).create_connector(body)
    # A new connector has no documents: no need to count them.
    return web.json_response(views.connector_json(connector, {}), status=201)


async def list_connectors(request: web.Request) -> web.Response:
    """``GET /connectors``."""
    status, limit, cursor = (
        status_param(request, ConnectorStatus),
        limit_param(request),
        cursor_param(request),
    )
    service = service_of(request)
    # The page and every listed connector's counts in one store read.
    rows, next_cursor = await listing(
        service.list_connectors_with_counts(status=status, limit=limit, cursor=cursor)
    )
    # The text json_response would write, encoded for less CPU (views.connector_text).
    data = [views.connector_text(c, counts) for c, counts in rows]
    return _json_text(views.connectors_page_text(data, next_cursor))


async def get_connector(request: web.Request) -> web.Response:
    """``GET /connectors/{id}``."""
    connector, counts = await service_of(request).get_connector_with_counts(path_id(request))
    return _json_text(views.connector_text(connector, counts))


def _json_text(text: str) -> web.Response:
    # What web.json_response builds around its json.dumps text.
    return web.Response(text=text, content_type="application/json")


async def update_connector(request: web.Request) -> web.Response:
    """``PATCH /connectors/{id}``."""
    body = await json_object(request)
    connector = await service_of(request).update_connector(path_id(request), body)
    return web.json_response(await _connector_body(request, connector))


async def delete_connector(request: web.Request) -> web.Response:
    """``DELETE /connectors/{id}``."""
    connector_id = path_id(request)
    await service_of(request).delete_connector(connector_id)
    return web.json_response({"connector_id": connector_id, "status": "deleting"}, status=202)


async def trigger_sync(request: web.Request) -> web.Response:
    """``POST /connectors/{id}/sync``, with an optional body asking for a crawl mode."""
    connector_id = path_id(request)
    body = await optional_json_object(request)
    run_id = await service_of(request).trigger_sync(connector_id, body)
    # No run id: no run slot was free, the trigger waits (queued) for one.
    status = SyncStatus.RUNNING if run_id is not None else SyncStatus.QUEUED
    return web.json_response(
        {"connector_id": connector_id, "run_id": run_id, "sync_status": status.value}, status=202
    )


async def abort_sync(request: web.Request) -> web.Response:
    """``POST /connectors/{id}/sync/abort``."""
    connector_id = path_id(request)
    run_id = await service_of(request).abort_sync(connector_id)
    return web.json_response(
        {"connector_id": connector_id, "run_id": run_id, "status": "abort_requested"}, status=202
    )


# --- runs and documents ---------------------------------------------------------------


async def list_runs(request: web.Request) -> web.Response:
    """``GET /connectors/{id}/runs``."""
    limit, cursor = await connector_query(
        request, lambda: (limit_param(request), cursor_param(request))
    )
    runs, next_cursor = await listing(
        service_of(request).list_runs(path_id(request), limit=limit, cursor=cursor)
    )
    return web.json_response(
        {"data": [views.run_json(r) for r in runs], "next_cursor": next_cursor}
    )


async def list_documents(request: web.Request) -> web.Response:
    """``GET /connectors/{id}/documents``."""
    status, limit, cursor = await connector_query(
        request,
        lambda: (status_param(request, DocStatus), limit_param(request), cursor_param(request)),
    )
    documents, next_cursor = await listing(
        service_of(request).list_documents(
            path_id(request), status=status, limit=limit, cursor=cursor
        )
    )
    return web.json_response(
        {"data": [views.document_json(d) for d in documents], "next_cursor": next_cursor}
    )


async def get_document(request: web.Request) -> web.Response:
    """``GET /connectors/{id}/documents/{external_id}``."""
    document = await service_of(request).get_document(
        path_id(request), request.match_info["external_id"]
    )
    # orjson embeds the stored payload text as it is (see views.document_json).
    body = orjson.dumps(views.document_json(document, with_payload=True))
    return web.Response(body=body, content_type="application/json")


async def retry_failed(request: web.Request) -> web.Response:
    """``POST /connectors/{id}/retry-failed``."""
    requeued = await service_of(request).retry_failed(path_id(request))
    return web.json_response({"requeued": requeued}, status=202)


async def apply_deletions(request: web.Request) -> web.Response:
    """``POST /connectors/{id}/deletions/apply``."""
    deleting = await service_of(request).apply_deletions(path_id(request))
    return web.json_response({"deleting": deleting}, status=202)


# --- preview --------------------------------------------------------------------------

PREVIEW_DISCONNECT_POLL = 0.1
"""Seconds between checks that a preview's client is still connected."""
CLIENT_CLOSED_REQUEST = 499  # what the log and metrics show for a preview left by its client


async def preview_connector(request: web.Request) -> web.Response:
    """``POST /connectors/preview``: the first pages of a connector body or of an existing
    connector, nothing stored.

    A source that fails (or the time limit) answers 200 with ``error`` and the pages fetched
    before it: that is what the preview found, not a fault of this server. A client that
    disconnects stops the fetch at once: aiohttp does not cancel a handler when its client
    leaves (``handler_cancellation`` is off), so the handler watches for it.
    """
    body = await json_object(request)
    pages = body.get("pages")
    if isinstance(pages, float) and pages.is_integer():
        body["pages"] = int(pages)  # 2.0 is the integer 2 in JSON (see schema.fields)
    work = asyncio.create_task(request.app[SYSTEM].preview(body), name="api:preview")
    watch = asyncio.create_task(_client_gone(request), name="api:preview:client")
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also when this handler is cancelled (a server stopping): the fetch stops with it.
        await cancel_and_wait(watch)
        if not work.done():
            await cancel_and_wait(work)
    if work.cancelled():
        return web.json_response({"detail": "Client closed request"}, status=CLIENT_CLOSED_REQUEST)
    # orjson: a document shape embeds its metadata as JSON text (integers of any size).
    return _json_text(orjson.dumps(_preview_json(work.result())).decode())


async def _client_gone(request: web.Request) -> None:
    """Return once the request's connection is closed."""
    # Polled: aiohttp signals a lost connection to a handler only through the request body,
    # which has been read to its end by now.
    transport = request.transport
    while transport is not None and not transport.is_closing():
        await asyncio.sleep(PREVIEW_DISCONNECT_POLL)
        transport = request.transport


def _preview_json(found: Preview) -> dict[str, Any]:
    pages = []
    for page in found.pages:
        item: dict[str, Any] = {
            "records": page.records,
            "ids": list(page.ids),
            "rejected": [{"index": r.record, "reason": r.reason} for r in page.rejected],
            "next_cursor": page.next_cursor,
            "reason": page.reason,
            "warnings": list(page.warnings),
        }
        if page.documents is not None:
            item["documents"] = [fields_object(f) for f in page.documents]
        if page.new is not None:
            item.update(
                new=list(page.new),
                changed=list(page.changed or ()),
                unchanged=list(page.unchanged or ()),
            )
        pages.append(item)
    body: dict[str, Any] = {"request": found.request, "pages": pages}
    if found.error is not None:
        body["error"] = found.error
    return body


# --- events ---------------------------------------------------------------------------

EVENT_ID_MAX_LENGTH = 256


async def events(request: web.Request) -> web.StreamResponse:
    """``GET /events``: connector and run changes as Server-Sent Events (the contract is in
    :mod:`syncd.service.events`). Ends when the daemon stops or the client leaves."""
    ids = _connector_ids(request)
    last = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    if last is not None and (len(last) > EVENT_ID_MAX_LENGTH or not last.isprintable()):
        last = "?"  # unknown: the stream starts with `reset`
    hub = request.app[SYSTEM].events
    async with hub.subscribe(ids, last) as chunks:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: pass each event on at once
            }
        )
        await response.prepare(request)
        try:
            async for chunk in chunks:
                await response.write(chunk)
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError too
            return response  # the client left
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
    return response


def _connector_ids(request: web.Request) -> frozenset[str] | None:
    """``?connector_id=`` values (repeated, or comma-separated), or ``None``: all."""
    values = request.query.getall("connector_id", [])
    if not values:
        return None
    ids = frozenset(part.strip() for value in values for part in value.split(",") if part.strip())
    if not ids or len(ids) > MAX_FILTER_IDS or any(text_problem(i) for i in ids):
        raise ValidationError(
            {"query.connector_id": f"Must name 1 to {MAX_FILTER_IDS} connector ids"}
        )
    return ids


# --- operations -----------------------------------------------------------------------


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: the process answers (no backend is consulted)."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: 200 when the store and the queue answer, else 503 naming the failure."""
    checks = await request.app[SYSTEM].readiness()
    ready = all(value == "ok" for value in checks.values())
    return web.json_response(checks, status=200 if ready else 503)


async def status(request: web.Request) -> web.Response:
    """``GET /status``: this instance, the queue, and the instances heard from lately."""
    return web.json_response(await request.app[SYSTEM].status())


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text exposition, or OpenMetrics when ``Accept`` asks."""
    body, content_type = request.app[SYSTEM].metrics.render(request.headers.get("Accept", ""))
    # Set as a raw header: aiohttp refuses a charset inside ``content_type=``.
    return web.Response(body=body, headers={"Content-Type": content_type, "Vary": "Accept"})


async def openapi(request: web.Request) -> web.Response:
    """``GET /openapi.json``."""
    return web.json_response(request.app[OPENAPI])


# --- the table ------------------------------------------------------------------------

_NOT_FOUND = Reply("Connector not found")
_CONNECTOR = Reply("The connector", "Connector")

ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/connectors",
        create_connector,
        "Create a connector",
        {201: Reply("Created", "Connector"), 409: Reply("Connector name already exists")},
        request="ConnectorCreate",
        links_id="/id",
    ),
    Route(
        "GET",
        "/connectors",
        list_connectors,
        "List connectors",
        {200: Reply("A page of connectors", "ConnectorList")},
        query=("connector_status", "limit", "cursor"),
        links_id="/data/0/id",
    ),
    Route(
        "GET",
        "/connectors/{id}",
        get_connector,
        "Get a connector with its progress and document counts",
        {200: _CONNECTOR, 404: _NOT_FOUND},
        links_id="/id",
    ),
    Route(
        "PATCH",
        "/connectors/{id}",
        update_connector,
        "Update a connector (status, name, schedule, source, indexer, paginator keys)",
        {
            200: _CONNECTOR,
            404: _NOT_FOUND,
            409: Reply("Connector is being deleted / Connector name already exists", "Conflict"),
        },
        request="ConnectorPatch",
        links_id="/id",
    ),
    Route(
        "DELETE",
        "/connectors/{id}",
        delete_connector,
        "Delete a connector with its documents and runs",
        {
            202: Reply("Deletion started", "Deleting"),
            404: _NOT_FOUND,
            409: Reply("Cannot delete connector while sync is running", "Conflict"),
        },
    ),
    Route(
        "POST",
        "/connectors/{id}/sync",
        trigger_sync,
        "Start a sync run; the body (optional) asks for a crawl mode: `incremental`, `full` "
        "or `backfill` of a window",
        {
            202: Reply(
                "Run started (sync_status running), or queued until a run slot frees "
                "(sync_status queued, run_id null)",
                "SyncStarted",
            ),
            404: _NOT_FOUND,
            409: Reply(
                "Connector is being deleted / Connector is paused / "
                "Sync already in progress (with the running run_id) / Sync already queued",
                "Conflict",
            ),
            422: Reply(
                "Invalid body: a mode the connector's source cannot crawl, a bound its format "
                "cannot read, `since` not before `until` (checked before the state)",
                "ValidationError",
            ),
        },
        request="SyncRequest",
        request_required=False,
        links_id="/connector_id",
    ),
    *STATE_ROUTES,
    Route(
        "POST",
        "/connectors/{id}/sync/abort",
        abort_sync,
        "Abort the running sync",
        {
            202: Reply(
                "Abort requested (run_id null: a queued trigger was dropped)", "AbortRequested"
            ),
            404: _NOT_FOUND,
            409: Reply("No sync in progress", "Conflict"),
        },
    ),
    Route(
        "GET",
        "/connectors/{id}/runs",
        list_runs,
        "List a connector's runs, newest first",
        {200: Reply("A page of runs", "RunList"), 404: _NOT_FOUND},
        query=("limit", "cursor"),
        tag="runs",
    ),
    Route(
        "GET",
        "/connectors/{id}/documents",
        list_documents,
        "List a connector's documents",
        {200: Reply("A page of documents", "DocumentList"), 404: _NOT_FOUND},
        query=("document_status", "limit", "cursor"),
        tag="documents",
        links={
            "get_document": {
                "id": "$request.path.id",
                "external_id": "$response.body#/data/0/external_id",
            }
        },
    ),
    Route(
        "GET",
        "/connectors/{id}/documents/{external_id:.+}",
        get_document,
        "Get a document with its payload",
        {
            200: Reply("The document", "DocumentWithPayload"),
            404: Reply("Connector not found / Document not found"),
        },
        tag="documents",
    ),
    Route(
        "POST",
        "/connectors/{id}/retry-failed",
        retry_failed,
        "Re-queue the connector's failed documents",
        {202: Reply("Documents re-queued", "Requeued"), 404: _NOT_FOUND},
        tag="documents",
    ),
    Route(
        "POST",
        "/connectors/{id}/deletions/apply",
        apply_deletions,
        "Apply the deletions the guard held after the last completed crawl",
        {
            202: Reply("Held documents deleted or queued for deletion", "DeletionsApplied"),
            404: _NOT_FOUND,
            409: Reply("No deletions held / Connector is being deleted", "Conflict"),
        },
        tag="documents",
    ),
    Route(
        "POST",
        "/connectors/preview",
        preview_connector,
        "Preview a connector body or an existing connector: fetch its first pages (at most 10, "
        "within 60 s) through its source, storing nothing",
        {
            200: Reply(
                "Per page: record count, external ids, rejected records, next cursor and, for "
                "an existing connector, the new, changed and unchanged ids; the first request "
                "with secrets masked. A failing source (or the time limit) is answered here "
                "too, with `error` and the pages fetched before it",
                "Preview",
            ),
            404: _NOT_FOUND,
        },
        request="PreviewRequest",
    ),
    Route(
        "GET",
        "/events",
        events,
        "Connector and run changes as they happen (Server-Sent Events: `connector`, `run`, "
        "`deleted`, `reset`; `Last-Event-ID` resumes; a snapshot first)",
        {200: Reply("An event stream", None, "text/event-stream")},
        query=("connector_id_filter", "last_event_id"),
        tag="events",
    ),
    Route(
        "GET",
        "/healthz",
        healthz,
        "Liveness: the process answers",
        {200: Reply("Alive", "Health")},
        auth=False,
        tag="system",
        backend=False,
    ),
    Route(
        "GET",
        "/readyz",
        readyz,
        "Readiness: the store and the queue answer",
        {200: Reply("Ready", "Readiness"), 503: Reply("Not ready", "Readiness")},
        tag="system",
    ),
    Route(
        "GET",
        "/status",
        status,
        "This instance (version, workers, running syncs), the queue's depth, and every "
        "instance that sent a heartbeat lately",
        {200: Reply("The status", "Status")},
        tag="system",
    ),
    Route(
        "GET",
        "/metrics",
        metrics,
        "Prometheus metrics",
        {200: Reply("Prometheus text exposition", None, "text/plain")},
        tag="system",
        backend=False,
    ),
    Route(
        "GET",
        "/openapi.json",
        openapi,
        "This document",
        {200: Reply("OpenAPI 3.1 document", "OpenAPI")},
        tag="system",
        backend=False,
    ),
)
