"""Request parsing shared by the API handlers: path ids, JSON bodies, list parameters.

Every check answers a client's mistake with a :class:`~syncd.errors.ValidationError` naming
the part of the request (``body``, ``query.limit``, ``query.cursor``) or a 404, never a 500.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, TypeVar

from aiohttp import web

from syncd.errors import NotFound, ValidationError
from syncd.schema.fields import MSG_NOT_OBJECT
from syncd.schema.spec import text_problem
from syncd.service.cursors import parse_cursor
from syncd.service.operations import ConnectorService

SERVICE: web.AppKey[ConnectorService] = web.AppKey("syncd.service")

LIMIT_DEFAULT = 100
LIMIT_MAX = 1000
_LIMIT_DIGITS = 10  # more is out of range anyway, and int() refuses over 4300 digits

_E = TypeVar("_E", bound=StrEnum)
_T = TypeVar("_T")


def service_of(request: web.Request) -> ConnectorService:
    return request.app[SERVICE]


def path_id(request: web.Request) -> str:
    connector_id = request.match_info["id"]
    if text_problem(connector_id):
        # No connector has such an id, and PostgreSQL refuses to even compare it.
        raise NotFound()
    return connector_id


async def json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; 422 when it is not JSON or not an object.

    Reading past the application's ``client_max_size`` raises 413 (aiohttp).
    """
    raw = await request.read()
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
        # Lone surrogates (``"\ud800"``) are valid JSON escapes but not text: refuse them
        # here rather than fail when the store encodes the string.
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, NaN/Infinity
        raise ValidationError({"body": f"Invalid JSON: {exc}"}) from None
    except RecursionError:
        raise ValidationError({"body": "Invalid JSON: nested too deeply"}) from None
    if not isinstance(body, dict):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    return body


async def optional_json_object(request: web.Request) -> dict[str, Any] | None:
    """The body as a JSON object, or ``None`` when the request has no body (empty, or only
    blanks); 422 as :func:`json_object` otherwise, after 404 for an unknown connector."""
    if not (await request.read()).strip():
        return None
    try:
        return await json_object(request)
    except ValidationError as exc:
        await service_of(request).reject(path_id(request), exc)


async def connector_body(request: web.Request) -> dict[str, Any]:
    """:func:`json_object` of a request about the path's connector: 404 for an unknown
    connector comes before the 422."""
    try:
        return await json_object(request)
    except ValidationError as exc:
        await service_of(request).reject(path_id(request), exc)


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; Python's parser accepts them unless told not to.
    raise ValueError(f"{name} is not valid JSON")


def limit_param(request: web.Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return LIMIT_DEFAULT
    digits = raw.isascii() and raw.isdigit() and len(raw) <= _LIMIT_DIGITS
    if not digits or not 1 <= int(raw) <= LIMIT_MAX:
        raise ValidationError({"query.limit": f"Must be an integer between 1 and {LIMIT_MAX}"})
    return int(raw)


def status_param(request: web.Request, enum: type[_E]) -> _E | None:
    raw = request.query.get("status")
    if raw is None:
        return None
    try:
        return enum(raw)
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise ValidationError({"query.status": f"Must be one of: {allowed}"}) from None


def cursor_param(request: web.Request) -> str | None:
    """The ``cursor`` query parameter (:func:`syncd.service.cursors.parse_cursor`)."""
    raw = request.query.get("cursor")
    if raw is None:
        return None
    try:
        return parse_cursor(raw)
    except ValidationError as exc:
        raise _in_query(exc) from None


async def connector_query(request: web.Request, parse: Callable[[], _T]) -> _T:
    """The query parameters ``parse`` reads from a request about the path's connector; when
    they are invalid, the service answers (404 for an unknown connector, before the 422)."""
    try:
        return parse()
    except ValidationError as exc:
        await service_of(request).reject(path_id(request), exc)


async def listing(call: Awaitable[_T]) -> _T:
    """Await a list operation; a validation error it raises (a cursor the daemon cannot
    decode) concerns the query string."""
    try:
        return await call
    except ValidationError as exc:
        raise _in_query(exc) from None


def _in_query(exc: ValidationError) -> ValidationError:
    """``exc`` with its fields named as query parameters (``cursor`` → ``query.cursor``)."""
    return ValidationError(
        {k if k.startswith("query.") else f"query.{k}": v for k, v in exc.errors.items()}
    )
