"""A local OpenSearch / Elasticsearch write API: the target of the ``opensearch`` indexer.

No OpenSearch or Elasticsearch server runs on the test machines: this ``aiohttp.web`` server on
127.0.0.1 implements what the engines document for the calls an indexer makes, and the tests of
:mod:`syncd.indexers.opensearch` run against it, not against a real cluster. Written from the
public references, not from what syncd does:

- ``POST|PUT /_bulk``, ``POST|PUT /{index}/_bulk`` —
  https://elastic.co/docs/api/doc/elasticsearch/operation/operation-bulk-1,
  https://elastic.co/guide/en/elasticsearch/reference/7.1/docs-bulk.html,
  https://docs.opensearch.org/2.11/api-reference/document-apis/bulk: NDJSON
  (``Content-Type: application/x-ndjson``; ``application/json`` is accepted too), the last line
  ends with a newline (400 otherwise); actions ``index`` (create or replace), ``create`` (409
  ``version_conflict_engine_exception`` when the ``_id`` exists), ``delete`` (no source line;
  ``"result": "not_found"``, status 404, when absent); ``_id`` of at most 512 bytes (a longer
  one refuses the whole request: ``action_request_validation_exception``); the answer ``{"took",
  "errors", "items"}`` with one item per action in request order, each with its ``status`` and,
  when it failed, ``error.type`` / ``error.reason``; ``errors`` is true when an item has an
  ``error``. An index missing for ``index``/``create`` is created with dynamic
  mappings (``action.auto_create_index``, on by default; off: 404 ``index_not_found_exception``).
- ``PUT /{index}`` — https://www.elastic.co/guide/en/elasticsearch/reference/7.14/indices-create-index.html,
  https://docs.opensearch.org/docs/latest/api-reference/index-apis/create-index/: ``settings``,
  ``mappings``, ``aliases``; 400 ``resource_already_exists_exception`` for an existing index,
  400 ``invalid_index_name_exception`` for a name the engines refuse.
- ``GET /{index}/_mapping`` — https://www.elastic.co/guide/en/elasticsearch/reference/6.7/indices-get-mapping.html:
  ``{"<index>": {"mappings": {...}}}`` (see :mod:`tests.integration.searchmapping`).
- ``HEAD /{index}`` — https://www.elastic.co/guide/en/elasticsearch/reference/6.8/indices-exists.html:
  200 or 404, no body. ``DELETE /{index}`` drops an index.
- ``GET|HEAD /{index}/_doc/{id}`` — https://elastic.co/guide/en/elasticsearch/reference/8.18/docs-get.html:
  ``{"_index", "_id", "_version", "_seq_no", "_primary_term", "found": true, "_source"}``, or
  404 ``{"found": false}``; realtime (no refresh needed).
- Authentication — https://www.elastic.co/docs/api/elasticsearch/authentication:
  ``Authorization: Basic base64(user:password)``, ``ApiKey base64(id:api_key)``, ``Bearer
  <token>``; otherwise 401 ``security_exception`` with ``WWW-Authenticate``. The
  ``opensearch`` flavor has no API keys (its security plugin knows none) and answers a refused
  request with the plain text ``Unauthorized``.
- Rejected work — https://elastic.co/docs/troubleshoot/elasticsearch/rejected-requests: 429,
  ``es_rejected_execution_exception`` (``rejected_execution_exception`` on OpenSearch).

Errors have the engines' shape ``{"error": {"root_cause": [...], "type", "reason", ...},
"status": n}``. Scripting hooks for tests: :meth:`SearchServer.fail_items` (chosen ``_id``\\ s
answered with a status and error, e.g. 429 or 400 ``mapper_parsing_exception``, a number of
times), :meth:`SearchServer.fail_requests` (whole requests answered with a status),
:meth:`SearchServer.race_create` (the next ``PUT /{index}`` finds it created by another
writer). Every request is kept in :attr:`SearchServer.requests`.

Not modelled: the ``update`` action (answered 400 as an unknown action), shards, replicas and
refresh (every write is visible at once), routing, versions given by the client
(``if_seq_no``, ``version_type``), pipelines, aliases, data streams, ``require_alias``, search.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tests.integration.searchmapping import MappingError, index_source, mapping_error, shown

__all__ = ["RecordedRequest", "SearchServer"]

MAX_ID_BYTES = 512
_INDEX_NAME = re.compile(r'[^\\/*?"<>| ,#:A-Z]+')
_ACTIONS = ("index", "create", "delete")
_META = {
    "_index",
    "_id",
    "routing",
    "if_seq_no",
    "if_primary_term",
    "version",
    "version_type",
    "pipeline",
    "require_alias",
    "dynamic_templates",
    "retry_on_conflict",
}
_SHARDS = {"total": 2, "successful": 1, "failed": 0}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: bytes = field(repr=False)


@dataclass
class _Doc:
    source: Any
    version: int
    seq_no: int


@dataclass
class _Index:
    name: str
    mappings: dict[str, Any]
    settings: Mapping[str, Any] = field(default_factory=dict)
    uuid: str = field(default_factory=lambda: uuid.uuid4().hex[:22])
    docs: dict[str, _Doc] = field(default_factory=dict)
    seq_no: int = -1


@dataclass
class _ItemFailure:
    status: int
    error: dict[str, Any]
    remaining: int


@dataclass
class _RequestFailure:
    status: int
    remaining: int
    path: str | None
    headers: Mapping[str, str]


class _Refused(Exception):
    def __init__(self, status: int, kind: str, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status, self.error = status, {"type": kind, "reason": reason, **extra}


class SearchServer:
    """The scriptable engine (see the module docstring). ``flavor`` is ``"opensearch"`` or
    ``"elasticsearch"``; with ``users`` (name → password), ``api_keys`` (id → key) or
    ``tokens``, every request must authenticate."""

    def __init__(
        self,
        *,
        flavor: str = "opensearch",
        users: Mapping[str, str] | None = None,
        api_keys: Mapping[str, str] | None = None,
        tokens: Iterable[str] = (),
        auto_create_index: bool = True,
    ) -> None:
        if flavor not in ("opensearch", "elasticsearch"):
            raise ValueError(flavor)
        self.flavor = flavor
        self.users = dict(users or {})
        self.api_keys = dict(api_keys or {}) if flavor == "elasticsearch" else {}
        self.tokens = set(tokens)
        self.auto_create_index = auto_create_index
        self.indices: dict[str, _Index] = {}
        self.requests: list[RecordedRequest] = []
        self._item_failures: dict[str, list[_ItemFailure]] = {}
        self._request_failures: list[_RequestFailure] = []
        self._races: set[str] = set()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve on 127.0.0.1, on a free port (:attr:`url`)."""
        app = web.Application(client_max_size=200 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SearchServer:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # --- scripting and inspection -----------------------------------------------------------------

    def fail_items(
        self,
        ids: Iterable[str],
        *,
        status: int = 429,
        error_type: str | None = None,
        reason: str | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` bulk actions on each of ``ids`` (``_id``\\ s) with
        ``status`` and an error of ``error_type`` (429: the flavor's rejected-execution
        exception) — before anything is written."""
        kind = error_type or (self._rejected() if status == 429 else "mapper_parsing_exception")
        text = reason or (
            "rejected execution of coordinating operation" if status == 429 else "failed to parse"
        )
        for doc_id in ids:
            failure = _ItemFailure(status, {"type": kind, "reason": text}, times)
            self._item_failures.setdefault(doc_id, []).append(failure)

    def fail_requests(
        self,
        status: int,
        *,
        times: int = 1,
        path: str | None = "/_bulk",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests to ``path`` (any path: ``None``) with
        ``status`` (and ``headers``), before authentication."""
        self._request_failures.append(_RequestFailure(status, times, path, dict(headers or {})))

    def race_create(self, index: str) -> None:
        """The next ``PUT /{index}`` finds the index created (with the body it sends) by
        another writer just before: 400 ``resource_already_exists_exception``."""
        self._races.add(index)

    def create_index(self, name: str, mappings: Mapping[str, Any] | None = None) -> None:
        """Create an index directly (test setup)."""
        self.indices[name] = _Index(name, dict(mappings or {}))

    def mapping(self, index: str) -> dict[str, Any]:
        """The index's mapping as ``GET /{index}/_mapping`` shows it."""
        return shown(self.indices[index].mappings)

    def document(self, index: str, doc_id: str) -> Any:
        """The ``_source`` of a document, or ``None``."""
        doc = self.indices[index].docs.get(doc_id) if index in self.indices else None
        return None if doc is None else doc.source

    def documents(self, index: str) -> dict[str, Any]:
        """Every document of ``index``: ``_id`` → ``_source``."""
        target = self.indices.get(index)
        return {} if target is None else {i: d.source for i, d in target.docs.items()}

    def version(self, index: str, doc_id: str) -> int | None:
        doc = self.indices[index].docs.get(doc_id)
        return None if doc is None else doc.version

    def bulk_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/_bulk")]

    # --- dispatch ---------------------------------------------------------------------------------

    def _rejected(self) -> str:
        if self.flavor == "elasticsearch":
            return "es_rejected_execution_exception"
        return "rejected_execution_exception"

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers), body
            )
        )
        scripted = self._scripted(request.path)
        if scripted is not None:
            return scripted
        refused = self._authenticate(request)
        if refused is not None:
            return refused
        parts = [unquote(p) for p in request.rel_url.raw_path.strip("/").split("/")]
        method = request.method
        try:
            return self._route(method, parts, request, body)
        except _Refused as exc:
            return self._error(exc.status, exc.error)

    def _route(
        self, method: str, parts: list[str], request: web.Request, body: bytes
    ) -> web.StreamResponse:
        if parts == ["_bulk"] and method in ("POST", "PUT"):
            return self._bulk(None, request, body)
        if len(parts) == 2 and parts[1] == "_bulk" and method in ("POST", "PUT"):
            return self._bulk(parts[0], request, body)
        if len(parts) == 1 and parts[0] and not parts[0].startswith("_"):
            name = parts[0]
            if method == "HEAD":
                return web.Response(status=200 if name in self.indices else 404)
            if method == "PUT":
                return self._create(name, body)
            if method == "DELETE":
                self._index(name)
                del self.indices[name]
                return self._json({"acknowledged": True})
        if len(parts) == 2 and parts[1] == "_mapping" and method == "GET":
            target = self._index(parts[0])
            return self._json({target.name: {"mappings": shown(target.mappings)}})
        if len(parts) == 3 and parts[1] == "_doc" and method in ("GET", "HEAD"):
            return self._get(self._index(parts[0]), parts[2], head=method == "HEAD")
        reason = f"no handler found for uri [{request.path}] and method [{method}]"
        return self._json({"error": reason, "status": 400}, status=400)

    def _scripted(self, path: str) -> web.Response | None:
        for failure in self._request_failures:
            if failure.remaining > 0 and failure.path in (None, path):
                failure.remaining -= 1
                error = {"type": "status_exception", "reason": f"scripted {failure.status}"}
                if failure.status == 429:
                    error = {"type": self._rejected(), "reason": "rejected execution"}
                return self._error(failure.status, error, headers=failure.headers)
        return None

    def _authenticate(self, request: web.Request) -> web.Response | None:
        if not (self.users or self.api_keys or self.tokens):
            return None
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        scheme = scheme.lower()
        who: str | None = None
        if scheme == "basic" or (scheme == "apikey" and self.api_keys):
            try:
                name, _, secret = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                name = secret = ""
            known = self.users if scheme == "basic" else self.api_keys
            if name in known and secrets.compare_digest(known[name], secret):
                return None
            who = name if scheme == "basic" else None
        elif scheme == "bearer" and value in self.tokens:
            return None
        if self.flavor == "opensearch":
            headers = {"WWW-Authenticate": 'Basic realm="OpenSearch Security"'}
            return web.Response(status=401, text="Unauthorized", headers=headers)
        if not scheme:
            reason = f"missing authentication credentials for REST request [{request.path}]"
        elif who:
            reason = f"unable to authenticate user [{who}] for REST request [{request.path}]"
        else:
            reason = (
                "unable to authenticate with provided credentials and anonymous access is not "
                "allowed for this request"
            )
        challenge = ['Basic realm="security" charset="UTF-8"', 'Bearer realm="security"', "ApiKey"]
        error: dict[str, Any] = {"type": "security_exception", "reason": reason}
        error["header"] = {"WWW-Authenticate": challenge}
        response = self._error(401, error)
        for line in challenge:
            response.headers.add("WWW-Authenticate", line)
        return response

    # --- answers ----------------------------------------------------------------------------------

    def _json(self, body: Any, status: int = 200) -> web.Response:
        response = web.json_response(body, status=status)
        if self.flavor == "elasticsearch":
            response.headers["X-elastic-product"] = "Elasticsearch"
        return response

    def _error(
        self, status: int, error: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> web.Response:
        root = {k: v for k, v in error.items() if k != "caused_by"}
        response = self._json({"error": {"root_cause": [root], **error}, "status": status}, status)
        response.headers.update(headers or {})
        return response

    def _missing(self, name: str) -> _Refused:
        return _Refused(
            404,
            "index_not_found_exception",
            f"no such index [{name}]",
            index=name,
            index_uuid="_na_",
            **{"resource.type": "index_or_alias", "resource.id": name},
        )

    def _index(self, name: str) -> _Index:
        target = self.indices.get(name)
        if target is None:
            raise self._missing(name)
        return target

    # --- indices and documents --------------------------------------------------------------------

    def _create(self, name: str, body: bytes) -> web.Response:
        if name.lower() != name:
            raise _Refused(
                400,
                "invalid_index_name_exception",
                f"Invalid index name [{name}], must be lowercase",
                index=name,
            )
        if not _INDEX_NAME.fullmatch(name) or name[0] in "-_+" or name in (".", ".."):
            raise _Refused(
                400, "invalid_index_name_exception", f"Invalid index name [{name}]", index=name
            )
        try:
            spec = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            raise _Refused(400, "parse_exception", f"request body is required: {exc}") from None
        if not isinstance(spec, dict):
            raise _Refused(400, "parse_exception", "request body must be an object")
        mappings = spec.get("mappings", {})
        if (problem := mapping_error(mappings, self.flavor)) is not None:
            raise _Refused(400, problem.type, problem.reason)
        if name in self._races:
            self._races.discard(name)
            self.indices.setdefault(name, _Index(name, dict(mappings), spec.get("settings", {})))
        if name in self.indices:
            existing = self.indices[name]
            raise _Refused(
                400,
                "resource_already_exists_exception",
                f"index [{name}/{existing.uuid}] already exists",
                index_uuid=existing.uuid,
                index=name,
            )
        self.indices[name] = _Index(name, dict(mappings), spec.get("settings", {}))
        return self._json({"acknowledged": True, "shards_acknowledged": True, "index": name})

    def _get(self, target: _Index, doc_id: str, *, head: bool) -> web.Response:
        doc = target.docs.get(doc_id)
        if head:
            return web.Response(status=200 if doc else 404)
        if doc is None:
            return self._json({"_index": target.name, "_id": doc_id, "found": False}, 404)
        return self._json(
            {
                "_index": target.name,
                "_id": doc_id,
                "_version": doc.version,
                "_seq_no": doc.seq_no,
                "_primary_term": 1,
                "found": True,
                "_source": doc.source,
            }
        )

    # --- _bulk ------------------------------------------------------------------------------------

    def _bulk(self, default_index: str | None, request: web.Request, body: bytes) -> web.Response:
        started = time.monotonic()
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype not in ("application/x-ndjson", "application/json"):
            reason = (
                f"Content-Type header [{request.headers.get('Content-Type', '')}] is not supported"
            )
            return self._json({"error": reason, "status": 406}, status=406)
        operations = self._parse_bulk(body, default_index)
        items = [self._operation(*op) for op in operations]
        took = int((time.monotonic() - started) * 1000)
        errors = any("error" in next(iter(item.values())) for item in items)
        return self._json({"took": took, "errors": errors, "items": items})

    def _parse_bulk(
        self, body: bytes, default_index: str | None
    ) -> list[tuple[str, str, str | None, Any]]:
        """(action, index, _id, source) of each action; a malformed request is refused whole
        (400), as the engines refuse it before running any action."""
        if not body.strip():
            raise _Refused(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: no requests added;",
            )
        if not body.endswith(b"\n"):
            raise _Refused(
                400,
                "illegal_argument_exception",
                "The bulk request must be terminated by a newline [\\n]",
            )
        lines = [line.rstrip(b"\r") for line in body.split(b"\n")[:-1]]
        out: list[tuple[str, str, str | None, Any]] = []
        problems: list[str] = []
        number = 0
        while number < len(lines):
            line, number = lines[number], number + 1
            if not line.strip():
                continue
            try:
                action_line = json.loads(line)
            except ValueError:
                action_line = None
            if not isinstance(action_line, dict) or len(action_line) != 1:
                raise _Refused(
                    400,
                    "illegal_argument_exception",
                    f"Malformed action/metadata line [{number}], expected "
                    "START_OBJECT or END_OBJECT",
                )
            ((action, meta),) = action_line.items()
            if action not in _ACTIONS:
                raise _Refused(
                    400,
                    "illegal_argument_exception",
                    f"Malformed action/metadata line [{number}], expected field "
                    f"[create], [delete] or [index] but found [{action}]",
                )
            meta = meta if isinstance(meta, dict) else {}
            unknown = sorted(set(meta) - _META)
            if unknown:
                raise _Refused(
                    400,
                    "illegal_argument_exception",
                    f"Action/metadata line [{number}] contains an unknown parameter [{unknown[0]}]",
                )
            source: Any = None
            if action != "delete":
                if number >= len(lines):
                    raise _Refused(
                        400,
                        "illegal_argument_exception",
                        f"Malformed action/metadata line [{number}]: no source line follows",
                    )
                raw, number = lines[number], number + 1
                try:
                    source = json.loads(raw)
                except ValueError:
                    source = _Unparsable(raw)
            index = meta.get("_index", default_index)
            doc_id = meta.get("_id")
            position = len(out) + 1
            if not isinstance(index, str) or not index:
                problems.append(f"{position}: index is missing;")
            if doc_id is None and action == "delete":
                problems.append(f"{position}: id is missing;")
            if isinstance(doc_id, str) and len(doc_id.encode()) > MAX_ID_BYTES:
                problems.append(
                    f"{position}: id [{doc_id}] is too long, must be no longer than 512 bytes "
                    f"but was: {len(doc_id.encode())};"
                )
            out.append((action, str(index), None if doc_id is None else str(doc_id), source))
        if problems:
            raise _Refused(
                400,
                "action_request_validation_exception",
                "Validation Failed: " + " ".join(problems),
            )
        return out

    def _operation(self, action: str, name: str, doc_id: str | None, source: Any) -> dict[str, Any]:
        doc_id = doc_id if doc_id is not None else uuid.uuid4().hex[:20]
        head: dict[str, Any] = {"_index": name, "_id": doc_id}
        scripted = self._item_failures.get(doc_id, [])
        for failure in scripted:
            if failure.remaining > 0:
                failure.remaining -= 1
                return {action: {**head, "status": failure.status, "error": dict(failure.error)}}
        target = self.indices.get(name)
        if target is None:
            if action == "delete" or not self.auto_create_index:
                return {action: {**head, "status": 404, "error": self._missing(name).error}}
            target = self.indices[name] = _Index(name, {})
        try:
            return {action: {**head, **self._write(target, action, doc_id, source)}}
        except MappingError as exc:
            error = {**exc.error(), "index_uuid": target.uuid, "shard": "0", "index": name}
            return {action: {**head, "status": 400, "error": error}}
        except _Refused as exc:
            error = {**exc.error, "index_uuid": target.uuid, "shard": "0", "index": name}
            return {action: {**head, "status": exc.status, "error": error}}

    def _write(self, target: _Index, action: str, doc_id: str, source: Any) -> dict[str, Any]:
        existing = target.docs.get(doc_id)
        if action == "delete":
            if existing is None:
                return self._result(target, "not_found", 404, 1)
            del target.docs[doc_id]
            return self._result(target, "deleted", 200, existing.version + 1)
        if isinstance(source, _Unparsable):
            raise MappingError(
                "mapper_parsing_exception",
                "failed to parse",
                {"type": "json_parse_exception", "reason": "Unexpected character"},
            )
        if action == "create" and existing is not None:
            raise _Refused(
                409,
                "version_conflict_engine_exception",
                f"[{doc_id}]: version conflict, document already exists (current "
                f"version [{existing.version}])",
            )
        target.mappings = index_source(target.mappings, source, doc_id)
        version = 1 if existing is None else existing.version + 1
        result = self._result(
            target,
            "created" if existing is None else "updated",
            201 if existing is None else 200,
            version,
        )
        target.docs[doc_id] = _Doc(source, version, result["_seq_no"])
        return result

    def _result(self, target: _Index, result: str, status: int, version: int) -> dict[str, Any]:
        target.seq_no += 1
        return {
            "_version": version,
            "result": result,
            "_shards": dict(_SHARDS),
            "_seq_no": target.seq_no,
            "_primary_term": 1,
            "status": status,
        }


@dataclass(frozen=True)
class _Unparsable:
    raw: bytes
