"""The chunks table of the ``pgvector`` indexer: its documented schema, the SQL that creates
it, checks its shape and replaces a batch's chunks. No I/O: :mod:`syncd.indexers.pgvector`
runs what this module writes. The documents table beside it is the ``postgres`` indexer's
(:mod:`syncd.indexers.postgres.table`).

The table, named after the documents table (``<table>_chunks``), for ``dimensions: 1536``::

    CREATE TABLE IF NOT EXISTS "public"."syncd_documents_chunks" (
        connector_id text NOT NULL,
        external_id  text NOT NULL,
        chunk_index  integer NOT NULL,
        text         text NOT NULL,
        embedding    vector(1536) NOT NULL,
        PRIMARY KEY (connector_id, external_id, chunk_index),
        FOREIGN KEY (connector_id, external_id)
            REFERENCES "public"."syncd_documents" (connector_id, external_id) ON DELETE CASCADE
    );
    CREATE INDEX IF NOT EXISTS "syncd_documents_chunks_embedding"
        ON "public"."syncd_documents_chunks" USING hnsw (embedding vector_cosine_ops);

``chunk_index`` counts a document's chunks from 0, in text order. The foreign key ties the
chunks to their document: a document row deleted by anyone takes its chunks with it. The
HNSW index serves the cosine distance ``<=>`` (pgvector indexes ``vector`` columns of at most
2000 dimensions, hence that limit on ``dimensions``).

An existing chunks table is never altered: :func:`chunk_shape_problems` says what keeps it
from taking the rows (a different vector dimension, above all), and the indexer refuses it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from syncd.indexers.postgres.table import MAX_IDENTIFIER_BYTES, TableShape, TableSpec, quote_ident

__all__ = [
    "CHUNKS_SUFFIX",
    "EXTENSION_SQL",
    "MAX_DIMENSIONS",
    "ChunkRow",
    "ChunkSpec",
    "chunk_arrays",
    "chunk_shape_problems",
    "clear_sql",
    "create_statements",
    "insert_sql",
    "stored_sql",
]

CHUNKS_SUFFIX = "_chunks"
#: The most dimensions pgvector's HNSW index takes for a ``vector`` column.
MAX_DIMENSIONS = 2000

#: The installed pgvector's version (no row: the extension is not installed in this database).
EXTENSION_SQL = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"

_KEY = ("connector_id", "external_id", "chunk_index")


def _name(base: str, suffix: str) -> str:
    """``base + suffix``, or a digest of ``base`` with the suffix when longer than
    PostgreSQL keeps."""
    name = f"{base}{suffix}"
    if len(name.encode()) <= MAX_IDENTIFIER_BYTES:
        return name
    return f"syncd_{hashlib.sha256(base.encode()).hexdigest()[:16]}{suffix}"


@dataclass(frozen=True)
class ChunkSpec:
    """The chunks table of the documents table ``documents``, with vectors of
    ``dimensions``."""

    documents: TableSpec
    dimensions: int

    @property
    def table(self) -> str:
        """``<documents table>_chunks`` (a digest of the name when that is too long)."""
        return _name(self.documents.table, CHUNKS_SUFFIX)

    @property
    def qualified(self) -> str:
        return f"{quote_ident(self.documents.schema)}.{quote_ident(self.table)}"

    @property
    def display(self) -> str:
        return f"{self.documents.schema}.{self.table}"

    @property
    def index_name(self) -> str:
        """The HNSW index: ``<chunks table>_embedding``."""
        return _name(self.table, "_embedding")

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """The columns syncd writes, with their types as ``format_type`` shows them."""
        return (
            ("connector_id", "text"),
            ("external_id", "text"),
            ("chunk_index", "integer"),
            ("text", "text"),
            ("embedding", f"vector({self.dimensions})"),
        )


def create_statements(spec: ChunkSpec) -> list[str]:
    """The statements that create the chunks table and its HNSW index when missing (after
    the documents table: the foreign key names it)."""
    columns = ",\n    ".join(f"{quote_ident(name)} {kind} NOT NULL" for name, kind in spec.columns)
    return [
        f"CREATE TABLE IF NOT EXISTS {spec.qualified} (\n    {columns},\n"
        f"    PRIMARY KEY ({', '.join(_KEY)}),\n"
        "    FOREIGN KEY (connector_id, external_id)\n"
        f"        REFERENCES {spec.documents.qualified} (connector_id, external_id)"
        " ON DELETE CASCADE\n)",
        f"CREATE INDEX IF NOT EXISTS {quote_ident(spec.index_name)} ON {spec.qualified}"
        " USING hnsw (embedding vector_cosine_ops)",
    ]


def chunk_shape_problems(shape: TableShape, spec: ChunkSpec) -> list[str]:
    """What keeps an existing chunks table from taking syncd's rows, in words (``[]``:
    nothing). Other columns are fine when a row can be inserted without them."""
    if shape.relkind not in ("r", "p"):
        return [f"{spec.display} is not a table (relkind {shape.relkind!r})"]
    problems: list[str] = []
    found = {c.name: c for c in shape.columns}
    for name, kind in spec.columns:
        column = found.get(name)
        if column is None:
            problems.append(f"column {name} is missing (needs {kind})")
        elif column.type != kind:
            problems.append(f"column {name} is {column.type} (needs {kind})")
        elif column.generated:
            problems.append(f"column {name} is generated (syncd writes it)")
    if frozenset(_KEY) not in shape.keys:
        problems.append(
            "no primary key or unique index on (connector_id, external_id, chunk_index)"
        )
    written = {name for name, _ in spec.columns}
    for column in shape.columns:
        required = column.not_null and not column.has_default and not column.generated
        if column.name not in written and required:
            problems.append(f"column {column.name} is NOT NULL without a default")
    return problems


# --- reading and writing --------------------------------------------------------------------


def stored_sql(documents: TableSpec) -> str:
    """The content hash and text kept for each of a batch's documents (``$1`` connector ids,
    ``$2`` external ids): ``connector_id, external_id, content_hash, text`` of the rows that
    exist."""
    return (
        "SELECT t.connector_id, t.external_id, t.content_hash, t.text\n"
        f"  FROM {documents.qualified} AS t\n"
        "  JOIN unnest($1::text[], $2::text[]) AS d(connector_id, external_id)\n"
        "    ON t.connector_id = d.connector_id AND t.external_id = d.external_id"
    )


def clear_sql(spec: ChunkSpec) -> str:
    """Deletes every chunk of a batch's documents (``$1`` connector ids, ``$2`` external
    ids)."""
    return (
        f"DELETE FROM {spec.qualified} AS c\n"
        " USING unnest($1::text[], $2::text[]) AS d(connector_id, external_id)\n"
        " WHERE c.connector_id = d.connector_id AND c.external_id = d.external_id"
    )


def insert_sql(spec: ChunkSpec) -> str:
    """Inserts a batch of chunks from parallel arrays (:func:`chunk_arrays`): ``$1``
    connector ids, ``$2`` external ids, ``$3`` chunk indexes, ``$4`` texts, ``$5`` vectors
    in pgvector's text form (``[0.1,0.2,…]``, cast by the server)."""
    return (
        f"INSERT INTO {spec.qualified} (connector_id, external_id, chunk_index, text, embedding)\n"
        "SELECT d.connector_id, d.external_id, d.chunk_index, d.text, d.embedding::vector\n"
        "  FROM unnest($1::text[], $2::text[], $3::integer[], $4::text[], $5::text[])\n"
        "    AS d(connector_id, external_id, chunk_index, text, embedding)"
    )


class ChunkRow(NamedTuple):
    """One chunk as written."""

    connector_id: str
    external_id: str
    chunk_index: int
    text: str
    embedding: Sequence[float]


def vector_text(vector: Sequence[float]) -> str:
    """A vector in pgvector's text form: ``[0.1,0.2,…]`` (JSON's array of numbers)."""
    return orjson.dumps(list(vector)).decode()


def chunk_arrays(rows: Sequence[ChunkRow]) -> list[list[Any]]:
    """The five parallel arrays :func:`insert_sql` takes."""
    return [
        [r.connector_id for r in rows],
        [r.external_id for r in rows],
        [r.chunk_index for r in rows],
        [r.text for r in rows],
        [vector_text(r.embedding) for r in rows],
    ]
