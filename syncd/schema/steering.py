"""The bodies that steer a crawl (DESIGN.md §12): ``POST /connectors/{id}/sync``'s optional
``{"mode", "since", "until"}`` and ``PUT /connectors/{id}/state``'s ``{"mark"}``.

Pure: no I/O. Each model is the single description of its body (the OpenAPI components come
from it); the parse functions add the checks across fields and answer every bad field at once
in a :class:`~syncd.errors.ValidationError`. What depends on the connector (does its source
have ``incremental``, can its ``format`` read a value, is ``since`` before ``until``) is the
service's, once the connector is known.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic import ValidationError as PydanticError

from syncd.errors import ValidationError
from syncd.models import CrawlMode, CrawlWindow
from syncd.rules.steering import Steer
from syncd.schema.fields import MSG_NOT_OBJECT, NO_NUL, fail, field_errors, is_number

__all__ = [
    "MARK_TEXT_MAX",
    "StateUpdate",
    "SyncRequest",
    "parse_state_update",
    "parse_sync_request",
]

MARK_TEXT_MAX = 1000
"""Characters of a mark or a window bound given as text."""
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
MSG_ONLY_BACKFILL = "Only with mode backfill"
MSG_SINCE_REQUIRED = "Required with mode backfill"


def _mark(value: Any) -> Any:
    if isinstance(value, str):
        if not 1 <= len(value) <= MARK_TEXT_MAX or "\x00" in value:
            fail(f"Must be a string of 1 to {MARK_TEXT_MAX} characters, without NUL")
        return value
    if not is_number(value):
        fail("Must be a string or a number")
    # Compared before any float(): a 400-digit integer does not fit a float.
    if not _INT_MIN <= value <= _INT_MAX or not math.isfinite(value):
        fail(f"Must be a number between {_INT_MIN} and {_INT_MAX}")
    return value


MARK_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "string", "minLength": 1, "maxLength": MARK_TEXT_MAX, "pattern": NO_NUL},
        {"type": "number", "minimum": -(2**63), "maximum": 2**63 - 1},
    ],
    "description": "A value of the source's incremental field, as its records hold it (text "
    "or a number); with a time `format`, ISO 8601 text or Unix seconds or milliseconds.",
}

Mark = Annotated[
    str | int | float,
    BeforeValidator(_mark),
    WithJsonSchema(
        {
            **MARK_SCHEMA,
        }
    ),
]
"""A value of a source's incremental field: a mark, a backfill's bound."""


class SyncRequest(BaseModel):
    """``POST /connectors/{id}/sync``'s optional body: the crawl's mode, and a backfill's
    window ``[since, until)``. No body (or no ``mode``) is the trigger of before: the crawl
    in progress resumes, else an incremental crawl (full when due) starts."""

    model_config = ConfigDict(
        extra="forbid",
        title="SyncRequest",
        # The checks across fields, as the schema states them: `since` (required) and
        # `until` go with `backfill` only. (if/then/else rather than a union of objects: a
        # client generator makes one model of it.)
        json_schema_extra={
            "if": {"required": ["mode"], "properties": {"mode": {"const": "backfill"}}},
            "then": {"required": ["since"], "properties": {"since": MARK_SCHEMA}},
            "else": {"properties": {"since": {"type": "null"}, "until": {"type": "null"}}},
        },
    )

    mode: Literal["incremental", "full", "backfill"] | None = Field(
        None,
        description="`incremental` (the changes since the mark), `full` (everything, "
        "ignoring the mark; prunes what it did not see and sets the mark), or `backfill` "
        "(the window `[since, until)` only: never prunes, never moves the mark). A mode "
        "other than the crawl in progress's drops that crawl.",
    )
    since: Mark | None = Field(
        None, description="With `backfill` (required): the window's start, included."
    )
    until: Mark | None = Field(
        None, description="With `backfill`: the window's end, excluded (none: open-ended)."
    )


class StateUpdate(BaseModel):
    """``PUT /connectors/{id}/state``'s body: the mark the next incremental crawl starts
    from."""

    model_config = ConfigDict(extra="forbid", title="StateUpdate")

    mark: Mark = Field(
        description="The new mark, as the records hold the incremental field (what `GET` "
        "shows); `lag` is still applied when it is sent."
    )


def parse_sync_request(body: Any) -> Steer | None:
    """The mode a sync body asks for (``None``: no body, or no ``mode``); ``ValidationError``
    naming every bad field."""
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    try:
        request = SyncRequest.model_validate(dict(body))
    except PydanticError as exc:
        raise ValidationError(field_errors(exc)) from None
    errors: dict[str, str] = {}
    if request.mode != CrawlMode.BACKFILL.value:
        for name in ("since", "until"):
            if getattr(request, name) is not None:
                errors[name] = MSG_ONLY_BACKFILL
    elif request.since is None:
        errors["since"] = MSG_SINCE_REQUIRED
    if errors:
        raise ValidationError(errors)
    if request.mode is None:
        return None
    mode = CrawlMode(request.mode)
    window = CrawlWindow(request.since, request.until) if mode is CrawlMode.BACKFILL else None
    return Steer(mode, window)


def parse_state_update(body: Any) -> Any:
    """The mark a ``PUT /connectors/{id}/state`` body sets; ``ValidationError`` otherwise."""
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    try:
        return StateUpdate.model_validate(dict(body)).mark
    except PydanticError as exc:
        raise ValidationError(field_errors(exc)) from None
