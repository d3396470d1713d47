"""The ``pgvector`` indexer: the ``postgres`` indexer's table plus each document's chunks
and their embeddings (the config model in :mod:`.config`, the indexer in :mod:`.indexer`,
the chunks table in :mod:`.chunks`, the splitter in :mod:`.chunking`, the embeddings client
in :mod:`.embeddings`)."""

from syncd.indexers.base import IndexerKind
from syncd.indexers.pgvector.config import PgvectorIndexerConfig
from syncd.indexers.pgvector.indexer import PgvectorIndexer, pgvector_secrets

KIND = IndexerKind(
    "pgvector",
    PgvectorIndexer,
    config_model=PgvectorIndexerConfig,
    secrets=pgvector_secrets,
    supports_delete=True,
    check=PgvectorIndexer.check,
)
"""The kind, as :func:`syncd.plugins.builtin_indexer_kinds` registers it."""

__all__ = ["KIND", "PgvectorIndexer", "PgvectorIndexerConfig", "pgvector_secrets"]
