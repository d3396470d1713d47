"""The chunks table of the ``pgvector`` indexer (:mod:`syncd.indexers.pgvector.chunks`): its name,
its statements and the shape check that refuses a table it cannot write."""

from __future__ import annotations

from syncd.indexers.pgvector.chunks import (
    ChunkRow,
    ChunkSpec,
    chunk_arrays,
    chunk_shape_problems,
    create_statements,
)
from syncd.indexers.postgres.table import ColumnShape, TableShape, TableSpec

SPEC = ChunkSpec(TableSpec(table="kb", schema="search"), 8)
GOOD = (
    ColumnShape("connector_id", "text", True, False, "", None),
    ColumnShape("external_id", "text", True, False, "", None),
    ColumnShape("chunk_index", "integer", True, False, "", None),
    ColumnShape("text", "text", True, False, "", None),
    ColumnShape("embedding", "vector(8)", True, False, "", None),
)
KEY = frozenset({"connector_id", "external_id", "chunk_index"})


def test_names_follow_the_documents_table() -> None:
    assert SPEC.qualified == '"search"."kb_chunks"'
    assert SPEC.index_name == "kb_chunks_embedding"
    long = ChunkSpec(TableSpec(table="t" * 60), 8)
    assert long.table.startswith("syncd_") and long.table.endswith("_chunks")
    assert len(long.table.encode()) <= 63 and len(long.index_name.encode()) <= 63


def test_create_statements() -> None:
    table, index = create_statements(SPEC)
    assert '"embedding" vector(8) NOT NULL' in table
    assert "PRIMARY KEY (connector_id, external_id, chunk_index)" in table
    assert 'REFERENCES "search"."kb" (connector_id, external_id) ON DELETE CASCADE' in table
    assert index == (
        'CREATE INDEX IF NOT EXISTS "kb_chunks_embedding" ON "search"."kb_chunks"'
        " USING hnsw (embedding vector_cosine_ops)"
    )


def test_the_shape_syncd_creates_is_accepted() -> None:
    assert chunk_shape_problems(TableShape("r", GOOD, (KEY,)), SPEC) == []
    extra = ColumnShape("note", "text", False, False, "", None)
    assert chunk_shape_problems(TableShape("r", (*GOOD, extra), (KEY,)), SPEC) == []


def test_another_dimension_a_missing_key_or_a_required_column_are_refused() -> None:
    other = (*GOOD[:4], ColumnShape("embedding", "vector(1536)", True, False, "", None))
    required = ColumnShape("tenant", "text", True, False, "", None)
    shape = TableShape("r", (*other, required), ())
    assert chunk_shape_problems(shape, SPEC) == [
        "column embedding is vector(1536) (needs vector(8))",
        "no primary key or unique index on (connector_id, external_id, chunk_index)",
        "column tenant is NOT NULL without a default",
    ]
    assert chunk_shape_problems(TableShape("v", GOOD, ()), SPEC) == [
        "search.kb_chunks is not a table (relkind 'v')"
    ]
    assert chunk_shape_problems(TableShape("r", GOOD[:4], (KEY,)), SPEC) == [
        "column embedding is missing (needs vector(8))"
    ]


def test_vectors_travel_in_pgvector_text_form() -> None:
    arrays = chunk_arrays([ChunkRow("c", "e", 0, "hello", [0.5, -1.0, 0.25])])
    assert arrays == [["c"], ["e"], [0], ["hello"], ["[0.5,-1.0,0.25]"]]
