"""The ``opensearch`` indexer: documents into an OpenSearch or Elasticsearch index through
``_bulk`` (the config model in :mod:`.config`, the indexer in :mod:`.indexer`, the pure bulk
rules in :mod:`.bulk`)."""

from syncd.indexers.base import IndexerKind
from syncd.indexers.opensearch.config import OpenSearchIndexerConfig
from syncd.indexers.opensearch.indexer import OpenSearchError, OpenSearchIndexer, opensearch_secrets

KIND = IndexerKind(
    "opensearch",
    OpenSearchIndexer,
    config_model=OpenSearchIndexerConfig,
    secrets=opensearch_secrets,
    supports_delete=True,
    check=OpenSearchIndexer.check,
)
"""The kind, as :func:`syncd.plugins.builtin_indexer_kinds` registers it."""

__all__ = [
    "KIND",
    "OpenSearchError",
    "OpenSearchIndexer",
    "OpenSearchIndexerConfig",
    "opensearch_secrets",
]
