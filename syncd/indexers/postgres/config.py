"""The config model of the ``postgres`` indexer (DESIGN.md §7): the database (a secret DSN),
the table and its schema, full-text search, whether to create the table, the batch size.
The ``pgvector`` indexer's model extends it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from syncd.indexers.postgres.table import MAX_IDENTIFIER_BYTES
from syncd.schema.base import KindConfig
from syncd.schema.fields import NO_NUL, Flag, fail, int_between, pattern_of, ref_pattern
from syncd.schema.patterns import compiled
from syncd.schema.secrets import secret_text, unmasked

__all__ = [
    "POSTGRES_BATCH_MAX",
    "PostgresBatchSize",
    "PostgresIndexerConfig",
]

#: Most documents one upsert statement of the ``postgres`` indexer carries.
POSTGRES_BATCH_MAX = 10_000
_MSG_IDENTIFIER = (
    f"Must be a PostgreSQL name: 1-{MAX_IDENTIFIER_BYTES} bytes of UTF-8 without NUL (used "
    "as written, quoted)"
)
TEXT_SEARCH_CONFIG_PATTERN = "^(?:[A-Za-z_][A-Za-z0-9_$]{0,62}\\.)?[A-Za-z_][A-Za-z0-9_$]{0,62}$"
_MSG_TEXT_SEARCH_CONFIG = (
    "Must be the name of a text search configuration (`simple`, `english`, `pg_catalog.german` "
    "…): letters, digits, `_` or `$`, optionally schema-qualified"
)
_MSG_DSN = "Must be a postgresql:// or postgres:// URL, or a ${env:NAME} / ${file:/path} reference"


def _identifier(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        fail(_MSG_IDENTIFIER)
    if "\x00" in value or len(value.encode("utf-8", "surrogatepass")) > MAX_IDENTIFIER_BYTES:
        fail(_MSG_IDENTIFIER)
    return value


def _text_search_config(value: Any) -> Any:
    if not isinstance(value, str) or not compiled(TEXT_SEARCH_CONFIG_PATTERN).fullmatch(value):
        fail(_MSG_TEXT_SEARCH_CONFIG)
    return value


def _dsn(value: Any) -> Any:
    value = secret_text(value)
    # Checked here when written out; a reference is checked once resolved, when connecting.
    if "${" not in value and not value.startswith(("postgresql://", "postgres://")):
        fail(_MSG_DSN)
    return value


Identifier = Annotated[
    str,
    BeforeValidator(_identifier),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": MAX_IDENTIFIER_BYTES, "pattern": NO_NUL}
    ),
]
TextSearchConfig = Annotated[
    str, BeforeValidator(_text_search_config), pattern_of(TEXT_SEARCH_CONFIG_PATTERN)
]
# What _dsn accepts: a URL of either scheme, or any text with a reference in it.
_DSN_FORMS = "^(?:postgresql://|postgres://|[\\s\\S]*\\$\\{)"
Dsn = Annotated[
    str,
    BeforeValidator(_dsn),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "allOf": [{"pattern": ref_pattern("\\r\\n")}, {"pattern": _DSN_FORMS}],
            **unmasked(),
        }
    ),
]
PostgresBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=POSTGRES_BATCH_MAX),
    BeforeValidator(int_between(1, POSTGRES_BATCH_MAX)),
]


class PostgresIndexerConfig(KindConfig):
    """Writes documents to a table in any PostgreSQL (its own `dsn`, not syncd's store,
    though it may be the same server): one row per document keyed by `(connector_id,
    external_id)`, with its shape (`title`, `text`, `url`, `updated_at`, `metadata`), its
    `payload` and `indexed_at`, and with `full_text` a generated `tsvector` column `search`
    under a GIN index, so `websearch_to_tsquery` works at once. A batch is one upsert (or one
    delete) statement with per-document results; a missing table is created, an existing one
    of the wrong shape is refused and never altered. Schema and queries: "The postgres indexer"
    in docs/connectors.md."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "postgres",
                    "dsn": "${env:SEARCH_DATABASE_URL}",
                    "table": "documents",
                    "text_search_config": "english",
                }
            ]
        }
    )

    type: Literal["postgres"]
    dsn: Dsn = Field(
        description="The database to write to, as a `postgresql://user:password@host:5432/db` "
        "URL (libpq's query parameters such as `sslmode` apply). A secret: best a `${env:NAME}` "
        "/ `${file:/path}` reference, resolved when connecting; answers show it as `***`.",
        examples=["${env:SEARCH_DATABASE_URL}"],
    )
    table: Identifier = Field(
        "syncd_documents",
        description="The table, taken as written (quoted: case and any character kept). "
        "Several connectors may share one: each writes and deletes only its own rows.",
        examples=["documents"],
    )
    schema_: Identifier = Field(
        "public",
        alias="schema",
        description="The table's schema (created with the table when missing).",
        examples=["search"],
    )
    full_text: Flag = Field(
        True,
        description="Give the table a generated `search tsvector` column (title weighted A, "
        "text B) with a GIN index. An existing table must match: a `search` column in another "
        "configuration is refused.",
    )
    text_search_config: TextSearchConfig = Field(
        "simple",
        description="The text search configuration of `search` (it must exist on the server). "
        "`simple` keeps every word as written, for any language; a language's own "
        "(`english`, `german` …) stems words and drops its stop words. Query with the same one.",
        examples=["english"],
    )
    create_table: Flag = Field(
        True,
        description="Create the schema, table and index when the table does not exist. False: "
        "a missing table fails the documents. An existing table is never changed.",
    )
    batch_size: PostgresBatchSize = Field(
        500,
        description="Documents per upsert or delete statement (at most the workers' "
        "`batch_size`). 1: one statement per document.",
        examples=[1000],
    )
