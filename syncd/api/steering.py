"""The crawl state of a connector (DESIGN.md §12): ``GET``, ``PUT`` and ``DELETE
/connectors/{id}/state`` — their handlers and their rows of the route table
(:data:`syncd.api.routes.ROUTES` holds them in its one table)."""

from __future__ import annotations

from aiohttp import web

from syncd.api import views
from syncd.api.openapi import Reply, Route
from syncd.api.params import connector_body, path_id, service_of

__all__ = ["STATE_ROUTES"]


async def get_state(request: web.Request) -> web.Response:
    """``GET /connectors/{id}/state``."""
    connector_id = path_id(request)
    state = await service_of(request).get_state(connector_id)
    return web.json_response(views.state_json(connector_id, state))


async def set_state(request: web.Request) -> web.Response:
    """``PUT /connectors/{id}/state``."""
    connector_id = path_id(request)
    body = await connector_body(request)
    state = await service_of(request).set_state(connector_id, body)
    return web.json_response(views.state_json(connector_id, state))


async def reset_state(request: web.Request) -> web.Response:
    """``DELETE /connectors/{id}/state``."""
    connector_id = path_id(request)
    state = await service_of(request).reset_state(connector_id)
    return web.json_response(views.state_json(connector_id, state))


_NOT_FOUND = Reply("Connector not found")
_CONFLICT = Reply("Sync already in progress / Connector is being deleted", "Conflict")

STATE_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/connectors/{id}/state",
        get_state,
        "The connector's crawl state: its mark, the crawl in progress, the next crawl",
        {200: Reply("The crawl state", "CrawlState"), 404: _NOT_FOUND},
    ),
    Route(
        "PUT",
        "/connectors/{id}/state",
        set_state,
        "Set the mark the next incremental crawl starts from (a crawl in progress is dropped)",
        {
            200: Reply("The new crawl state", "CrawlState"),
            404: _NOT_FOUND,
            409: _CONFLICT,
            422: Reply(
                "Invalid body, a mark the connector's format cannot read, or a connector "
                "without `incremental`",
                "ValidationError",
            ),
        },
        request="StateUpdate",
    ),
    Route(
        "DELETE",
        "/connectors/{id}/state",
        reset_state,
        "Reset the mark: the next crawl is a full one, which prunes and sets the mark",
        {
            200: Reply("The new crawl state", "CrawlState"),
            404: _NOT_FOUND,
            409: _CONFLICT,
            422: Reply("A connector without `incremental` has no mark", "ValidationError"),
        },
    ),
)
"""The routes of the crawl state, in the order the table lists them."""
