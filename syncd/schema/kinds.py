"""Config models of the built-in kinds: the ``http`` source and its five pagination styles,
the ``store`` and ``webhook`` indexers (DESIGN.md §7, §8).

Each model is the single description of its config: the request validation, the JSON Schema
of a connector file and the OpenAPI components come from it. Unknown keys are refused
(``extra="forbid"``). The defaults written here are the ones the runtime applies (see
:mod:`syncd.sources.pagination`; a test holds them together); a stored config keeps only the
keys its client sent.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    WithJsonSchema,
)
from pydantic_core import CoreSchema

from syncd.schema.fields import (
    HEADER_NAME_PATTERN,
    MSG_UNKNOWN,
    NO_NUL,
    DottedPath,
    Headers,
    HttpUrl,
    Limit,
    MaxPages,
    NonEmptyText,
    Params,
    Start,
    TimeoutSeconds,
    _int_between,
    absent,
    fail_at,
    ref_pattern,
    tagged_union,
)
from syncd.schema.patterns import URL_PATTERN

__all__ = [
    "WEBHOOK_BATCH_MAX",
    "CursorPagination",
    "HttpSourceConfig",
    "Incremental",
    "LinkHeaderPagination",
    "NextUrlPagination",
    "OffsetPagination",
    "PagePagination",
    "StoreIndexerConfig",
    "Timeout",
    "TypeTagged",
    "WebhookIndexerConfig",
    "type_of",
]


class KindConfig(BaseModel):
    """Base of the built-in configs: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


def type_of(model: type[BaseModel]) -> str | None:
    """The ``type`` a config model declares (``type: Literal["name"]``), or ``None``."""
    field = model.model_fields.get("type")
    values = get_args(field.annotation) if field is not None else ()
    return values[0] if len(values) == 1 and isinstance(values[0], str) else None


@dataclass(frozen=True)
class TypeTagged:
    """Marks a union of config models as told apart by their ``type`` key:
    ``Annotated[A | B, TypeTagged("pagination", default="cursor")]``. See
    :func:`~syncd.schema.fields.tagged_union` for the errors it gives."""

    what: str
    default: str | None = None
    passthrough: Collection[str] = ()
    unknown: str = MSG_UNKNOWN

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """The schema of the tagged union of ``source``'s members."""
        members: dict[str, Any] = {}
        for model in get_args(source) or (source,):
            name = type_of(model)
            if name is None:
                raise TypeError(f"{model.__name__} declares no type: Literal[...]")
            members[name] = model
        union = tagged_union(
            members,
            what=self.what,
            default=self.default,
            passthrough=self.passthrough,
            unknown=self.unknown,
        )
        return handler.generate_schema(union)


# --- pagination --------------------------------------------------------------------------

_PARAM = "Query parameter name"


class CursorPagination(KindConfig):
    """A token in the body, sent back as a query parameter; null, missing or empty ends."""

    type: Literal["cursor"] = Field("cursor", description="The default style.")
    cursor_param: NonEmptyText = Field(
        "cursor", description=f"{_PARAM} that carries the token.", examples=["cursor"]
    )
    next_cursor: DottedPath = Field(
        "next_cursor",
        description="Dotted path of the next token in the response body.",
        examples=["meta.next_token"],
    )


class NextUrlPagination(KindConfig):
    """An absolute or relative URL of the next page in the body (followed on the same
    origin only)."""

    type: Literal["next_url"]
    next_url: DottedPath = Field(
        "next", description="Dotted path of the next page's URL.", examples=["links.next"]
    )


class LinkHeaderPagination(KindConfig):
    """RFC 8288 ``Link: <…>; rel="next"`` (followed on the same origin only)."""

    type: Literal["link_header"]


class OffsetPagination(KindConfig):
    """``offset``/``limit`` query parameters; a short or empty page ends."""

    type: Literal["offset"]
    offset_param: NonEmptyText = Field("offset", description=f"{_PARAM} of the offset.")
    limit_param: NonEmptyText = Field("limit", description=f"{_PARAM} of the page size.")
    limit: Limit = Field(100, description="Records asked per page.", examples=[100])


class PagePagination(KindConfig):
    """A page-number query parameter; an empty page ends."""

    type: Literal["page"]
    page_param: NonEmptyText = Field("page", description=f"{_PARAM} of the page number.")
    start: Start = Field(1, description="Number of the first page.", examples=[0, 1])


Pagination = Annotated[
    CursorPagination | NextUrlPagination | LinkHeaderPagination | OffsetPagination | PagePagination,
    TypeTagged("pagination", default="cursor", unknown="Unknown field for pagination type {type}"),
]
"""The five pagination styles of the ``http`` source, by ``type`` (``cursor`` if omitted)."""

PAGINATION_MODELS: tuple[type[KindConfig], ...] = (
    CursorPagination,
    NextUrlPagination,
    LinkHeaderPagination,
    OffsetPagination,
    PagePagination,
)


# --- the http source ---------------------------------------------------------------------


class Incremental(KindConfig):
    """Incremental crawls: the largest value of ``field`` seen by the last completed crawl is
    sent as the query parameter ``param`` on the next one."""

    field: DottedPath = Field(description="Dotted path in each record.", examples=["updated_at"])
    param: NonEmptyText = Field(description=f"{_PARAM} to send it as.", examples=["since"])
    deleted_field: DottedPath = absent(
        description="Dotted path of a record's tombstone flag: a record whose value there is "
        "anything but missing, null or false (true, a deletion time…) deletes the document "
        "of its id instead of being one.",
        examples=["deleted_at"],
    )


class Timeout(KindConfig):
    """This connector's HTTP timeouts in seconds (the daemon's ``[http]`` ones otherwise)."""

    read: TimeoutSeconds = absent(description="Seconds to wait for a response.")
    connect: TimeoutSeconds = absent(description="Seconds to wait for a connection.")


def _auth(value: Any) -> Any:
    # Imported here: the auth module pulls in the transport, which validation does not need.
    from syncd.sources.authcheck import AUTH_TYPES, validate_auth

    if isinstance(value, Mapping) and not isinstance(value.get("type"), str | None):
        # validate_auth looks an object or array `type` up in a dict: a TypeError (500).
        fail_at([(("type",), f"Must be one of {', '.join(AUTH_TYPES)}")], value)
    if errors := validate_auth(value):
        fail_at([(tuple(path.split(".")[2:]), message) for path, message in errors.items()], value)
    return value


def _auth_schema() -> dict[str, Any]:
    """The JSON Schema of what :func:`syncd.sources.authcheck.validate_auth` accepts (held
    together by tests/api/test_fuzz.py)."""
    # Not the mask: sent back as an answer showed it, it would replace the secret.
    unmasked = {"not": {"const": "***"}}
    text = {"type": "string", "minLength": 1, "pattern": ref_pattern("\\r\\n"), **unmasked}

    def style(name: str, required: dict[str, Any], **optional: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "title": f"{name.title().replace('_', '')}Auth",
            "properties": {"type": {"const": name}, **required, **optional},
            "required": ["type", *required],
            "additionalProperties": False,
        }

    reserved = ["grant_type", "refresh_token", "scope", "audience", "client_id", "client_secret"]
    oauth2 = style(
        "oauth2",
        {
            "grant": {"enum": ["client_credentials", "refresh_token"]},
            # A reference is resolved per request, so only checked then.
            "token_url": {**text, "anyOf": [{"pattern": "\\$\\{"}, {"pattern": URL_PATTERN}]},
            "client_id": text,
            "client_secret": text,
        },
        refresh_token=text,
        audience=text,
        client_auth={"enum": ["basic", "post"]},
        scopes={
            "type": ["array", "null"],
            "items": {"type": "string", "pattern": "^[^ \\u0000]+$", **unmasked},
        },
        extra={
            "type": ["object", "null"],
            "propertyNames": {"minLength": 1, "pattern": NO_NUL, "not": {"enum": reserved}},
            "additionalProperties": text,
        },
    )
    oauth2["oneOf"] = [
        {
            "properties": {"grant": {"const": "client_credentials"}},
            "not": {"required": ["refresh_token"]},
        },
        {"properties": {"grant": {"const": "refresh_token"}}, "required": ["refresh_token"]},
    ]
    api_key = style("api_key", {"in": {"enum": ["header", "query"]}, "name": text, "value": text})
    api_key["oneOf"] = [
        {
            "properties": {
                "in": {"const": "header"},
                "name": {"type": "string", "pattern": HEADER_NAME_PATTERN},
            }
        },
        {
            "properties": {
                "in": {"const": "query"},
                # A name, not a reference.
                "name": {"type": "string", "pattern": "^([^$\\r\\n\\u0000]|\\$(?!\\{))+$"},
            }
        },
    ]
    return {
        "description": "Source authentication, by `type` (DESIGN.md §8).",
        "oneOf": [
            style("bearer", {"token": text}),
            style(
                "basic",
                {
                    "username": {
                        "type": "string",
                        "pattern": "^[^:\\r\\n\\u0000]+$",
                        **unmasked,
                    },
                    "password": text,
                },
            ),
            api_key,
            oauth2,
        ],
    }


AuthBridge = Annotated[dict[str, Any], BeforeValidator(_auth), WithJsonSchema(_auth_schema())]
"""``source.auth`` until its styles have models: checked by
:func:`syncd.sources.authcheck.validate_auth`, described by :func:`_auth_schema`."""


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
    records: DottedPath = absent(
        description="Dotted path of the record array in the response body (the body itself "
        "when omitted).",
        examples=["data"],
    )
    id_field: DottedPath = absent(
        description="Dotted path of each record's id (`id` when omitted).", examples=["id"]
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


# --- indexers ----------------------------------------------------------------------------


class StoreIndexerConfig(KindConfig):
    """The default indexer: the store keeps each payload, served by the API. No options."""

    type: Literal["store"]


#: Most documents one webhook POST carries.
WEBHOOK_BATCH_MAX = 1000

WebhookBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=WEBHOOK_BATCH_MAX),
    BeforeValidator(_int_between(1, WEBHOOK_BATCH_MAX)),
]


class WebhookIndexerConfig(KindConfig):
    """POSTs each document (``{"op", "connector_id", "external_id", "content_hash",
    "payload"}``) to ``url``, or with ``batch_size`` > 1 up to that many in one POST
    (``{"op", "documents": [...]}``); a 2xx answer means indexed."""

    type: Literal["webhook"]
    url: HttpUrl = Field(
        description="Where to POST: http or https, with a host; port 1-65535.",
        examples=["https://search.example.com/hooks/tickets"],
    )
    headers: Headers | None = Field(
        None,
        description="Request headers; values are secrets and may hold `${env:NAME}` / "
        "`${file:/path}`, resolved per request.",
        examples=[{"X-Hook-Key": "${file:/run/secrets/hook_key}"}],
    )
    batch_size: WebhookBatchSize = Field(
        1,
        description="Documents per POST. 1: one document per POST, its object as the body. "
        'More: `{"op", "documents": [...]}` with up to this many (at most the workers\' '
        "`batch_size`); the answer may give per-document results.",
        examples=[100],
    )
