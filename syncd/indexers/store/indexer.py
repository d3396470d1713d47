"""The ``store`` indexer: the payload is already kept in the store and served by the API.

Its config (no options) is :class:`~syncd.indexers.store.config.StoreIndexerConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.indexers.base import IndexerContext
from syncd.models import Document


class StoreIndexer:
    """Marks documents indexed; their payload is read back through the API."""

    needs_payload = False
    # Storing the document is all there is to it: the crawl marks it indexed as it commits.
    indexed_on_commit = True

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        self.connector_id = context.connector_id

    async def index(self, document: Document) -> None:
        """Nothing to do: the store already holds the document."""

    async def delete(self, document: Document) -> None:
        """Nothing to do: the store drops the payload as it marks the document deleted (at
        once, in the prune's own transaction: the kind is ``indexed_on_commit``)."""
