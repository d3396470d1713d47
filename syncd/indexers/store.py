"""The ``store`` indexer: the payload is already kept in the store and served by the API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.indexers.base import IndexerContext
from syncd.models import Document
from syncd.spec import check_unknown


def validate_store_config(config: Mapping[str, Any]) -> dict[str, str]:
    """The ``store`` indexer takes no options."""
    errors: dict[str, str] = {}
    check_unknown(config, ("type",), "indexer.", errors)
    return errors


class StoreIndexer:
    """Marks documents indexed; their payload is read back through the API."""

    needs_payload = False
    # Storing the document is all there is to it: the crawl marks it indexed as it commits.
    indexed_on_commit = True

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        self.connector_id = context.connector_id

    async def index(self, document: Document) -> None:
        """Nothing to do: the store already holds the document."""
