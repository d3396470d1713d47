"""The pure parts of the ``opensearch`` indexer: document ids, ``_bulk`` bodies, per-item
results, and the index mapping with its shape check. No I/O: :mod:`syncd.indexers.opensearch`
sends what this module writes and hands it what came back.

Written from the public references of both engines (the same REST API for what is used here):

- ``POST /_bulk`` — NDJSON, one action line (``{"index": {"_index", "_id"}}``, ``{"delete":
  {...}}``) and, for ``index``, the document's source on the next line; the last line ends with
  a newline. The answer is ``{"took", "errors", "items": [...]}`` with one item per action, in
  the order of the request, each ``{"<action>": {"_index", "_id", "status", "result",
  "error": {"type", "reason", "caused_by"}?}}``; ``errors`` is true when any item has an
  ``error``. A delete of a missing document answers ``404`` with ``"result": "not_found"``.
  https://www.elastic.co/docs/api/doc/elasticsearch/operation/operation-bulk,
  https://docs.opensearch.org/latest/api-reference/document-apis/bulk/ (``_id`` at most 512
  bytes since OpenSearch 2.9).
- Rejected work answers 429 (``es_rejected_execution_exception`` on Elasticsearch,
  ``rejected_execution_exception`` on OpenSearch), to be retried with backoff:
  https://www.elastic.co/docs/troubleshoot/elasticsearch/rejected-requests.
- ``GET /{index}/_mapping`` answers ``{"<concrete index>": {"mappings": {...}}}`` (an alias
  answers under each index it points to); an ``object`` field with sub-fields is shown without
  ``"type": "object"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from syncd.jsontext import canonical_json, parse_json
from syncd.models import Document, DocumentFields

#: OpenSearch (2.9+) and Elasticsearch refuse a longer ``_id``.
MAX_ID_BYTES = 512
#: Longest error text kept for a document.
MAX_ERROR = 500
#: Item errors retried within the call (with their 429 or, for these types, 503).
REJECTED_TYPES = frozenset({"es_rejected_execution_exception", "rejected_execution_exception"})

# --- document ids ---------------------------------------------------------------------------


def document_id(connector_id: str, external_id: str) -> str:
    """The ``_id`` of a connector's document: ``<connector_id>:<external_id>``, or, when that
    is longer than :data:`MAX_ID_BYTES` in UTF-8, ``<connector_id>#sha256:<hex digest of the
    external id's UTF-8>``.

    Connector ids are hexadecimal (no ``:`` or ``#``), so the character after the connector id
    tells the two forms apart; the plain form holds the external id verbatim, the hashed form
    is 91 bytes. Two documents share an ``_id`` only if they are the same document (or on a
    SHA-256 collision), so several connectors may write to one index.
    """
    plain = f"{connector_id}:{external_id}"
    if len(plain.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        return plain
    digest = hashlib.sha256(external_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{connector_id}#sha256:{digest}"


# --- bulk bodies ----------------------------------------------------------------------------


def _fragment(text: str | bytes) -> orjson.Fragment:
    """JSON text spliced into a line as it is, unless it holds a line break (whitespace a
    store may keep): re-encoded then, since NDJSON ends a line at every newline."""
    raw = text.encode() if isinstance(text, str) else text
    if b"\n" in raw or b"\r" in raw:
        raw = canonical_json(parse_json(raw))
    return orjson.Fragment(raw)


def document_source(document: Document, indexed_at: str) -> bytes:
    """The ``_source`` written for ``document`` (one line of JSON): ``connector_id``,
    ``external_id``, ``content_hash``, the document's shape (``title``, ``text``, ``url``,
    ``updated_at``: null when not mapped; ``metadata``: ``{}``), ``payload`` (the stored JSON
    text, spliced as it is) and ``indexed_at``.

    Raises ``ValueError`` (``PayloadError``, ``orjson.JSONEncodeError``) for a document that
    cannot be written as JSON.
    """
    fields = document.fields if document.fields is not None else DocumentFields()
    text = document.payload_json
    payload = _fragment(text if text is not None else canonical_json(document.payload))
    metadata = _fragment(canonical_json(dict(fields.metadata))) if fields.metadata else {}
    return orjson.dumps(
        {
            "connector_id": document.connector_id,
            "external_id": document.external_id,
            "content_hash": document.content_hash,
            "title": fields.title,
            "text": fields.text,
            "url": fields.url,
            "updated_at": fields.updated_at,
            "metadata": metadata,
            "payload": payload,
            "indexed_at": indexed_at,
        }
    )


def index_lines(index: str, doc_id: str, source: bytes) -> bytes:
    """The two NDJSON lines that index (create or replace) ``source`` as ``doc_id``."""
    return orjson.dumps({"index": {"_index": index, "_id": doc_id}}) + b"\n" + source + b"\n"


def delete_lines(index: str, doc_id: str) -> bytes:
    """The NDJSON line that deletes ``doc_id``."""
    return orjson.dumps({"delete": {"_index": index, "_id": doc_id}}) + b"\n"


def chunks(lines: Sequence[bytes], max_bytes: int) -> list[range]:
    """The actions (indexes into ``lines``) of each request: consecutive, at most
    ``max_bytes`` of NDJSON per request, except an action bigger than that alone."""
    out: list[range] = []
    start = size = 0
    for i, action in enumerate(lines):
        if i > start and size + len(action) > max_bytes:
            out.append(range(start, i))
            start, size = i, 0
        size += len(action)
    if start < len(lines):
        out.append(range(start, len(lines)))
    return out


# --- per-item results -----------------------------------------------------------------------


class Outcome(Enum):
    """What became of one action of a ``_bulk`` request."""

    DONE = "done"
    RETRY = "retry"
    FAILED = "failed"


@dataclass(frozen=True)
class ItemResult:
    """One item's outcome and, unless done, why (the status, ``error.type`` and reasons)."""

    outcome: Outcome
    error: str | None = None
    type: str | None = None


_DONE = ItemResult(Outcome.DONE)


def describe_error(status: Any, error: Any) -> str:
    """``<status> <type>: <reason>; caused by <type>: <reason>`` of an error object (an item's
    or a whole answer's), at most :data:`MAX_ERROR` characters."""
    head = f"{status}" if status is not None else "error"
    if isinstance(error, Mapping):
        kind, reason = error.get("type"), error.get("reason")
        text = f"{head} {kind}: {reason}" if kind else f"{head}: {reason}"
        cause = error.get("caused_by")
        if isinstance(cause, Mapping) and (cause.get("type") or cause.get("reason")):
            text += f"; caused by {cause.get('type')}: {cause.get('reason')}"
    elif isinstance(error, str) and error:
        text = f"{head}: {error}"
    else:
        text = head
    return text[:MAX_ERROR]


def item_results(answer: Any, count: int, *, delete: bool) -> list[ItemResult]:
    """The outcome of each of the ``count`` actions of a 2xx ``_bulk`` answer (parsed JSON).

    An item with a 2xx status is done, as is a delete answered 404 (the document is not in the
    index: what a delete wants). 429, and 503 with a rejected-execution error, are to retry.
    Any other item failed, with its status, ``error.type`` and reasons. An answer that is not
    a ``_bulk`` answer for these actions (no ``items`` list of ``count`` objects) fails them
    all: nothing can be told about them.
    """
    if not isinstance(answer, Mapping):
        return [ItemResult(Outcome.FAILED, "unexpected _bulk answer: not a JSON object")] * count
    items = answer.get("items")
    if not isinstance(items, list) or len(items) != count:
        got = len(items) if isinstance(items, list) else "no"
        error = f"unexpected _bulk answer: {got} items for {count} actions"
        return [ItemResult(Outcome.FAILED, error)] * count
    if answer.get("errors") is False:
        return [_DONE] * count
    return [_item(item, delete) for item in items]


def _item(item: Any, delete: bool) -> ItemResult:
    inner = next(iter(item.values()), None) if isinstance(item, Mapping) and item else None
    if not isinstance(inner, Mapping):
        return ItemResult(Outcome.FAILED, "unexpected _bulk item: not an object")
    status = inner.get("status")
    if not isinstance(status, int) or isinstance(status, bool):
        return ItemResult(Outcome.FAILED, "unexpected _bulk item: no status")
    error = inner.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    if 200 <= status < 300 and error is None:
        return _DONE
    if delete and status == 404:
        return _DONE
    text = describe_error(status, error)
    if status == 429 or (status == 503 and kind in REJECTED_TYPES):
        return ItemResult(Outcome.RETRY, text, kind if isinstance(kind, str) else None)
    return ItemResult(Outcome.FAILED, text, kind if isinstance(kind, str) else None)


# --- the index mapping ----------------------------------------------------------------------

#: The mapping of an index the indexer creates (``PUT /{index}``; no settings: shards,
#: replicas and analyzers are the cluster's defaults). The same on OpenSearch 2 and
#: Elasticsearch 8: fields not listed here are kept in ``_source`` but not indexed
#: (``dynamic: false``); ``payload`` is not parsed at all (``enabled: false``), so no record
#: can break the mapping; ``metadata`` maps its keys as they come (strings as ``keyword``,
#: numbers and booleans as such, no date detection), so they can be filtered on.
INDEX_MAPPINGS: Mapping[str, Any] = {
    "dynamic": False,
    "date_detection": False,
    "dynamic_templates": [
        {
            "metadata_strings": {
                "path_match": "metadata.*",
                "match_mapping_type": "string",
                "mapping": {"type": "keyword", "ignore_above": 1024},
            }
        }
    ],
    "properties": {
        "connector_id": {"type": "keyword"},
        "external_id": {"type": "keyword"},
        "content_hash": {"type": "keyword"},
        "title": {"type": "text"},
        "text": {"type": "text"},
        "url": {"type": "keyword"},
        "updated_at": {"type": "date"},
        "metadata": {"type": "object", "dynamic": True},
        "payload": {"type": "object", "enabled": False},
        "indexed_at": {"type": "date"},
    },
}

_KEYWORD = ("keyword", frozenset({"keyword", "wildcard", "constant_keyword"}))
_TEXT = ("text", frozenset({"text", "match_only_text"}))
_DATE = ("date", frozenset({"date", "date_nanos"}))
_OBJECT = ("object", frozenset({"object", "nested", "flattened", "flat_object"}))
#: What each field of the source may be mapped as in an existing index: its name in messages
#: and the types that take what the indexer writes there.
ACCEPTED_TYPES: Mapping[str, tuple[str, frozenset[str]]] = {
    "connector_id": _KEYWORD,
    "external_id": _KEYWORD,
    "content_hash": _KEYWORD,
    "title": _TEXT,
    "text": _TEXT,
    "url": _KEYWORD,
    "updated_at": _DATE,
    "metadata": _OBJECT,
    "payload": ("object with enabled: false", frozenset({"object"})),
    "indexed_at": _DATE,
}


def _type_of(field: Mapping[str, Any]) -> str:
    # An object field with sub-fields is shown without its type.
    kind = field.get("type")
    return kind if isinstance(kind, str) else "object"


def mapping_problems(answer: Any, index: str) -> list[str]:
    """What makes the index of a ``GET /{index}/_mapping`` answer unfit for the documents the
    indexer writes (``[]``: it fits): a field of :data:`ACCEPTED_TYPES` not mapped, or mapped
    as a type that does not take its values, and a ``payload`` that is parsed (only
    ``enabled: false`` keeps arbitrary records from breaking the mapping)."""
    if not isinstance(answer, Mapping) or not answer:
        return [f"unexpected answer to GET /{index}/_mapping"]
    problems: list[str] = []
    for name, entry in answer.items():
        # An alias answers under its indexes' own names: those are named.
        where = "" if name == index else f"{name}: "
        mappings = entry.get("mappings") if isinstance(entry, Mapping) else None
        props = mappings.get("properties") if isinstance(mappings, Mapping) else None
        props = props if isinstance(props, Mapping) else {}
        for field, (wanted, accepted) in ACCEPTED_TYPES.items():
            mapped = props.get(field)
            if not isinstance(mapped, Mapping):
                problems.append(f"{where}{field!r} is not mapped (needs {wanted})")
                continue
            kind = _type_of(mapped)
            if kind not in accepted:
                problems.append(f"{where}{field!r} is mapped as {kind} (needs {wanted})")
            elif field == "payload" and mapped.get("enabled") not in (False, "false"):
                problems.append(f"{where}'payload' is indexed (needs {wanted})")
    return problems
