"""The ``postgres`` indexer: documents into a table in any PostgreSQL (the config model in
:mod:`.config`, the indexer in :mod:`.indexer`, the table's SQL and shape check in
:mod:`.table`, the pools shared per DSN in :mod:`.pool`)."""

from syncd.indexers.base import IndexerKind
from syncd.indexers.postgres.config import PostgresIndexerConfig
from syncd.indexers.postgres.indexer import PostgresIndexer, PostgresIndexerError, postgres_secrets

KIND = IndexerKind(
    "postgres",
    PostgresIndexer,
    config_model=PostgresIndexerConfig,
    secrets=postgres_secrets,
    supports_delete=True,
    check=PostgresIndexer.check,
)
"""The kind, as :func:`syncd.plugins.builtin_indexer_kinds` registers it."""

__all__ = [
    "KIND",
    "PostgresIndexer",
    "PostgresIndexerConfig",
    "PostgresIndexerError",
    "postgres_secrets",
]
