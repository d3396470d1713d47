"""Config models of the ``http`` source's five pagination styles (DESIGN.md §8): where each
sends its value (a query parameter, a path in the JSON body, a header), where the next one
comes from, and what ends a crawl. The defaults written here are the ones the runtime applies
(:mod:`syncd.sources.http.pagination`; a test holds them together)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, ModelWrapValidatorHandler, model_validator

from syncd.paths import path_problem
from syncd.schema.base import KindConfig, TypeTagged
from syncd.schema.fields import (
    HEADER_NAME_PATTERN,
    LIMIT_MAX,
    PATH_PATTERN,
    FieldPath,
    Flag,
    HeaderName,
    Limit,
    NonEmptyText,
    Start,
    StatusCode,
    absent,
    int_between,
    status_list,
    validated_with,
)
from syncd.schema.patterns import compiled

__all__ = [
    "PAGINATION_MODELS",
    "PARAM_DESCRIPTION",
    "CursorPagination",
    "LinkHeaderPagination",
    "NextUrlPagination",
    "OffsetPagination",
    "PagePagination",
    "Pagination",
    "ParamName",
]

PARAM_DESCRIPTION = "Query parameter name (with `in: body`, the path in the JSON body)"
_PLACED = (
    "Query parameter name (with `in: body`, the path in the JSON body; with `in: header`, the "
    "header name)"
)
_END_STATUS_MAX = 10


def _when(key: str, value: str, then: dict[str, Any], otherwise: Any = None) -> Any:
    """A JSON Schema rule: with ``key`` set to ``value``, ``then``'s properties hold (else
    ``otherwise``'s)."""
    rule: dict[str, Any] = {
        "if": {"properties": {key: {"const": value}}, "required": [key]},
        "then": {"properties": then},
    }
    if otherwise is not None:
        rule["else"] = {"properties": otherwise}
    return rule


def _placed_names(schema: dict[str, Any]) -> None:
    # What the validator below checks, for the JSON Schema: the cursor's name is a body path
    # with `in: body` and a header name with `in: header`; the next cursor's place is a
    # header name with `next_from: header` and a path otherwise.
    schema["allOf"] = [
        _when("in", "body", {"cursor_param": {"pattern": PATH_PATTERN}}),
        _when("in", "header", {"cursor_param": {"pattern": HEADER_NAME_PATTERN}}),
        _when(
            "next_from",
            "header",
            {"next_cursor": {"pattern": HEADER_NAME_PATTERN}},
            {"next_cursor": {"pattern": PATH_PATTERN}},
        ),
    ]


def _placed_problems(value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """The cursor style's names that do not fit where they go (strings only: the fields'
    own checks report the rest)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if not isinstance(value, Mapping):
        return problems
    header = compiled(HEADER_NAME_PATTERN)
    param, where = value.get("cursor_param"), value.get("in")
    if isinstance(param, str) and param:
        if where == "body" and (problem := path_problem(param)):
            problems.append((("cursor_param",), problem))
        elif where == "header" and not header.fullmatch(param):
            problems.append((("cursor_param",), "Invalid header name"))
    found = value.get("next_cursor")
    if isinstance(found, str) and found:
        if value.get("next_from") == "header":
            if not header.fullmatch(found):
                problems.append((("next_cursor",), "Invalid header name"))
        elif problem := path_problem(found):
            problems.append((("next_cursor",), problem))
    return problems


def _header_params(*keys: str) -> Callable[[dict[str, Any]], None]:
    """The JSON Schema side of :func:`_header_problems`: with `in: header`, ``keys`` are
    header names (paths too, as the fields say)."""

    def extra(schema: dict[str, Any]) -> None:
        pattern = {"pattern": HEADER_NAME_PATTERN}
        schema["allOf"] = [_when("in", "header", dict.fromkeys(keys, pattern))]

    return extra


def _header_problems(value: Any, keys: tuple[str, ...]) -> list[tuple[tuple[str | int, ...], str]]:
    """The parameter names among ``keys`` that cannot be headers, with `in: header`."""
    if not isinstance(value, Mapping) or value.get("in") != "header":
        return []
    header = compiled(HEADER_NAME_PATTERN)
    return [
        ((key,), "Invalid header name")
        for key in keys
        if isinstance(name := value.get(key), str) and name and not header.fullmatch(name)
    ]


def _shifts(default: bool) -> Any:
    """The ``shifts`` key of a style whose lists shift under deletions by ``default``."""
    return absent(
        description="Whether the pages of this list shift when a record before them is "
        "deleted, so that a crawl can miss a live record (a page-number or offset list does, "
        "a list continued after the last id read does not). True: unless the connector sets "
        "`prune_confirmations`, a document is deleted only once 2 complete full crawls in a "
        f"row missed it. Default: {'true' if default else 'false'} for this style.",
        examples=[not default],
    )


EndStatuses = Annotated[
    list[StatusCode], Field(min_length=1, max_length=_END_STATUS_MAX), BeforeValidator(status_list)
]


class _EndStatus(KindConfig):
    end_status: EndStatuses = absent(
        description="HTTP statuses that, answered for a page after the first, mean the crawl "
        "is complete (WordPress answers 400 for a page past the last one).",
        examples=[[400]],
    )


class _Ends(_EndStatus):
    more: FieldPath = absent(
        description="Path of a value that says whether more pages follow (`has_more`, "
        "`pageInfo.hasNextPage`): false ends the crawl, true needs a next page; a page "
        "without it fails.",
        examples=["has_more"],
    )
    done: FieldPath = absent(
        description="Path of a value that is true on the last page (`end_of_stream`, "
        "`done`): true ends the crawl whatever else the page holds; a page without it fails.",
        examples=["end_of_stream"],
    )


class CursorPagination(_Ends):
    """A token from the body, a header or the last record, sent back as a query parameter,
    in the JSON body or as a header. Without `more`/`done`, a missing, null or empty token
    in the body or a header ends; one from the last record ends only on an empty page (a last
    record without it fails the page)."""

    model_config = ConfigDict(json_schema_extra=_placed_names)

    type: Literal["cursor"] = Field("cursor", description="The default style.")
    cursor_param: NonEmptyText = Field(
        "cursor",
        description="Where the token goes: a query parameter name, the path in the JSON body "
        "(`in: body`), or a header name (`in: header`).",
        examples=["cursor", "variables.after"],
    )
    in_: Literal["query", "body", "header"] = Field(
        "query", alias="in", description="Where `cursor_param` is: `query`, `body` or `header`."
    )
    next_cursor: NonEmptyText = Field(
        "next_cursor",
        description="Where the next token is: a path in the response body, a path in the "
        "page's last record (`next_from: last_record`), or a header name "
        "(`next_from: header`).",
        examples=["meta.next_token", "pageInfo.endCursor", "id"],
    )
    next_from: Literal["body", "header", "last_record"] = Field(
        "body",
        description="What `next_cursor` reads: `body`, `header` or `last_record` (Stripe's "
        "`starting_after`, a search's `sort` values). Only an empty page, `more` or `done` "
        "ends a `last_record` crawl: a last record without `next_cursor` fails the page.",
    )
    shifts: Flag = _shifts(False)

    @model_validator(mode="wrap")
    @classmethod
    def _names(cls, value: Any, handler: ModelWrapValidatorHandler[CursorPagination]) -> Any:
        # Reported with the fields' own errors, all at once.
        return validated_with(value, handler, _placed_problems(value))


class NextUrlPagination(_Ends):
    """An absolute or relative URL of the next page in the body (followed on the same
    origin only)."""

    type: Literal["next_url"]
    next_url: FieldPath = Field(
        "next",
        description="Path of the next page's URL.",
        examples=["links.next", "/@odata.nextLink"],
    )
    shifts: Flag = _shifts(False)


class LinkHeaderPagination(_EndStatus):
    """RFC 8288 ``Link: <…>; rel="next"`` (followed on the same origin only)."""

    type: Literal["link_header"]
    shifts: Flag = _shifts(False)


ParamName = Annotated[FieldPath, Field(min_length=1)]
"""A parameter's name: a query parameter name, a path in the JSON body (``in: body``) or a
header name (``in: header``)."""

_IN = "Where the parameters go: `query`, `body` or `header`."
_OFFSET_PARAMS = ("offset_param", "limit_param")
_PAGE_PARAMS = ("page_param", "size_param")


Overlap = Annotated[
    int,
    Field(strict=True, ge=0, le=LIMIT_MAX - 1),
    BeforeValidator(int_between(0, LIMIT_MAX - 1)),
]


class OffsetPagination(_Ends):
    """``offset``/``limit`` parameters; the offset advances by the records received. With
    `total` (or `total_header`), `more` or `done` configured, those end the crawl; otherwise
    a short or empty page does. Each request after the first starts `overlap` records early
    and checks they are the ones read last, so that a list that moved back under the crawl
    (a record removed, or moved to the end) is read again rather than skipped
    (docs/syncs.md, "When the source changes during a crawl")."""

    model_config = ConfigDict(json_schema_extra=_header_params(*_OFFSET_PARAMS))

    type: Literal["offset"]
    offset_param: ParamName = Field("offset", description=f"{_PLACED} of the offset.")
    limit_param: ParamName = Field("limit", description=f"{_PLACED} of the page size.")
    limit: Limit = Field(100, description="Records asked per page.", examples=[100])
    in_: Literal["query", "body", "header"] = Field("query", alias="in", description=_IN)
    total: FieldPath = absent(
        description="Path of the total number of records in the response body (Jira's "
        "`total`): the crawl ends when the offset reaches it, whatever the page size.",
        examples=["total"],
    )
    total_header: HeaderName = absent(
        description="Header that holds the total number of records.", examples=["X-Total-Count"]
    )
    shifts: Flag = _shifts(True)
    overlap: Overlap = absent(
        description="Records each request after the first starts early: they must hold one "
        "of the ids read last (`id_field`), else the list moved back and is read again from "
        "further back. 0 turns the check off; at most `limit - 1` is used (each request brings "
        "a new record). Default: 3, at most a third of `limit`.",
        examples=[3, 0],
    )

    @model_validator(mode="wrap")
    @classmethod
    def _names(cls, value: Any, handler: ModelWrapValidatorHandler[OffsetPagination]) -> Any:
        return validated_with(value, handler, _header_problems(value, _OFFSET_PARAMS))


class PagePagination(_Ends):
    """A page-number parameter. An empty page ends; so do a short page (with `size`), the
    last page of `total_pages`, the records' `total`, `more` and `done`. With the records'
    total (`total` or `total_header`), a list that lost records under the crawl is read
    again from the page they moved back to rather than skipped
    (docs/syncs.md, "When the source changes during a crawl")."""

    model_config = ConfigDict(json_schema_extra=_header_params(*_PAGE_PARAMS))

    type: Literal["page"]
    page_param: ParamName = Field("page", description=f"{_PLACED} of the page number.")
    start: Start = Field(1, description="Number of the first page.", examples=[0, 1])
    in_: Literal["query", "body", "header"] = Field("query", alias="in", description=_IN)
    size: Limit = absent(
        description="Records asked per page, sent as `size_param`: a page with fewer ends "
        "the crawl.",
        examples=[100],
    )
    size_param: ParamName = Field(
        "per_page", description=f"{_PLACED} of the page size (sent with `size`)."
    )
    total_pages: FieldPath = absent(
        description="Path of the number of pages in the response body.", examples=["pages"]
    )
    total_pages_header: HeaderName = absent(
        description="Header that holds the number of pages.", examples=["X-WP-TotalPages"]
    )
    shifts: Flag = _shifts(True)
    total: FieldPath = absent(
        description="Path of the total number of records in the response body: the crawl "
        "ends when its pages reach it, and reads pages again when it falls (records removed "
        "moved the later ones back over the pages read).",
        examples=["meta.total"],
    )
    total_header: HeaderName = absent(
        description="Header that holds the total number of records (WordPress: "
        "`X-WP-Total`), used as `total` is.",
        examples=["X-WP-Total"],
    )

    @model_validator(mode="wrap")
    @classmethod
    def _names(cls, value: Any, handler: ModelWrapValidatorHandler[PagePagination]) -> Any:
        return validated_with(value, handler, _header_problems(value, _PAGE_PARAMS))


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
