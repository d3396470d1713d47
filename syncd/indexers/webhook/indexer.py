"""The ``webhook`` indexer: POSTs documents to a URL, one per POST or in batches.

Its config (``url``, ``headers``, ``batch_size``) is
:class:`~syncd.indexers.webhook.config.WebhookIndexerConfig`.

Bodies (JSON, ``Content-Type: application/json`` unless the headers name another):

- ``batch_size`` 1 (the default): one document per POST, ``{"op": "upsert",
  "connector_id", "external_id", "content_hash", "payload"}`` (and ``"document"``, the
  document's shape ``{"title", "text", "url", "updated_at", "metadata"}``, when the connector
  maps one: DESIGN.md §7) or ``{"op": "delete",
  "connector_id", "external_id"}``; any 2xx means done, whatever the body.
- ``batch_size`` N > 1: up to N documents per POST, ``{"op": "upsert", "connector_id",
  "documents": [{"connector_id", "external_id", "content_hash", "payload"}, ...]}`` (deletions:
  ``"op": "delete"``, documents ``{"connector_id", "external_id"}``; a worker batch holding both
  makes two POSTs). A 2xx answer means every document is done, unless its body is
  ``{"results": [{"external_id": "...", "status": "failed", "error": "..."}, ...]}``: the
  documents listed with ``status`` ``"failed"`` fail with their ``error``; every other document
  (listed with another status, or not listed) is done. A body of another shape is ignored.
- A non-2xx answer, or no answer (connection refused, timeout), fails every document of the
  POST with the status or the error.

The payload is sent as the JSON text the store keeps (``Document.payload_json``), spliced into
the body without being decoded and encoded again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from syncd.config.secrets import register_connector_secrets, resolve_refs
from syncd.errors import SyncdError
from syncd.http.transport import Response
from syncd.indexers.base import BatchFailures, IndexerContext
from syncd.jsontext import canonical_json
from syncd.models import Document
from syncd.observability.logs import register_secret
from syncd.rules.shape import fields_object

#: Longest error taken from a webhook's per-document result.
MAX_ERROR = 500
_DEFAULT_ERROR = "Failed by the webhook"


class WebhookError(SyncdError):
    """The webhook answered with a non-2xx status (``status``: 408, 429 and 5xx are
    transient, :func:`syncd.errors.is_transient`)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class WebhookIndexer:
    """POSTs documents to ``url``: see the module docstring for the bodies and answers.

    Header values may reference ``${env:NAME}`` / ``${file:/path}``, resolved per request so
    secrets are never stored resolved. A POST is not retried by the transport (it is not
    idempotent); a failed document can be re-queued through the API. Header values and the
    URL's password are registered with the log redaction before the first POST.
    """

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        self._url = str(config["url"])
        headers = {str(k): str(v) for k, v in dict(config.get("headers") or {}).items()}
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        self._headers = headers
        # Headers without a reference are the same for every POST: built once.
        self._fixed = None if any("${" in v for v in headers.values()) else headers
        #: Most documents per POST; at 1 the workers call ``index``/``delete`` per document.
        self.batch_size = int(config.get("batch_size", 1))
        self._transport = context.transport
        self._registered: set[str] = set()
        register_connector_secrets({}, config)

    async def index(self, document: Document) -> None:
        """POST the document; raise :class:`WebhookError` with the status unless 2xx."""
        body = {"op": "upsert", **_upsert(document)}
        await self._post(orjson.dumps(body))

    async def delete(self, document: Document) -> None:
        """POST the deletion; raise :class:`WebhookError` with the status unless 2xx."""
        body = {"op": "delete", **_delete(document)}
        await self._post(orjson.dumps(body))

    async def index_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """POST the documents, ``batch_size`` at a time; the failed ones, with their errors."""
        return await self._batches("upsert", [_upsert(d) for d in documents])

    async def delete_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """POST the deletions, ``batch_size`` at a time; the failed ones, with their errors."""
        return await self._batches("delete", [_delete(d) for d in documents])

    async def _batches(self, op: str, items: list[dict[str, Any]]) -> BatchFailures:
        if not items:
            return None
        size = self.batch_size
        if len(items) <= size:
            return _failures(await self._post(_batch_body(op, items)))
        # More than one POST (a caller other than the workers, which never hand more):
        # each POST's failure is its own documents'.
        failures: dict[str, str] = {}
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            try:
                found = _failures(await self._post(_batch_body(op, chunk)))
            except SyncdError as exc:
                found = {item["external_id"]: str(exc) for item in chunk}
            failures.update(found or {})
        return failures

    async def _post(self, body: bytes) -> Response:
        headers = self._fixed
        if headers is None:
            headers = {k: resolve_refs(v) for k, v in self._headers.items()}
            # A ${file:} secret may have been rotated since the last POST.
            for value in headers.values():
                if value not in self._registered:
                    self._registered.add(value)
                    register_secret(value)
        response = await self._transport.request(
            "POST", self._url, headers=headers, content=body, raise_for_status=False
        )
        if not 200 <= response.status < 300:
            raise WebhookError(f"HTTP {response.status}", response.status)
        return response


def _payload(document: Document) -> orjson.Fragment:
    """The payload as JSON text: the store's own when it has it."""
    text = document.payload_json
    return orjson.Fragment(text if text is not None else canonical_json(document.payload))


def _upsert(document: Document) -> dict[str, Any]:
    item: dict[str, Any] = {
        "connector_id": document.connector_id,
        "external_id": document.external_id,
        "content_hash": document.content_hash,
        "payload": _payload(document),
    }
    if document.fields is not None:
        item["document"] = fields_object(document.fields)
    return item


def _delete(document: Document) -> dict[str, Any]:
    return {"connector_id": document.connector_id, "external_id": document.external_id}


def _batch_body(op: str, items: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"op": op, "connector_id": items[0]["connector_id"], "documents": items})


def _failures(response: Response) -> BatchFailures:
    """The documents a 2xx answer reports as failed (none unless its body has the documented
    shape)."""
    body = response.body
    if not body.lstrip().startswith(b"{"):
        return None
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        return None
    failures: dict[str, str] = {}
    for entry in results:
        if not isinstance(entry, dict) or entry.get("status") != "failed":
            continue
        external_id = entry.get("external_id")
        if isinstance(external_id, str | int) and not isinstance(external_id, bool):
            error = entry.get("error")
            text = error if isinstance(error, str) and error else _DEFAULT_ERROR
            failures[str(external_id)] = text[:MAX_ERROR]
    return failures
