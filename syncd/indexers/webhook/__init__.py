"""The ``webhook`` indexer: POSTs documents to a URL, one per POST or in batches."""

from syncd.indexers.base import IndexerKind
from syncd.indexers.webhook.config import WebhookIndexerConfig
from syncd.indexers.webhook.indexer import WebhookError, WebhookIndexer

KIND = IndexerKind(
    "webhook", WebhookIndexer, config_model=WebhookIndexerConfig, supports_delete=True
)
"""The kind, as :func:`syncd.plugins.builtin_indexer_kinds` registers it."""

__all__ = ["KIND", "WebhookError", "WebhookIndexer", "WebhookIndexerConfig"]
