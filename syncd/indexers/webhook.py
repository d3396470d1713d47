"""The ``webhook`` indexer: POSTs each document to a URL; 2xx means indexed.

Its config (``url``, ``headers``) is :class:`syncd.schema.WebhookIndexerConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.errors import SyncdError
from syncd.indexers.base import IndexerContext
from syncd.logs import register_secret
from syncd.models import Document
from syncd.sources.secrets import register_connector_secrets, resolve_refs


class WebhookError(SyncdError):
    """The webhook answered with a non-2xx status."""


class WebhookIndexer:
    """POSTs ``{"op": "upsert", "connector_id", "external_id", "content_hash", "payload"}``
    to ``url`` for each document, and ``{"op": "delete", "connector_id", "external_id"}`` for
    each document gone at the source (DESIGN.md §11); 2xx means done.

    Header values may reference ``${env:NAME}`` / ``${file:/path}``, resolved per request so
    secrets are never stored resolved. A POST is not retried by the transport (it is not
    idempotent); a failed document can be re-queued through the API. Header values and the
    URL's password are registered with the log redaction before the first POST.
    """

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        self._url = str(config["url"])
        self._headers = {str(k): str(v) for k, v in dict(config.get("headers") or {}).items()}
        self._context = context
        self._registered: set[str] = set()
        register_connector_secrets({}, config)

    async def index(self, document: Document) -> None:
        """POST the document; raise :class:`WebhookError` with the status unless 2xx."""
        await self._post(
            {
                "op": "upsert",
                "connector_id": document.connector_id,
                "external_id": document.external_id,
                "content_hash": document.content_hash,
                "payload": document.payload,
            }
        )

    async def delete(self, document: Document) -> None:
        """POST the deletion; raise :class:`WebhookError` with the status unless 2xx."""
        await self._post(
            {
                "op": "delete",
                "connector_id": document.connector_id,
                "external_id": document.external_id,
            }
        )

    async def _post(self, body: dict[str, Any]) -> None:
        headers = {k: resolve_refs(v) for k, v in self._headers.items()}
        # A ${file:} secret may have been rotated since the last POST.
        for value in headers.values():
            if value not in self._registered:
                self._registered.add(value)
                register_secret(value)
        response = await self._context.transport.request(
            "POST", self._url, headers=headers, json=body, raise_for_status=False
        )
        if not 200 <= response.status < 300:
            raise WebhookError(f"HTTP {response.status}")
