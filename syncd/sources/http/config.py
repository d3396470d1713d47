"""Config models of the built-in source kind, the ``http`` source (DESIGN.md §8): its
requests, body, error conditions, incremental marks and timeouts. Its pagination styles are
in :mod:`~syncd.sources.http.pagination_config`, its auth in
:mod:`~syncd.sources.http.auth_config`.

Each model is the single description of its config: the request validation, the JSON Schema
of a connector file and the OpenAPI components come from it. Unknown keys are refused
(``extra="forbid"``). The defaults written here are the ones the runtime applies (see
:mod:`syncd.sources.http.pagination`; a test holds them together); a stored config keeps only
the keys its client sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic import ValidationError as PydanticError

from syncd.schema.base import KindConfig
from syncd.schema.fields import (
    MSG_NOT_OBJECT,
    NO_NUL,
    FieldPath,
    Headers,
    HttpUrl,
    MaxPages,
    Params,
    TimeoutSeconds,
    absent,
    fail,
    fail_at,
    field_errors,
    is_number,
    pattern_of,
    ref_pattern,
    ref_problem,
)
from syncd.sources.http.auth_config import AuthBridge
from syncd.sources.http.pagination_config import PARAM_DESCRIPTION, Pagination, ParamName

__all__ = [
    "MARK_FORMATS",
    "FailWhen",
    "HttpSourceConfig",
    "Incremental",
    "Timeout",
    "validate_http_source",
]


# --- the http source ---------------------------------------------------------------------

_FAIL_WHEN_MAX = 10
# A stored config is JSON written by orjson, whose integers are 64-bit: numbers in a body (and
# an `equals`) stay within that range, floats alike, so that the schema can say it.
_NUMBER_MAX = 2**63 - 1
_MSG_NUMBER = f"Must be a finite number between {-_NUMBER_MAX} and {_NUMBER_MAX}"
_NUMBER_SCHEMA: dict[str, Any] = {
    "type": "number",
    "minimum": -_NUMBER_MAX,
    "maximum": _NUMBER_MAX,
}
_BODY_DEPTH_MAX = 6


def _json_body(value: Any) -> Any:
    if not isinstance(value, Mapping):
        fail(MSG_NOT_OBJECT)
    problems: list[tuple[tuple[str | int, ...], str]] = []
    _check_json(value, (), problems)
    if problems:
        fail_at(problems[:20], value)
    return dict(value)


def _check_json(value: Any, at: tuple[str | int, ...], problems: list[Any]) -> None:
    # What a store keeps and a request sends: JSON without NUL, finite numbers, references
    # that can be resolved.
    if isinstance(value, Mapping | list) and len(at) >= _BODY_DEPTH_MAX:
        problems.append((at, f"Must nest at most {_BODY_DEPTH_MAX} levels"))
    elif isinstance(value, str):
        if "\x00" in value:
            problems.append((at, "Must not contain NUL"))
        elif problem := ref_problem(value):
            problems.append((at, problem))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not (math.isfinite(value) and -_NUMBER_MAX <= value <= _NUMBER_MAX):
            problems.append((at, _MSG_NUMBER))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_json(item, (*at, str(key)), problems)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, (*at, index), problems)
    elif not (value is None or isinstance(value, bool | int | float)):
        problems.append((at, "Must be a JSON value"))


def _json_schema(depth: int) -> dict[str, Any]:
    """The JSON Schema of a body value ``depth`` levels deep: what :func:`_check_json`
    accepts, written out level by level (a recursive ``$ref`` is more than some OpenAPI
    tools can read)."""
    scalars: list[dict[str, Any]] = [
        {"type": "string", "pattern": ref_pattern()},
        _NUMBER_SCHEMA,
        {"type": "boolean"},
        {"type": "null"},
    ]
    if depth >= _BODY_DEPTH_MAX:
        return {"anyOf": scalars}
    inner = _json_schema(depth + 1)
    return {
        "anyOf": [
            *scalars,
            {"type": "array", "items": inner},
            # Keys, like every string, hold no NUL (no store keeps one).
            {"type": "object", "additionalProperties": inner, "propertyNames": {"pattern": NO_NUL}},
        ]
    }


JsonBody = Annotated[
    dict[str, Any],
    BeforeValidator(_json_body),
    WithJsonSchema(
        {
            "type": "object",
            "additionalProperties": _json_schema(1),
            "propertyNames": {"pattern": NO_NUL},
        }
    ),
]
"""A request's JSON body: an object whose strings hold no NUL and only references that can be
resolved, nested at most :data:`_BODY_DEPTH_MAX` levels."""


def _scalar(value: Any) -> Any:
    problems: list[Any] = []
    if isinstance(value, Mapping | list):
        fail("Must be a string, number, boolean or null")
    _check_json(value, (), problems)
    if problems:
        fail(problems[0][1])
    return value


_SCALAR_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "pattern": ref_pattern()},
        _NUMBER_SCHEMA,
        {"type": "boolean"},
        {"type": "null"},
    ]
}


class FailWhen(KindConfig):
    """A condition on the response body that fails the page: the value at `path` equals
    `equals`, or, without `equals`, is present and not null, false or empty."""

    path: FieldPath = Field(description="Path in the response body.", examples=["ok", "errors"])
    equals: Annotated[Any, BeforeValidator(_scalar), WithJsonSchema(_SCALAR_SCHEMA)] = absent(
        description="The value that means an error: a string, number, boolean or null.",
        examples=[False],
    )
    message: FieldPath = absent(
        description="Path of the error's text, quoted in the run's error.",
        examples=["error", "errors.0.message"],
    )


FailWhenList = Annotated[list[FailWhen], Field(min_length=1, max_length=_FAIL_WHEN_MAX)]


MARK_FORMATS = ("as_stored", "iso8601", "unix", "unix_ms")
"""The named formats of an incremental mark (:mod:`syncd.sources.http.marks`); any other format is
a ``strftime`` pattern (it holds a ``%``)."""


def _mark_format(value: Any) -> Any:
    if not isinstance(value, str) or not (value in MARK_FORMATS or "%" in value) or "\x00" in value:
        fail(f"Must be one of {', '.join(MARK_FORMATS)}, or a strftime pattern (with %)")
    return value


def _template(value: Any) -> Any:
    if not isinstance(value, str) or "{since}" not in value or "\x00" in value:
        fail("Must be a text holding {since}")
    return value


def _window_template(value: Any) -> Any:
    if (
        not isinstance(value, str)
        or "{since}" not in value
        or "{until}" not in value
        or "\x00" in value
    ):
        fail("Must be a text holding {since} and {until}")
    return value


def _lag(value: Any) -> Any:
    if not is_number(value) or not 0 <= value <= LAG_MAX:
        fail(f"Must be a number of seconds between 0 and {LAG_MAX}")
    return value


LAG_MAX = 7 * 24 * 3600
_FORMAT_PATTERN = "^(?:" + "|".join(MARK_FORMATS) + "|[^\\u0000]*%[^\\u0000]*)$"
MarkFormat = Annotated[str, BeforeValidator(_mark_format), pattern_of(_FORMAT_PATTERN)]
_TEMPLATE_PATTERN = "^[^\\u0000]*\\{since\\}[^\\u0000]*$"
Template = Annotated[str, BeforeValidator(_template), pattern_of(_TEMPLATE_PATTERN)]
Lag = Annotated[float, Field(ge=0, le=LAG_MAX), BeforeValidator(_lag)]
_WINDOW_TEMPLATE_PATTERN = "^(?=[^\\u0000]*\\{since\\})(?=[^\\u0000]*\\{until\\})[^\\u0000]*$"
WindowTemplate = Annotated[
    str, BeforeValidator(_window_template), pattern_of(_WINDOW_TEMPLATE_PATTERN)
]


class Incremental(KindConfig):
    """Incremental crawls: the largest value of ``field`` seen by the last completed crawl —
    no later than that crawl's start when the values are times — is sent as ``param`` on the
    next one, moved back by ``lag``, written in ``format``, put in the query or the JSON body,
    alone or in a ``template``."""

    field: FieldPath = Field(description="Path in each record.", examples=["updated_at"])
    param: ParamName = Field(
        description=f"{PARAM_DESCRIPTION} to send it as.",
        examples=["since", "query.range.updated.gte"],
    )
    in_: Literal["query", "body"] = Field(
        "query", alias="in", description="Where `param` is: `query` or `body`."
    )
    template: Template = absent(
        description="The text sent, with `{since}` replaced by the mark (Jira: "
        '`project = APP AND updated >= "{since}" ORDER BY updated ASC`); the first crawl '
        "sends `params` as they are.",
        examples=['updated >= "{since}"'],
    )
    format: MarkFormat = absent(
        description="How the mark is sent: `as_stored` (the default), `iso8601` (UTC, `Z`), "
        "`unix` (seconds), `unix_ms`, or a strftime pattern (`%Y/%m/%d %H:%M`). Any but "
        "`as_stored` says the values are times (with `as_stored`, only ISO 8601 text is): the "
        "mark a crawl stores is then no later than its start.",
        examples=["iso8601", "%Y/%m/%d %H:%M"],
    )
    lag: Lag = absent(
        description="Seconds subtracted from the mark when it is sent (0 by default): what the "
        "source's clock may run behind syncd's, or how late the source shows a change after "
        "its time.",
        examples=[300],
    )
    until_param: ParamName = absent(
        description=f"{PARAM_DESCRIPTION} a backfill sends the end of its window as "
        "(`POST /connectors/{id}/sync` with `mode: backfill` and `until`), in `in` and "
        "`format` as `param`. Records at or after `until` are never made documents, whether "
        "or not the source is told.",
        examples=["until", "before"],
    )
    window_template: WindowTemplate = absent(
        description="The text a backfill with an `until` sends as `param` instead of "
        "`template`, with `{since}` and `{until}` replaced by the window's bounds (Jira: "
        '`updated >= "{since}" AND updated < "{until}" ORDER BY updated ASC`).',
        examples=['updated >= "{since}" AND updated < "{until}"'],
    )
    deleted_field: FieldPath = absent(
        description="Path of a record's tombstone flag: a record whose value there is "
        "anything but missing, null or false (true, a deletion time…) deletes the document "
        "of its id instead of being one.",
        examples=["deleted_at"],
    )


class Timeout(KindConfig):
    """This connector's HTTP timeouts in seconds (the daemon's ``[http]`` ones otherwise)."""

    read: TimeoutSeconds = absent(description="Seconds to wait for a response.")
    connect: TimeoutSeconds = absent(description="Seconds to wait for a connection.")


class HttpSourceConfig(KindConfig):
    """The built-in ``http`` source: a JSON API crawled page by page (DESIGN.md §8)."""

    model_config = ConfigDict(
        title="HttpSourceConfig",
        json_schema_extra={
            "examples": [
                {
                    "type": "http",
                    "url": "https://api.example.com/tickets",
                    "headers": {"Authorization": "Bearer ${env:TICKETS_TOKEN}"},
                    "records": "data",
                    "pagination": {"type": "cursor", "next_cursor": "meta.next"},
                }
            ]
        },
    )

    type: Literal["http"] = Field("http", description="The source kind (`http` when omitted).")
    url: HttpUrl = Field(
        description="The first page's URL: http or https, with a host; port 1-65535.",
        examples=["https://api.example.com/tickets"],
    )
    params: Params | None = Field(
        None,
        description="Query parameters sent with every page (strings may hold "
        "`${env:NAME}` / `${file:/path}`, resolved per request).",
        examples=[{"limit": 100, "api_key": "${env:API_KEY}"}],
    )
    headers: Headers | None = Field(
        None,
        description="Request headers; values are secrets (shown as `***`) and may hold "
        "`${env:NAME}` / `${file:/path}`, resolved per request.",
        examples=[{"Authorization": "Bearer ${env:TICKETS_TOKEN}"}],
    )
    method: Literal["GET", "POST"] = Field(
        "GET",
        description="The request method. A POST is a read here (a search, a GraphQL query): "
        "retried like a GET.",
    )
    body: JsonBody | None = Field(
        None,
        description="A JSON object sent with every page request (`method: POST` for most "
        "APIs); strings may hold `${env:NAME}` / `${file:/path}`, shown as `***`, as are "
        "values under keys named like secrets. Pagination and incremental values with "
        "`in: body` are placed in it.",
        examples=[{"query": "query($after: String) { … }", "variables": {"first": 100}}],
    )
    fail_when: FailWhenList = absent(
        description="Conditions on the response body that fail the page although the status "
        "is 2xx (Slack: `ok` is false; GraphQL: `errors` is present).",
        examples=[[{"path": "ok", "equals": False, "message": "error"}]],
    )
    records: FieldPath = absent(
        description="Path of the record array in the response body (the body itself when omitted).",
        examples=["data"],
    )
    id_field: FieldPath = absent(
        description="Path of each record's id (`id` when omitted).", examples=["id"]
    )
    pagination: Pagination | None = Field(
        None, description="How to reach the next page (`cursor` with its defaults when omitted)."
    )
    incremental: Incremental | None = None
    timeout: Timeout | None = None
    max_pages: MaxPages = absent(description="Stop a crawl after this many pages.")
    # The slot of the source authentication (DESIGN.md §8). Its styles get their models as
    # another tagged union, replacing this bridge to the hand-written check:
    #     auth: Annotated[BearerAuth | BasicAuth | ApiKeyAuth | OAuth2Auth,
    #                     TypeTagged("auth")] | None = None
    auth: AuthBridge | None = Field(
        None,
        description="Source authentication, by `type`: `bearer`, `basic`, `api_key` or "
        "`oauth2` (DESIGN.md §8); every value may hold `${env:}` / `${file:}`. Answers show its "
        "shape (`type`, `in`, `name`, `grant`, `token_url`, `scopes`, `audience`, `client_auth`, "
        "the names in `extra`) and `***` for every other value and every reference.",
        examples=[{"type": "bearer", "token": "${env:TICKETS_TOKEN}"}],
    )


def validate_http_source(config: Any) -> dict[str, str]:
    """Field errors of an ``http`` source config, keyed ``source.<path>`` (``{}`` if valid):
    the checks of its model, :class:`HttpSourceConfig`."""
    try:
        HttpSourceConfig.model_validate(config)
    except PydanticError as exc:
        return field_errors(exc, "source")
    return {}
