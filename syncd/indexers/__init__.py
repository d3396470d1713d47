"""Indexers: the plugin protocol and the built-in ``store``, ``webhook``, ``opensearch``,
``postgres`` and ``pgvector`` indexers."""

from __future__ import annotations

from syncd.indexers.base import (
    BatchDeletingIndexer,
    BatchFailures,
    BatchIndexer,
    DeletingIndexer,
    Indexer,
    IndexerContext,
    IndexerFactory,
    Transient,
)
from syncd.indexers.opensearch import OpenSearchIndexer
from syncd.indexers.pgvector import PgvectorIndexer
from syncd.indexers.postgres import PostgresIndexer
from syncd.indexers.store import StoreIndexer
from syncd.indexers.webhook import WebhookIndexer

BUILTIN_INDEXERS: dict[str, IndexerFactory] = {
    "store": StoreIndexer,
    "webhook": WebhookIndexer,
    "opensearch": OpenSearchIndexer,
    "postgres": PostgresIndexer,
    "pgvector": PgvectorIndexer,
}

__all__ = [
    "BUILTIN_INDEXERS",
    "BatchDeletingIndexer",
    "BatchFailures",
    "BatchIndexer",
    "DeletingIndexer",
    "Indexer",
    "IndexerContext",
    "IndexerFactory",
    "Transient",
]
