"""The model of a connector's ``document`` mapping (DESIGN.md §7): which record fields are a
document's ``title``, ``text``, ``url``, ``updated_at`` and ``metadata``. What the mapping
reads is :mod:`syncd.rules.shape`; this module checks it and describes it.

A field that takes several forms (a path, a list of paths, a template) is checked by one
validator that names the form it expected, then described by a hand-written JSON Schema:
a pydantic union would report one error per member it tried.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from syncd import paths
from syncd.rules.shape import template_problem
from syncd.schema.base import KindConfig
from syncd.schema.fields import (
    MSG_NOT_OBJECT,
    MSG_PATH,
    MSG_UNKNOWN,
    NO_NUL,
    PATH_PATTERN,
    fail,
    fail_at,
)

__all__ = ["METADATA_MAX", "TEXT_PATHS_MAX", "DocumentMapping"]

TEXT_PATHS_MAX = 20
"""Paths ``text`` may join."""
METADATA_MAX = 50
"""Names in ``metadata``."""
METADATA_NAME_MAX = 100
TEMPLATE_MAX = 2000

_PATH_SCHEMA = {"type": "string", "pattern": PATH_PATTERN}
# A template (syncd.rules.shape.parse_template): literal text with {{ and }} for braces, and
# at least one {path} placeholder, the path as PATH_PATTERN has it but without braces.
_PLACEHOLDER = (
    "\\{(?:[^./{}\\u0000][^.{}\\u0000]*(?:\\.[^.{}\\u0000]+)*|(?:/(?:[^~/{}\\u0000]|~[01])*)+)\\}"
)
_LITERAL = "(?:[^{}\\u0000]|\\{\\{|\\}\\})"
TEMPLATE_PATTERN = f"^{_LITERAL}*{_PLACEHOLDER}(?:{_LITERAL}|{_PLACEHOLDER})*$"
_TEMPLATE_SCHEMA = {
    "type": "object",
    "properties": {
        "template": {
            "type": "string",
            "minLength": 1,
            "maxLength": TEMPLATE_MAX,
            "pattern": TEMPLATE_PATTERN,
        }
    },
    "required": ["template"],
    "additionalProperties": False,
}
# "At least one of": what the mapping's validator checks, said to the JSON Schema.
_MAPS_A_FIELD = {
    "anyOf": [{"required": [name]} for name in ("title", "text", "url", "updated_at", "metadata")]
}
MSG_HTML_EXTRA = "html needs the html extra: pip install 'syncd[html]'"
MSG_ONE = 'Must be a path or {"template": "…"}'
MSG_TEXT = 'Must be a path, a list of paths or {"template": "…"}'


def _template(value: Mapping[str, Any]) -> dict[str, str]:
    problems: list[tuple[tuple[str | int, ...], str]] = [
        ((key,), MSG_UNKNOWN) for key in value if key != "template"
    ]
    template = value.get("template")
    if "template" not in value:
        problems.append((("template",), "Field required"))
    elif isinstance(template, str) and len(template) > TEMPLATE_MAX:
        problems.append((("template",), f"Must be at most {TEMPLATE_MAX} characters"))
    elif problem := template_problem(template):
        problems.append((("template",), problem))
    if problems:
        fail_at(problems, value)
    return {"template": str(template)}


def _one(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _template(value)
    if not isinstance(value, str):
        fail(MSG_ONE)
    if paths.path_problem(value):
        fail(MSG_PATH)
    return value


def _text(value: Any) -> Any:
    if not isinstance(value, list):
        return _one(value) if isinstance(value, str | Mapping) else fail(MSG_TEXT)
    if not value or len(value) > TEXT_PATHS_MAX:
        fail(f"Must list 1 to {TEXT_PATHS_MAX} paths")
    problems: list[tuple[tuple[str | int, ...], str]] = [
        ((i,), MSG_PATH) for i, path in enumerate(value) if paths.path_problem(path)
    ]
    if problems:
        fail_at(problems, value)
    return list(value)


def _path(value: Any) -> Any:
    if paths.path_problem(value):
        fail(MSG_PATH)
    return value


def _metadata(value: Any) -> Any:
    if not isinstance(value, Mapping):
        fail(MSG_NOT_OBJECT)
    if not value or len(value) > METADATA_MAX:
        fail(f"Must name 1 to {METADATA_MAX} fields")
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for name, path in value.items():
        if not name or len(name) > METADATA_NAME_MAX:
            problems.append(((name,), f"Names must be 1 to {METADATA_NAME_MAX} characters"))
        elif paths.path_problem(path):
            problems.append(((name,), MSG_PATH))
    if problems:
        fail_at(problems, value)
    return dict(value)


OnePath = Annotated[
    Any,
    BeforeValidator(_one),
    WithJsonSchema({"anyOf": [_PATH_SCHEMA, _TEMPLATE_SCHEMA]}),
]
TextPaths = Annotated[
    Any,
    BeforeValidator(_text),
    WithJsonSchema(
        {
            "anyOf": [
                _PATH_SCHEMA,
                {
                    "type": "array",
                    "items": _PATH_SCHEMA,
                    "minItems": 1,
                    "maxItems": TEXT_PATHS_MAX,
                },
                _TEMPLATE_SCHEMA,
            ]
        }
    ),
]
TimePath = Annotated[str | None, BeforeValidator(_path), WithJsonSchema(_PATH_SCHEMA)]
Metadata = Annotated[
    dict[str, str] | None,
    BeforeValidator(_metadata),
    WithJsonSchema(
        {
            "type": "object",
            "additionalProperties": _PATH_SCHEMA,
            "propertyNames": {"minLength": 1, "maxLength": METADATA_NAME_MAX, "pattern": NO_NUL},
            "minProperties": 1,
            "maxProperties": METADATA_MAX,
        }
    ),
]


class DocumentMapping(KindConfig, json_schema_extra=_MAPS_A_FIELD):
    """What a connector's records are as documents: every indexer receives this shape beside
    the payload (the `webhook` body's `document`; a plugin's `Document.fields`). Paths as
    everywhere (dotted or a JSON Pointer); a template is `{"template": "{key}: {fields.summary}"}`
    (`{{`/`}}` are literal braces; a missing path reads as empty). A field the record lacks is
    null; shaping never fails a document."""

    title: OnePath = Field(
        None,
        description="The title: a path, or a template.",
        examples=["fields.summary", {"template": "{key}: {fields.summary}"}],
    )
    text: TextPaths = Field(
        None,
        description="The body text: a path, a list of paths (the values present joined by a "
        "blank line), or a template. Lists of scalars read as one item per line; objects as "
        "their JSON text.",
        examples=[["title", "body"]],
    )
    url: OnePath = Field(
        None,
        description="The document's link: a path, or a template.",
        examples=["html_url", {"template": "https://example.atlassian.net/browse/{key}"}],
    )
    updated_at: TimePath = Field(
        None,
        description="A path to when the record last changed: an RFC 3339 / ISO 8601 time (no "
        "offset: UTC) or a Unix time in seconds; given as RFC 3339 UTC, null if unreadable.",
        examples=["updated_at"],
    )
    metadata: Metadata = Field(
        None,
        description="Names → paths: each value as JSON, as the record holds it (a name whose "
        "path is missing is left out).",
        examples=[{"author": "user.login", "labels": "labels"}],
    )
    text_format: Literal["plain", "html"] = Field(
        "plain",
        description="`html`: `text` is HTML, turned into plain text laid out as a browser "
        "shows it (blocks and list items on lines of their own).",
    )

    @model_validator(mode="after")
    def _names_a_field(self) -> DocumentMapping:
        if not self.model_fields_set - {"text_format"}:
            fail("Must map at least one of title, text, url, updated_at, metadata")
        if self.text_format == "html" and importlib.util.find_spec("inscriptis") is None:
            fail_at([(("text_format",), MSG_HTML_EXTRA)], self.text_format)
        return self
