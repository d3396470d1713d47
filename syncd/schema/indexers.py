"""Config models of the built-in indexers: ``store``, ``webhook``, ``opensearch``,
``postgres`` and ``pgvector`` (DESIGN.md §7).

Like :mod:`syncd.schema.kinds` (the ``http`` source's models, and :class:`KindConfig` that
these derive from), each model is the single description of its config: the request
validation, the JSON Schema of a connector file and the OpenAPI components come from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    WithJsonSchema,
    model_validator,
)

from syncd.schema.base import KindConfig, TypeTagged
from syncd.schema.fields import (
    MSG_NON_EMPTY,
    NO_NUL,
    Headers,
    HttpUrl,
    _int_between,
    _pattern,
    absent,
    fail,
    ref_pattern,
    ref_problem,
    validated_with,
)
from syncd.schema.patterns import compiled

__all__ = [
    "OPENSEARCH_BATCH_MAX",
    "POSTGRES_BATCH_MAX",
    "WEBHOOK_BATCH_MAX",
    "EmbeddingsEndpoint",
    "OpenSearchApiKeyAuth",
    "OpenSearchBasicAuth",
    "OpenSearchBearerAuth",
    "OpenSearchIndexerConfig",
    "PgvectorIndexerConfig",
    "PostgresIndexerConfig",
    "StoreIndexerConfig",
    "WebhookIndexerConfig",
]


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


# --- the opensearch indexer ---------------------------------------------------------------

#: Most documents one ``_bulk`` request of the ``opensearch`` indexer carries.
OPENSEARCH_BATCH_MAX = 10_000
#: Index names the ``opensearch`` indexer writes to: the names both engines accept, in ASCII
#: (so that 255 characters are 255 bytes), not hidden (no leading ``.``).
INDEX_NAME_PATTERN = "^[a-z0-9][a-z0-9._-]{0,254}$"
_MSG_INDEX = (
    "Must be an index name: 1-255 lowercase letters, digits, '.', '_' or '-', starting with "
    "a letter or a digit"
)
_MASKED = 'Still masked ("***"): write the secret or a ${env:NAME} / ${file:/path} reference'
# A reference, as check_refs accepts it (for the JSON Schema of an identity without ':').
_REF_TEXT = "\\$\\{(env|file):[^}\\u0000\\r\\n]*[^}\\s\\u0000\\r\\n][^}\\u0000\\r\\n]*\\}"
_NOT_A_REF = "\\$(?!\\{[A-Za-z_]+:[^}]*\\})"
_REFS = compiled("\\$\\{(?:env|file):[^}]*\\}")


def _index_name(value: Any) -> Any:
    if not isinstance(value, str) or not compiled(INDEX_NAME_PATTERN).fullmatch(value):
        fail(_MSG_INDEX)
    return value


def _secret_text(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        fail(MSG_NON_EMPTY)
    if value == "***":
        fail(_MASKED)
    if "\x00" in value:
        fail("Must not contain NUL")
    if problem := ref_problem(value):
        fail(problem)
    if "\n" in value or "\r" in value:
        fail("Must not contain line breaks")
    return value


def _identity(value: Any) -> Any:
    value = _secret_text(value)
    # What Basic (and ApiKey's id:key) join with ':' must not hold one itself; references are
    # checked once resolved.
    if ":" in _REFS.sub("", value):
        fail("Must not contain ':'")
    return value


_UNMASKED = {"not": {"const": "***"}}
SecretText = Annotated[
    str,
    BeforeValidator(_secret_text),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "pattern": ref_pattern("\\r\\n"), **_UNMASKED}
    ),
]
"""A secret: one line of text, not the mask, ``${env:}``/``${file:}`` references allowed."""
Identity = Annotated[
    str,
    BeforeValidator(_identity),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "pattern": f"^([^$:\\u0000\\r\\n]|{_NOT_A_REF}|{_REF_TEXT})*$",
            **_UNMASKED,
        }
    ),
]
"""A :data:`SecretText` without ``:`` outside its references (a username, an API key id)."""
IndexName = Annotated[str, BeforeValidator(_index_name), _pattern(INDEX_NAME_PATTERN)]
OpenSearchBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=OPENSEARCH_BATCH_MAX),
    BeforeValidator(_int_between(1, OPENSEARCH_BATCH_MAX)),
]


def _flag(value: Any) -> Any:
    if not isinstance(value, bool):
        fail("Must be true or false")
    return value


Flag = Annotated[bool, Field(strict=True), BeforeValidator(_flag)]


class OpenSearchBasicAuth(KindConfig):
    """``Authorization: Basic base64(username:password)`` (a native or file realm user)."""

    type: Literal["basic"]
    username: Identity = Field(description="The user (no `:`).", examples=["syncd"])
    password: SecretText = Field(
        description="The password.", examples=["${file:/run/secrets/opensearch_password}"]
    )


_API_KEY_FORMS = "Give either `encoded`, or `id` and `api_key`"


def _api_key_problems(value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    if not isinstance(value, Mapping):
        return []
    has = {key for key in ("encoded", "id", "api_key") if key in value}
    if "encoded" in has and has & {"id", "api_key"}:
        return [(("encoded",), f"{_API_KEY_FORMS}, not both")]
    if not has:
        return [(("encoded",), _API_KEY_FORMS)]
    if has == {"id"}:
        return [(("api_key",), "Field required with `id`")]
    if has == {"api_key"}:
        return [(("id",), "Field required with `api_key`")]
    return []


class OpenSearchApiKeyAuth(KindConfig):
    """``Authorization: ApiKey <encoded>`` (Elasticsearch: OpenSearch has no API keys): the
    ``encoded`` value of the create API key answer as it is, or ``base64(id:api_key)`` made
    from its ``id`` and ``api_key``."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["encoded"],
                    "not": {"anyOf": [{"required": ["id"]}, {"required": ["api_key"]}]},
                },
                {"required": ["id", "api_key"], "not": {"required": ["encoded"]}},
            ]
        }
    )

    type: Literal["api_key"]
    encoded: SecretText = absent(
        description="The encoded key, sent as it is (the `encoded` of the create API key answer).",
        examples=["${env:ES_API_KEY}"],
    )
    id: Identity = absent(description="The key's id (with `api_key`).")
    api_key: SecretText = absent(description="The key itself (with `id`).")

    @model_validator(mode="wrap")
    @classmethod
    def _forms(cls, value: Any, handler: ModelWrapValidatorHandler[OpenSearchApiKeyAuth]) -> Any:
        return validated_with(value, handler, _api_key_problems(value))


class OpenSearchBearerAuth(KindConfig):
    """``Authorization: Bearer <token>`` (a token service or OIDC/JWT realm token)."""

    type: Literal["bearer"]
    token: SecretText = Field(description="The token.", examples=["${env:ES_TOKEN}"])


OpenSearchAuth = Annotated[
    OpenSearchBasicAuth | OpenSearchApiKeyAuth | OpenSearchBearerAuth,
    TypeTagged("auth", unknown="Unknown field for auth type {type}"),
]


def _auth_unmasked(value: Any) -> Any:
    # Answers show the whole auth as "***": sent back as it was shown, it is refused by name.
    if value == "***":
        fail(_MASKED)
    return value


class OpenSearchIndexerConfig(KindConfig):
    """Writes documents to an OpenSearch 2 or Elasticsearch 8 index through `POST /_bulk`:
    `_id` `<connector_id>:<external_id>` (a SHA-256 of the external id past 512 bytes), the
    source `connector_id`, `external_id`, `content_hash`, `title`, `text`, `url`, `updated_at`,
    `metadata`, `payload` (stored, not indexed) and `indexed_at`; per-document results;
    deletions. Mapping, results and retries: "The opensearch indexer" in docs/connectors.md."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "opensearch",
                    "url": "https://search.example.com:9200",
                    "index": "syncd-docs",
                    "auth": {
                        "type": "basic",
                        "username": "syncd",
                        "password": "${env:OPENSEARCH_PASSWORD}",
                    },
                }
            ]
        }
    )

    type: Literal["opensearch"]
    url: HttpUrl = Field(
        description="The cluster's URL (a path prefix is kept; query and fragment are not): "
        "http or https, with a host; port 1-65535.",
        examples=["https://search.example.com:9200"],
    )
    index: IndexName = Field(
        description="The index (or an alias with a write index) written to; several "
        "connectors may share one. 1-255 lowercase letters, digits, `.`, `_`, `-`, starting "
        "with a letter or digit.",
        examples=["syncd-docs"],
    )
    auth: Annotated[OpenSearchAuth | None, BeforeValidator(_auth_unmasked)] = Field(
        None,
        description="Authentication, by `type`: `basic`, `api_key` or `bearer`; every value "
        "may hold `${env:}` / `${file:}`, resolved per request. Answers show it as `***`.",
        examples=[{"type": "api_key", "encoded": "${env:ES_API_KEY}"}],
    )
    create_index: Flag = Field(
        True,
        description="Create the index with syncd's mapping when it does not exist. False: a "
        "missing index fails the documents. An existing index is never changed.",
    )
    batch_size: OpenSearchBatchSize = Field(
        100,
        description="Documents per `_bulk` request (at most the workers' `batch_size`). 1: "
        "one request per document.",
        examples=[500],
    )


# --- the postgres indexer -----------------------------------------------------------------

#: Most documents one upsert statement of the ``postgres`` indexer carries.
POSTGRES_BATCH_MAX = 10_000
#: PostgreSQL keeps this many bytes of a name (NAMEDATALEN - 1) and cuts longer ones.
IDENTIFIER_MAX_BYTES = 63
_MSG_IDENTIFIER = (
    f"Must be a PostgreSQL name: 1-{IDENTIFIER_MAX_BYTES} bytes of UTF-8 without NUL (used "
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
    if "\x00" in value or len(value.encode("utf-8", "surrogatepass")) > IDENTIFIER_MAX_BYTES:
        fail(_MSG_IDENTIFIER)
    return value


def _text_search_config(value: Any) -> Any:
    if not isinstance(value, str) or not compiled(TEXT_SEARCH_CONFIG_PATTERN).fullmatch(value):
        fail(_MSG_TEXT_SEARCH_CONFIG)
    return value


def _dsn(value: Any) -> Any:
    value = _secret_text(value)
    # Checked here when written out; a reference is checked once resolved, when connecting.
    if "${" not in value and not value.startswith(("postgresql://", "postgres://")):
        fail(_MSG_DSN)
    return value


Identifier = Annotated[
    str,
    BeforeValidator(_identifier),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": IDENTIFIER_MAX_BYTES, "pattern": NO_NUL}
    ),
]
TextSearchConfig = Annotated[
    str, BeforeValidator(_text_search_config), _pattern(TEXT_SEARCH_CONFIG_PATTERN)
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
            **_UNMASKED,
        }
    ),
]
PostgresBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=POSTGRES_BATCH_MAX),
    BeforeValidator(_int_between(1, POSTGRES_BATCH_MAX)),
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


# --- the pgvector indexer -----------------------------------------------------------------

#: The most dimensions pgvector's HNSW index takes for a ``vector`` column.
PGVECTOR_DIMENSIONS_MAX = 2000
#: Inputs per embeddings request (the OpenAI contract's limit).
EMBEDDINGS_BATCH_MAX = 2048
#: The longest chunk, in characters or tokens.
CHUNK_SIZE_MAX = 100_000
_MSG_MODEL = "Must be a model name: 1-256 characters without NUL or a line break"

Dimensions = Annotated[
    int,
    Field(strict=True, ge=1, le=PGVECTOR_DIMENSIONS_MAX),
    BeforeValidator(_int_between(1, PGVECTOR_DIMENSIONS_MAX)),
]
EmbeddingsBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=EMBEDDINGS_BATCH_MAX),
    BeforeValidator(_int_between(1, EMBEDDINGS_BATCH_MAX)),
]
ChunkSize = Annotated[
    int,
    Field(strict=True, ge=1, le=CHUNK_SIZE_MAX),
    BeforeValidator(_int_between(1, CHUNK_SIZE_MAX)),
]
ChunkOverlap = Annotated[
    int,
    Field(strict=True, ge=0, le=CHUNK_SIZE_MAX - 1),
    BeforeValidator(_int_between(0, CHUNK_SIZE_MAX - 1)),
]


def _model_name(value: Any) -> Any:
    # Exactly what the JSON Schema below says (no test of blanks: the schema's pattern
    # dialect and Python disagree on which characters are blank).
    if not isinstance(value, str) or not value or len(value) > 256:
        fail(_MSG_MODEL)
    if any(c in value for c in "\x00\r\n"):
        fail(_MSG_MODEL)
    return value


ModelName = Annotated[
    str,
    BeforeValidator(_model_name),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[^\\u0000\\r\\n]*$"}
    ),
]


class EmbeddingsEndpoint(KindConfig):
    """An OpenAI-compatible embeddings endpoint (`POST …/embeddings`): OpenAI, Azure OpenAI,
    Ollama, vLLM, text-embeddings-inference, LiteLLM. Requests go through the daemon's HTTP
    transport: `[http.hosts."HOST"]` budgets, `Retry-After`, retries of 502/503/504."""

    url: HttpUrl = Field(
        description="The API base, as OpenAI's clients take it: requests go to "
        "`{url}/embeddings` (a URL already ending in `/embeddings` is used as it is, its "
        "query kept).",
        examples=["https://api.openai.com/v1", "http://localhost:11434/v1"],
    )
    model: ModelName = Field(
        description="The embedding model, sent as `model`.",
        examples=["text-embedding-3-small", "nomic-embed-text"],
    )
    dimensions: Dimensions = Field(
        description="The vector length: sent as `dimensions`, checked on every answer, and "
        "the `N` of the chunks table's `vector(N)` (1-2000, pgvector's HNSW limit). An "
        "existing chunks table of another `N` is refused.",
        examples=[1536],
    )
    api_key: SecretText | None = Field(
        None,
        description="Sent as `Authorization: Bearer <api_key>`; none when absent. A secret: "
        "best a `${env:NAME}` / `${file:/path}` reference, resolved per request; answers "
        "show it as `***`.",
        examples=["${env:OPENAI_API_KEY}"],
    )
    batch_size: EmbeddingsBatchSize = Field(
        64,
        description="Inputs (chunks) per embeddings request; the chunks of a call's "
        "documents are sent together, in requests of at most this many.",
        examples=[128],
    )


class PgvectorIndexerConfig(PostgresIndexerConfig):
    """Writes documents to a table in PostgreSQL with pgvector, as the `postgres` indexer
    does, plus their chunks: each document's `text` is split (by characters or tokens),
    each chunk embedded through an OpenAI-compatible endpoint and stored in
    `<table>_chunks` as `vector(dimensions)` under an HNSW index for cosine distance. A
    changed document's chunks are replaced in the transaction that writes its row; a
    document whose content hash and text are already in the table is not embedded again;
    a deleted one loses its row and chunks. Tables are created when missing and refused,
    never altered, when of the wrong shape (a different vector dimension included). Schema
    and a similarity query: "The pgvector indexer" in docs/connectors.md."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "pgvector",
                    "dsn": "${env:VECTOR_DATABASE_URL}",
                    "table": "documents",
                    "embeddings": {
                        "url": "https://api.openai.com/v1",
                        "model": "text-embedding-3-small",
                        "dimensions": 1536,
                        "api_key": "${env:OPENAI_API_KEY}",
                    },
                    "chunk_size": 400,
                    "chunk_overlap": 40,
                    "chunk_unit": "tokens",
                }
            ]
        }
    )

    type: Literal["pgvector"]  # type: ignore[assignment]
    embeddings: EmbeddingsEndpoint = Field(
        description="Where the vectors come from.",
    )
    chunk_size: ChunkSize = Field(
        1000,
        description="The longest chunk, in `chunk_unit`s. The splitter cuts at the largest "
        "unit that fits (paragraph, sentence, word) and fills chunks up to this size.",
        examples=[400],
    )
    chunk_overlap: ChunkOverlap = Field(
        100,
        description="The most text two neighbouring chunks share, in `chunk_unit`s (0: none). "
        "At most `chunk_size` - 1 is used: a larger value (say the default 100 with a "
        "`chunk_size` of 50) is taken as that, as a JSON Schema cannot compare two keys.",
        examples=[40],
    )
    chunk_unit: Literal["characters", "tokens"] = Field(
        "characters",
        description="What sizes count: Unicode `characters`, or `tokens` of an OpenAI "
        "tokenizer (tiktoken's tables ship with syncd: nothing is downloaded).",
    )
    tokenizer: ModelName | None = Field(
        None,
        description="With `chunk_unit: tokens`, the OpenAI model whose tokenizer counts "
        "(cl100k_base for `text-embedding-3-*`, o200k_base for `gpt-4o`). Default: "
        "`embeddings.model` when it is an OpenAI model, else `text-embedding-3-small`.",
        examples=["text-embedding-3-small"],
    )
    batch_size: PostgresBatchSize = Field(
        100,
        description="Documents per call (at most the workers' `batch_size`): their chunks "
        "are embedded together and written in one transaction. 1: one call per document.",
        examples=[50],
    )
