"""The ``webhook`` indexer: POSTs each document to a URL; 2xx means indexed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.errors import SyncdError
from syncd.indexers.base import IndexerContext
from syncd.logs import register_secret
from syncd.models import Document
from syncd.sources.secrets import register_connector_secrets, resolve_refs
from syncd.spec import MSG_REQUIRED, check_headers, check_unknown, url_problem


class WebhookError(SyncdError):
    """The webhook answered with a non-2xx status."""


def validate_webhook_config(config: Mapping[str, Any]) -> dict[str, str]:
    """Field errors of a ``webhook`` indexer config: ``url`` (http/https) and ``headers``."""
    errors: dict[str, str] = {}
    check_unknown(config, ("type", "url", "headers"), "indexer.", errors)
    if "url" not in config:
        errors["indexer.url"] = MSG_REQUIRED
    elif problem := url_problem(config["url"]):
        errors["indexer.url"] = problem
    check_headers(config.get("headers"), "indexer.headers", errors)
    return errors


class WebhookIndexer:
    """POSTs ``{"connector_id", "external_id", "content_hash", "payload"}`` to ``url``.

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
        headers = {k: resolve_refs(v) for k, v in self._headers.items()}
        # A ${file:} secret may have been rotated since the last POST.
        for value in headers.values():
            if value not in self._registered:
                self._registered.add(value)
                register_secret(value)
        body = {
            "connector_id": document.connector_id,
            "external_id": document.external_id,
            "content_hash": document.content_hash,
            "payload": document.payload,
        }
        response = await self._context.transport.request(
            "POST", self._url, headers=headers, json=body, raise_for_status=False
        )
        if not 200 <= response.status < 300:
            raise WebhookError(f"HTTP {response.status}")
