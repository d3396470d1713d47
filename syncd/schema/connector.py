"""The connector body models, built per registry of kinds, and their JSON Schema.

``ConnectorCreate`` / ``ConnectorPatch`` hold the connector fields; their ``source`` and
``indexer`` are tagged unions over the kinds a registry knows, each kind described by its
``config_model``. A kind without one (a plain plugin factory) accepts any object with its
``type``: its factory checks the config when it is built. The models are built once per set
of (kind name, config model) and cached.

The JSON Schema (2020-12) says what the server accepts, with gaps it cannot express, where
the server alone decides: cron expressions and time zone names, URL ports and host names
(IDNA), the length of a name once its surrounding ASCII blanks are stripped (the pattern
knows the blanks but cannot count what is left), and, in configs without a model (plugins),
the rules every value obeys (no NUL or lone surrogate in any string or key, 64-bit integers,
nesting of at most 32 levels). Every string the models describe refuses NUL.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema
from pydantic_core import core_schema

from syncd.models import DEFAULT_PAGINATOR
from syncd.schema.base import type_of
from syncd.schema.document import DocumentMapping
from syncd.schema.fields import (
    NO_NUL,
    CronExpression,
    Flag,
    HashFields,
    Name,
    PageRetries,
    PruneConfirmations,
    RunRetries,
    Seconds,
    StatusCodes,
    TimeZoneName,
    absent,
    fail,
    tagged_union,
)

DEFAULT_SOURCE_TYPE = "http"
DEFAULT_INDEXER: Mapping[str, Any] = {"type": "store"}
PATCHABLE_STATUSES = ("active", "paused")
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class Kind(Protocol):
    """What the models need of a kind (:class:`syncd.plugins.SourceKind` / ``IndexerKind``)."""

    @property
    def config_model(self) -> type[BaseModel] | None: ...


class Kinds(Protocol):
    """The source and indexer kinds a body may name (:class:`syncd.plugins.Registry`)."""

    @property
    def source_names(self) -> frozenset[str]: ...

    @property
    def indexer_names(self) -> frozenset[str]: ...

    def find_source(self, name: str) -> Kind | None: ...

    def find_indexer(self, name: str) -> Kind | None: ...


# --- the fields common to every registry -------------------------------------------------


def _status(value: Any) -> Any:
    if not isinstance(value, str) or value not in PATCHABLE_STATUSES:
        fail(f"Must be one of: {', '.join(PATCHABLE_STATUSES)}")
    return value


def _fraction(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        fail("Must be a number between 0 and 1")
    return value


Fraction = Annotated[float, Field(ge=0, le=1), BeforeValidator(_fraction)]

_SCHEDULE = "A 5-field cron expression (UTC unless `sync_timezone`); null: manual syncs only."
_TIMEZONE = "IANA time zone of `sync_schedule` (null: UTC)."
_DAEMON_DEFAULT = "Default: the daemon's `[sync]` setting (built-in default shown)."


class _ConnectorFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name = Field(
        description="Unique name, 1-200 characters once surrounding blanks are stripped.",
        examples=["tickets"],
    )
    source: Any = None  # replaced per registry (keeps the field order)
    indexer: Any = None
    sync_schedule: CronExpression = Field(None, description=_SCHEDULE, examples=["*/15 * * * *"])
    sync_timezone: TimeZoneName = Field(None, description=_TIMEZONE, examples=["Europe/Paris"])
    page_retries: PageRetries = Field(
        DEFAULT_PAGINATOR.page_retries,
        description=f"Retries of a failing page (0-20), waits doubling. {_DAEMON_DEFAULT}",
    )
    page_retry_backoff: Seconds = Field(
        DEFAULT_PAGINATOR.page_retry_backoff,
        description=f"Seconds before the first retry of a page (0-3600). {_DAEMON_DEFAULT}",
    )
    throttle_seconds: Seconds = Field(
        DEFAULT_PAGINATOR.throttle_seconds,
        description=f"Seconds between two pages (0-3600). {_DAEMON_DEFAULT}",
    )
    retry_on_status: StatusCodes = Field(
        list(DEFAULT_PAGINATOR.retry_on_status),
        description=f"HTTP statuses (400-599) that retry a page. {_DAEMON_DEFAULT}",
        examples=[[429, 502, 503, 504]],
    )
    retry_attempts: RunRetries = Field(
        3,
        description="Automatic retries of a failed run (0-20; an abort is never retried): "
        "each resumes from the run's checkpoint, after `retry_backoff` seconds, doubling "
        "(at most an hour). The connector reads `error` meanwhile, with `failures` and "
        "`retry_at`; a successful run makes it `active`. 0: a failed run waits for its "
        "schedule or a person.",
    )
    retry_backoff: Seconds = Field(
        30.0,
        description="Seconds before the first automatic retry of a failed run (0-3600).",
    )
    prune: Flag = Field(
        True,
        description="Delete the documents a completed full crawl did not see (gone at the "
        "source), through the indexer. False: documents are never deleted.",
    )
    prune_max_fraction: Fraction = Field(
        0.5,
        description="The guard: a completed crawl that would delete more than this share "
        "(0-1) of the live documents, and more than 10, deletes nothing and holds them "
        "(`deletions_held`) until `POST /connectors/{id}/deletions/apply`.",
    )
    prune_confirmations: PruneConfirmations | None = Field(
        None,
        description="How many complete full crawls in a row must miss a document before it "
        "is deleted (1-100): 1 deletes what the first complete crawl did not see; more "
        "wait, since a list whose pages shift when a record is deleted (`offset`, `page`) "
        "can make a crawl miss a live record. Documents missed but not yet confirmed gone "
        "show in the connector's `documents_awaiting_confirmation`; one seen again starts "
        "over. Null: 2 for the `offset` and `page` pagination styles and a pagination with "
        "`shifts: true`, 1 otherwise (keyset styles, `shifts: false`, plugin sources).",
        examples=[2],
    )
    full_crawl_schedule: CronExpression = Field(
        None,
        description="For an incremental source: a 5-field cron expression whose runs crawl in "
        "full (the incremental mark not sent) and delete what they did not see. Null: never.",
        examples=["0 3 * * 0"],
    )
    hash_fields: HashFields = Field(
        None,
        description="Paths (dotted or JSON Pointer) of the record fields the content hash "
        "covers, so that a change elsewhere (a view count, a fetch time) does not re-index a "
        "document; a path missing from a record is left out (a null is not). The stored "
        "payload is still the whole record, as of its last re-index. Null: the whole record. "
        "Changing it re-indexes, once, the documents whose hash it changes.",
        examples=[["title", "body", "author.name", "/fields/x.y"]],
    )
    document: DocumentMapping | None = Field(
        None,
        description="The document shape: which record fields are the `title`, `text`, `url`, "
        "`updated_at` and `metadata` every indexer receives beside the payload. Null: "
        "none (indexers get the payload alone). It does not change the content hash: "
        "changing it re-shapes documents as they are next indexed.",
        examples=[{"title": "title", "text": "body", "url": "html_url"}],
    )


def _without_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def _without_defaults(schema: dict[str, Any]) -> None:
    # In a PATCH an absent field is left unchanged: no default describes that.
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)


class _PatchFields(_ConnectorFields):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_without_defaults)

    name: Name = absent(description="A new unique name.")
    status: Annotated[Literal["active", "paused"], BeforeValidator(_status)] = absent(
        description="Pause or resume the connector."
    )


# --- per registry ------------------------------------------------------------------------

_Key = tuple[tuple[str, type[BaseModel] | None], ...]


@dataclass(frozen=True)
class ConnectorModels:
    """The body models of one set of kinds."""

    create: type[BaseModel]
    patch: type[BaseModel]


def connector_models(kinds: Kinds) -> ConnectorModels:
    """The ``ConnectorCreate`` / ``ConnectorPatch`` models of ``kinds`` (cached)."""
    sources = _key(kinds.source_names, kinds.find_source)
    indexers = _key(kinds.indexer_names, kinds.find_indexer)
    return _build(sources, indexers)


def _key(names: frozenset[str], find: Any) -> _Key:
    return tuple((name, getattr(find(name), "config_model", None)) for name in sorted(names))


@functools.lru_cache(maxsize=32)
def _build(sources: _Key, indexers: _Key) -> ConnectorModels:
    source = _union(sources, "source", DEFAULT_SOURCE_TYPE)
    indexer = _union(indexers, "indexer", None)
    source_field = Field(
        description="What to crawl: a source config, by `type` (`http` if omitted)."
    )
    create = create_model(
        "ConnectorCreate",
        __base__=_ConnectorFields,
        __doc__="A connector file / the body of `POST /connectors`.",
        source=(source, source_field),
        indexer=(
            indexer,
            Field(
                dict(DEFAULT_INDEXER),
                description="Where documents go, by `type` (`store` if omitted).",
                # Said in words only: an object default of a union of models is what
                # client generators refuse (openapi-python-client drops the whole body).
                json_schema_extra=_without_default,
            ),
        ),
    )
    patch = create_model(
        "ConnectorPatch",
        __base__=_PatchFields,
        __doc__="The body of `PATCH /connectors/{id}`: the fields to change (`source` and "
        "`indexer` are replaced as a whole).",
        source=(source, Field(None, description="A new source config (replaces it).")),
        indexer=(indexer, Field(None, description="A new indexer config (replaces it).")),
    )
    return ConnectorModels(create, patch)


def _union(kinds: _Key, what: str, default: str | None) -> Any:
    members: dict[str, type[BaseModel]] = {}
    passthrough: list[str] = []
    for name, model in kinds:
        if model is None:
            passthrough.append(name)
        members[name] = _member(name, model, what, optional=name == default)
    return tagged_union(members, what=what, default=default, passthrough=passthrough)


def _member(
    name: str, model: type[BaseModel] | None, what: str, *, optional: bool
) -> type[BaseModel]:
    """The union member of kind ``name``: its model with ``type`` declared, or, for a kind
    without one, a model of any object with that ``type``."""
    if model is not None and type_of(model) == name:
        return model
    tag: Any = Literal[name]
    type_field = (tag, Field(name if optional else ..., description=f"The {what} kind."))
    if model is not None:  # a plugin's model without its own ``type``
        return create_model(model.__name__, __base__=model, type=type_field)
    title = re.sub(r"[^0-9A-Za-z]+", " ", name).title().replace(" ", "")
    return create_model(
        f"{title}{what.title()}Config",
        __config__=ConfigDict(extra="allow"),
        __doc__=f"The config of the {name!r} {what} kind (a plugin: any keys).",
        type=type_field,
    )


# --- JSON Schema -------------------------------------------------------------------------


class _Generator(GenerateJsonSchema):
    """Pydantic's generator, made exact where its output would be looser than the models:
    strings refuse NUL, a dict's key pattern constrains every key, and a ``None`` default of
    a field that is not nullable (it only marks the field optional) is not shown."""

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        """See :class:`_Generator`."""
        out = super().str_schema(schema)
        out.setdefault("pattern", NO_NUL)
        return out

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        """See :class:`_Generator`."""
        out = super().dict_schema(schema)
        patterns = out.pop("patternProperties", None)
        if patterns:
            [(pattern, values)] = patterns.items()
            out["propertyNames"] = {"pattern": pattern}
            out["additionalProperties"] = values
        return out

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        """See :class:`_Generator`."""
        out = super().default_schema(schema)
        if "default" in out and out["default"] is None and not _nullable(out):
            del out["default"]
        return out


def _nullable(schema: JsonSchemaValue) -> bool:
    return schema.get("type") == "null" or any(
        s.get("type") == "null" for s in schema.get("anyOf", [])
    )


def connector_file_schema(kinds: Kinds) -> dict[str, Any]:
    """The JSON Schema (2020-12, ``$defs`` inside) of a connector file, i.e. the body of
    ``POST /connectors``, for the kinds of ``kinds``."""
    schema = connector_models(kinds).create.model_json_schema(schema_generator=_Generator)
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def model_json_schemas(
    kinds: Kinds, *, ref_template: str = "#/components/schemas/{model}"
) -> dict[str, dict[str, Any]]:
    """The named schemas of the connector bodies, for OpenAPI ``components.schemas``:
    ``ConnectorCreate``, ``ConnectorPatch``, each config model (``HttpSourceConfig``, the
    pagination styles, ``WebhookIndexerConfig``, plugins'…), referencing each other through
    ``ref_template``."""
    models = connector_models(kinds)
    _, top = models_json_schema(
        [(models.create, "validation"), (models.patch, "validation")],
        ref_template=ref_template,
        schema_generator=_Generator,
    )
    defs: dict[str, dict[str, Any]] = top.get("$defs", {})
    return defs
