"""The config model of the ``pgvector`` indexer (DESIGN.md §7): the ``postgres`` indexer's,
plus the embeddings endpoint and how documents are cut into chunks."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from syncd.indexers.postgres.config import PostgresBatchSize, PostgresIndexerConfig
from syncd.schema.base import KindConfig
from syncd.schema.fields import HttpUrl, fail, int_between
from syncd.schema.secrets import SecretText

__all__ = [
    "CHUNK_SIZE_MAX",
    "EMBEDDINGS_BATCH_MAX",
    "PGVECTOR_DIMENSIONS_MAX",
    "EmbeddingsEndpoint",
    "PgvectorIndexerConfig",
]

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
    BeforeValidator(int_between(1, PGVECTOR_DIMENSIONS_MAX)),
]
EmbeddingsBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=EMBEDDINGS_BATCH_MAX),
    BeforeValidator(int_between(1, EMBEDDINGS_BATCH_MAX)),
]
ChunkSize = Annotated[
    int,
    Field(strict=True, ge=1, le=CHUNK_SIZE_MAX),
    BeforeValidator(int_between(1, CHUNK_SIZE_MAX)),
]
ChunkOverlap = Annotated[
    int,
    Field(strict=True, ge=0, le=CHUNK_SIZE_MAX - 1),
    BeforeValidator(int_between(0, CHUNK_SIZE_MAX - 1)),
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
