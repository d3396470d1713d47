"""The ``store`` indexer: the store keeps each payload, served by the API (the default)."""

from syncd.indexers.base import IndexerKind
from syncd.indexers.store.config import StoreIndexerConfig
from syncd.indexers.store.indexer import StoreIndexer

KIND = IndexerKind(
    "store",
    StoreIndexer,
    config_model=StoreIndexerConfig,
    indexed_on_commit=True,
    needs_payload=False,
    supports_delete=True,
)
"""The kind, as :func:`syncd.plugins.builtin_indexer_kinds` registers it."""

__all__ = ["KIND", "StoreIndexer", "StoreIndexerConfig"]
