"""The ``opensearch`` indexer: documents written to an OpenSearch 2 or Elasticsearch 8 index
through ``POST /_bulk`` (the two share that API, and what else is used here).

Its config is :class:`~syncd.indexers.opensearch.config.OpenSearchIndexerConfig`: ``url``,
``index``, ``auth`` (``basic``, ``api_key``, ``bearer``; every value a secret,
``${env:}``/``${file:}`` resolved per request), ``create_index`` (default true) and
``batch_size`` (default 100).

- Each document is one ``index`` action (create or replace) with the ``_id`` of
  :func:`~syncd.indexers.opensearch.bulk.document_id` and the source of
  :func:`~syncd.indexers.opensearch.bulk.document_source`; a deletion is one ``delete``
  action. A worker batch goes out in one request (split only past
  :data:`MAX_REQUEST_BYTES` of NDJSON).
- Per-item results (:func:`~syncd.indexers.opensearch.bulk.item_results`): a document fails
  with its item's status, ``error.type`` and reasons; a delete answered 404 counts as deleted.
  Items answered 429 (or 503 with a rejected-execution error) are sent again, alone, up to
  ``item_retries`` times with waits of ``item_backoff * 2**n`` seconds (1, 2, 4 by default),
  then fail with the last reason.
- The whole request goes through the daemon's shared transport: per-host budgets,
  ``Retry-After`` and rate-limit waits, and retries of 502/503/504 and dropped connections
  (``_bulk`` by ``_id`` is idempotent, so it is marked so). A request still refused fails the
  documents it carried with ``HTTP <status> <type>: <reason>``.
- Before its first write the indexer reads ``GET /{index}/_mapping``: a missing index is
  created with :data:`~syncd.indexers.opensearch.bulk.INDEX_MAPPINGS` (``create_index: true``;
  another writer creating it first — ``resource_already_exists_exception`` — is fine) or
  refused (``create_index: false``); an existing index whose mapping does not take the
  documents is refused, never altered. A refusal fails the documents of the call and is
  looked at again on the next call, so a fixed index is picked up without a restart.

:meth:`OpenSearchIndexer.check` runs the same inspection without creating anything, for
``syncd validate --connect``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
import structlog
from yarl import URL

from syncd.config.secrets import (
    basic_credentials,
    connector_secrets,
    register_connector_secrets,
    resolve_secret,
)
from syncd.errors import SourceError, SyncdError
from syncd.http.transport import Response
from syncd.indexers.base import BatchFailures, IndexerContext
from syncd.indexers.opensearch.bulk import (
    INDEX_MAPPINGS,
    MAX_ERROR,
    ItemResult,
    Outcome,
    chunks,
    delete_lines,
    describe_error,
    document_id,
    document_source,
    index_lines,
    item_results,
    mapping_problems,
)
from syncd.models import Document, utcnow
from syncd.observability.logs import register_secret

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "ITEM_BACKOFF",
    "ITEM_RETRIES",
    "MAX_REQUEST_BYTES",
    "OpenSearchError",
    "OpenSearchIndexer",
    "opensearch_secrets",
]

log = structlog.get_logger("syncd.indexers.opensearch")

DEFAULT_BATCH_SIZE = 100
#: Times a rejected (429) item is sent again within one call, and the first wait (doubling).
ITEM_RETRIES = 3
ITEM_BACKOFF = 1.0
#: NDJSON bytes per ``_bulk`` request (well under the 100 MB ``http.max_content_length``
#: default of both engines); a single bigger document goes alone.
MAX_REQUEST_BYTES = 10 * 1024 * 1024

_NDJSON = "application/x-ndjson"
_JSON = "application/json"

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], datetime]


class OpenSearchError(SyncdError):
    """The cluster refused a request, or the index cannot take the documents."""


def opensearch_secrets(config: Mapping[str, Any]) -> set[str]:
    """The secrets of an ``opensearch`` config for the log redaction: every ``auth`` value
    but the username (as for ``source.auth``), a URL's password, and the credentials as they
    travel (``base64(username:password)``, ``base64(id:api_key)``) when they resolve now."""
    found = connector_secrets({}, config)
    auth = config.get("auth")
    if isinstance(auth, Mapping):
        # Not resolvable now: registered when a request resolves them.
        with contextlib.suppress(SyncdError, KeyError, TypeError):
            value, secrets = _credential(auth)
            found.update([value, *secrets])
    return found


def _credential(auth: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The ``Authorization`` value of ``auth`` and the secrets it carries (resolved)."""
    kind = auth["type"]
    if kind == "basic":
        password = resolve_secret("password", auth["password"])
        encoded = basic_credentials(resolve_secret("username", auth["username"]), password)
        return f"Basic {encoded}", [password, encoded]
    if kind == "api_key":
        if auth.get("encoded") is not None:
            encoded = resolve_secret("encoded", auth["encoded"])
            return f"ApiKey {encoded}", [encoded]
        key_id = resolve_secret("id", auth["id"])
        if ":" in key_id:
            raise SourceError("auth.id: resolved value contains ':'")
        key = resolve_secret("api_key", auth["api_key"])
        encoded = base64.b64encode(f"{key_id}:{key}".encode()).decode("ascii")
        return f"ApiKey {encoded}", [key_id, key, encoded]
    token = resolve_secret("token", auth["token"])
    return f"Bearer {token}", [token]


def _timestamp(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class OpenSearchIndexer:
    """Writes a connector's documents to ``index`` (see the module docstring).

    ``sleep`` (default :func:`asyncio.sleep`) is what the waits between item retries go
    through; ``item_retries`` and ``item_backoff`` bound them; ``clock`` dates ``indexed_at``.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        context: IndexerContext,
        *,
        sleep: Sleep | None = None,
        item_retries: int = ITEM_RETRIES,
        item_backoff: float = ITEM_BACKOFF,
        clock: Clock = utcnow,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        base = URL(str(config["url"])).with_query(None).with_fragment(None)
        self._base = base
        self._prefix = base.path.rstrip("/")
        self.index_name = str(config["index"])
        self._create_index = bool(config.get("create_index", True))
        #: Most documents per call; at 1 the workers call ``index``/``delete`` per document.
        self.batch_size = int(config.get("batch_size", DEFAULT_BATCH_SIZE))
        auth = config.get("auth")
        self._auth: Mapping[str, Any] | None = dict(auth) if isinstance(auth, Mapping) else None
        # Headers of credentials without a reference are the same for every request: built
        # at the first one and kept.
        self._fixed: dict[str, str] | None = {} if self._auth is None else None
        self._cacheable = not any("${" in str(v) for v in (self._auth or {}).values())
        self._transport = context.transport
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self._item_retries = item_retries
        self._item_backoff = item_backoff
        self._clock = clock
        self._max_bytes = max_request_bytes
        self._ready = False
        self._lock = asyncio.Lock()
        self._registered: set[str] = set()
        register_connector_secrets({}, config)

    # --- the indexer protocol ---------------------------------------------------------------

    async def index(self, document: Document) -> None:
        """Index one document; raise :class:`OpenSearchError` with its item's error."""
        failures = await self.index_batch([document])
        if failures:
            raise OpenSearchError(next(iter(failures.values())))

    async def delete(self, document: Document) -> None:
        """Delete one document (404: already gone); raise with its item's error."""
        failures = await self.delete_batch([document])
        if failures:
            raise OpenSearchError(next(iter(failures.values())))

    async def index_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """Index the documents in one ``_bulk`` request; the failed ones, with their errors."""
        if not documents:
            return None
        await self._ensure_index()
        indexed_at = _timestamp(self._clock())
        failures: dict[str, str] = {}
        actions: list[tuple[str, bytes]] = []
        for doc in documents:
            try:
                source = document_source(doc, indexed_at)
            except (ValueError, TypeError) as exc:
                failures[doc.external_id] = f"cannot be written as JSON: {exc}"[:MAX_ERROR]
                continue
            doc_id = document_id(doc.connector_id, doc.external_id)
            actions.append((doc.external_id, index_lines(self.index_name, doc_id, source)))
        failures.update(await self._bulk(actions, delete=False))
        return failures

    async def delete_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """Delete the documents in one ``_bulk`` request; the failed ones, with their errors.
        A deletion needs no mapping: the index is not inspected (nor created) for it."""
        index = self.index_name
        actions = [
            (d.external_id, delete_lines(index, document_id(d.connector_id, d.external_id)))
            for d in documents
        ]
        return await self._bulk(actions, delete=True) if actions else None

    # --- validate --connect ---------------------------------------------------------------

    @classmethod
    async def check(cls, config: Mapping[str, Any], context: IndexerContext) -> list[str]:
        """What keeps ``config`` from working against its cluster (``[]``: nothing): the
        index cannot be read, does not exist with ``create_index: false``, or has the wrong
        shape. Nothing is created or changed."""
        indexer = cls(config, context)
        try:
            return await indexer._inspect(create=False)
        except SyncdError as exc:
            return [f"{indexer._target()}: {exc}"]

    # --- the index ------------------------------------------------------------------------

    def _target(self) -> str:
        return f"index {self.index_name!r} at {self._base.with_user(None).with_password(None)}"

    async def _ensure_index(self) -> None:
        if self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            problems = await self._inspect(create=True)
            if problems:
                raise OpenSearchError(f"{self._target()} cannot be used: {'; '.join(problems)}")
            self._ready = True

    async def _inspect(self, *, create: bool) -> list[str]:
        """The problems of the index (after creating it when missing, if ``create`` and
        ``create_index``)."""
        mapping = await self._request("GET", f"{self.index_name}/_mapping")
        if mapping.status == 404 and _error_type(mapping) == "index_not_found_exception":
            if not self._create_index:
                return ["it does not exist and create_index is false"]
            if not create:
                return []  # created at first use
            body = orjson.dumps({"mappings": INDEX_MAPPINGS})
            made = await self._request("PUT", self.index_name, body=body, content_type=_JSON)
            if 200 <= made.status < 300:
                log.info("opensearch.index_created", index=self.index_name)
                return []
            if _error_type(made) != "resource_already_exists_exception":
                return [f"it could not be created: {_answer_error(made)}"]
            # Another writer created it meanwhile: its shape is looked at like any index's.
            mapping = await self._request("GET", f"{self.index_name}/_mapping")
        if not 200 <= mapping.status < 300:
            return [f"its mapping could not be read: {_answer_error(mapping)}"]
        problems = mapping_problems(_json_body(mapping), self.index_name)
        if problems:
            return [f"wrong shape (an existing index is never altered): {'; '.join(problems)}"]
        return []

    # --- _bulk ----------------------------------------------------------------------------

    async def _bulk(self, actions: list[tuple[str, bytes]], *, delete: bool) -> dict[str, str]:
        """Send ``actions`` (external id, NDJSON lines), retrying rejected items; the
        failures, external id → error."""
        failures: dict[str, str] = {}
        pending = actions
        for attempt in range(self._item_retries + 1):
            rejected: list[tuple[tuple[str, bytes], ItemResult]] = []
            for span in chunks([lines for _, lines in pending], self._max_bytes):
                part = [pending[i] for i in span]
                try:
                    results = await self._send_bulk(part, delete=delete)
                except SyncdError as exc:
                    failures.update((eid, str(exc)[:MAX_ERROR]) for eid, _ in part)
                    continue
                for action, result in zip(part, results, strict=True):
                    if result.outcome is Outcome.RETRY:
                        rejected.append((action, result))
                    elif result.outcome is Outcome.FAILED:
                        failures[action[0]] = result.error or "failed"
                        if result.type == "index_not_found_exception":
                            self._ready = False  # looked at again on the next call
            if not rejected:
                break
            if attempt == self._item_retries:
                for (eid, _), result in rejected:
                    text = f"still rejected after {attempt} retries: {result.error}"
                    failures[eid] = text[:MAX_ERROR]
                break
            delay = self._item_backoff * 2**attempt
            log.info(
                "opensearch.retry_items",
                index=self.index_name,
                items=len(rejected),
                retry=attempt + 1,
                delay=delay,
                error=rejected[0][1].error,
            )
            await self._sleep(delay)
            pending = [action for action, _ in rejected]
        return failures

    async def _send_bulk(
        self, part: Sequence[tuple[str, bytes]], *, delete: bool
    ) -> list[ItemResult]:
        body = b"".join(lines for _, lines in part)
        # By _id, an index or delete does the same when sent twice: the transport may retry.
        response = await self._request(
            "POST", "_bulk", body=body, content_type=_NDJSON, idempotent=True
        )
        if not 200 <= response.status < 300:
            raise OpenSearchError(_answer_error(response))
        try:
            answer = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            raise OpenSearchError("unexpected _bulk answer: not JSON") from None
        return item_results(answer, len(part), delete=delete)

    # --- requests -------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str | None = None,
        idempotent: bool | None = None,
    ) -> Response:
        headers = self._headers()
        if content_type is not None:
            headers = {**headers, "Content-Type": content_type}
        url = str(self._base.with_path(f"{self._prefix}/{path}"))
        return await self._transport.request(
            method,
            url,
            headers=headers,
            content=body,
            raise_for_status=False,
            idempotent=idempotent,
        )

    def _headers(self) -> dict[str, str]:
        if self._fixed is not None:
            return self._fixed
        assert self._auth is not None
        value, secrets = _credential(self._auth)
        # Registered before the first request that carries them; a ${file:} secret may have
        # been rotated since the last one.
        self._register([value, *secrets])
        headers = {"Authorization": value}
        if self._cacheable:
            self._fixed = headers
        return headers

    def _register(self, values: Iterable[str]) -> None:
        for value in values:
            if value not in self._registered:
                self._registered.add(value)
                register_secret(value)


def _json_body(response: Response) -> Any:
    try:
        return orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return None


def _error_type(response: Response) -> str | None:
    body = _json_body(response)
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def _answer_error(response: Response) -> str:
    """``HTTP <status> <type>: <reason>`` of an answer that is not a 2xx."""
    body = _json_body(response)
    error = body.get("error") if isinstance(body, dict) else None
    return describe_error(f"HTTP {response.status}", error)
