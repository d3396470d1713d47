"""Indexers: the plugin protocol (:mod:`.base`) and the built-in ``store``, ``webhook``,
``opensearch``, ``postgres`` and ``pgvector`` indexers, one package each."""

from __future__ import annotations

from syncd.indexers.base import (
    BatchDeletingIndexer,
    BatchFailures,
    BatchIndexer,
    DeletingIndexer,
    Indexer,
    IndexerContext,
    IndexerFactory,
    IndexerKind,
    Transient,
)

__all__ = [
    "BatchDeletingIndexer",
    "BatchFailures",
    "BatchIndexer",
    "DeletingIndexer",
    "Indexer",
    "IndexerContext",
    "IndexerFactory",
    "IndexerKind",
    "Transient",
]
