"""A local Elasticsearch (or OpenSearch) search API over one index.

Written from Elastic's public reference, not from what syncd does:

- https://www.elastic.co/guide/en/elasticsearch/reference/current/paginate-search-results.html
  — ``search_after`` with the ``sort`` values of the last hit; a tiebreaker field with one
  unique value per document; ``from`` + ``size`` may not pass ``index.max_result_window``
  (10,000 by default).
- https://www.elastic.co/guide/en/elasticsearch/reference/current/search-search.html — ``GET``
  or ``POST /<target>/_search``; ``size`` (default 10), ``from``, ``sort``,
  ``track_total_hits`` (default 10,000: ``hits.total.relation`` is ``gte`` past it),
  ``_source``; URL parameters win over the body; the response ``{"took", "timed_out",
  "_shards", "hits": {"total": {"value", "relation"}, "max_score", "hits": [{"_index",
  "_id", "_score", "_source", "sort"}]}}``.
- https://www.elastic.co/guide/en/elasticsearch/reference/current/sort-search-results.html —
  ``sort`` as ``"field"``, ``{"field": "asc"}`` or ``{"field": {"order": "desc"}}``; a
  ``date`` field sorts (and reports its ``sort`` value) as epoch milliseconds unless a
  ``format`` is given; text fields cannot be sorted on.
- https://www.elastic.co/docs/api/doc/elasticsearch/authentication — ``Authorization: ApiKey
  <base64(id:api_key)>`` or ``Authorization: Basic <base64(user:password)>``.

Usage::

    async with ElasticsearchServer(records=237) as api:
        # POST f"{api.url}/{api.index}/_search" with {"Authorization": api.api_key_header}
        # and {"size": 100, "sort": [{"updated_at": "asc"}, {"id": "asc"}],
        #      "search_after": [1704067200000, "TCK-000001"]}
        ...
        api.touch(["TCK-000010"])  # its updated_at moves past every other document

Behaviour:

- Errors have Elasticsearch's shape ``{"error": {"root_cause": [{"type", "reason"}], "type",
  "reason", ...}, "status": 400}``. Those raised on the shard (``search_after`` of the wrong
  arity: "search_after has 1 value(s) but sort has 2."; a result window too large; sorting on
  an unmapped or text field; an unparsable date) come wrapped in
  ``search_phase_execution_exception`` "all shards failed", with the cause in ``root_cause``,
  ``failed_shards`` and ``caused_by``.
- The index has one shard; documents keep index order (``_doc``), an updated document is
  reindexed at the end. The mapping: ``id``/``status`` keyword, ``title`` text,
  ``created_at``/``updated_at`` date, ``comments`` long.
- Queries: ``match_all``, ``match_none``, ``range`` (``gt``/``gte``/``lt``/``lte``; dates as
  ISO 8601, epoch milliseconds, ``now`` or ``now-<n><unit>``), ``term``, ``terms``, ``ids``,
  ``exists``, ``match`` (any word) and ``bool`` (``must``, ``filter``, ``should``,
  ``must_not``). Every matching document scores 1.0; a field sort reports ``_score: null``.
- Every response carries ``X-elastic-product: Elasticsearch`` (official 8.x clients check it).

Tests can make requests fail (:meth:`ElasticsearchServer.fail_next`, a stand-in for an
outage): answered with Elasticsearch's error shape.

Not modelled: point in time (``pit``), scroll, aggregations, ``q=`` query strings (answered
400), relevance scoring, ``missing``/``unmapped_type`` in sorts.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from tests.integration.loopback import LoopbackServer
from tests.integration.realapis.faults import Faults

__all__ = ["ElasticsearchServer", "RecordedRequest", "make_documents"]

MAX_RESULT_WINDOW = 10_000
DEFAULT_TRACK_TOTAL_HITS = 10_000
_BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
_MAPPING = {
    "id": "keyword",
    "title": "text",
    "status": "keyword",
    "created_at": "date",
    "updated_at": "date",
    "comments": "long",
}
_DATE_FORMAT = "strict_date_optional_time||epoch_millis"
_NODE = "x8u0KJ4sTRe4f0QUsv2R5g"
_PRODUCT = {"X-elastic-product": "Elasticsearch"}
_UNITS = {
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "H": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def make_documents(count: int, *, start: int = 0) -> list[dict[str, Any]]:
    """``count`` documents (their ``_source``), ids ``TCK-000001`` on, one minute apart."""
    documents = []
    for i in range(start, start + count):
        moment = _iso(_BASE_TIME + timedelta(minutes=i))
        documents.append(
            {
                "id": f"TCK-{i + 1:06d}",
                "title": f"Ticket {i + 1} about the printer",
                "status": ("open", "pending", "closed")[i % 3],
                "created_at": moment,
                "updated_at": moment,
                "comments": i % 5,
            }
        )
    return documents


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (``body``: the parsed JSON, or ``None``)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


class _SearchError(Exception):
    """An Elasticsearch error; ``shard`` ones are wrapped in a search phase failure."""

    def __init__(
        self,
        status: int,
        kind: str,
        reason: str,
        *,
        shard: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.kind = kind
        self.reason = reason
        self.shard = shard
        self.extra = dict(extra or {})


def _bad_request(reason: str, *, shard: bool = False) -> _SearchError:
    return _SearchError(400, "illegal_argument_exception", reason, shard=shard)


def _parse_millis(value: Any, name: str) -> int:
    """A date as Elasticsearch reads it for a ``date`` field: epoch milliseconds, ISO 8601,
    ``now`` or ``now±<n><unit>``; otherwise a shard-level ``parse_exception``."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int | float):
        return int(value)
    text = str(value)
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    math = re.fullmatch(r"now(?:([+-])(\d+)([smhHdw]))?", text)
    if math:
        moment = datetime.now(UTC)
        if math.group(1):
            step = _UNITS[math.group(3)] * int(math.group(2))
            moment = moment + step if math.group(1) == "+" else moment - step
        return int(moment.timestamp() * 1000)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        reason = f"failed to parse date field [{text}] with format [{_DATE_FORMAT}]"
        raise _SearchError(400, "parse_exception", f"{reason}: [{reason}]", shard=True) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def _field_value(source: Mapping[str, Any], name: str) -> Any:
    """A document's value for ``name`` as the index stores it (dates in milliseconds)."""
    value = source.get(name)
    if value is None:
        return None
    kind = _MAPPING.get(name)
    if kind == "date":
        return _parse_millis(value, name)
    if kind == "long":
        return int(value)
    return str(value)


@dataclass(frozen=True)
class _Sort:
    field: str
    descending: bool
    format: str | None = None


@dataclass(frozen=True)
class _Doc:
    position: int
    source: Mapping[str, Any]


class ElasticsearchServer(LoopbackServer):
    """One Elasticsearch index behind ``/{index}/_search`` (see module doc)."""

    def __init__(
        self,
        records: int | Sequence[Mapping[str, Any]] = 0,
        *,
        index: str = "tickets",
        username: str = "elastic",
        password: str = "changeme",
        api_key_id: str = "VuaCfGcBCdbkQm-e5aOx",
        api_key: str = "ui2lp2axTNmsyakw9tvNnw",
        max_result_window: int = MAX_RESULT_WINDOW,
    ) -> None:
        self.index = index
        self.username = username
        self.password = password
        self.api_key_id = api_key_id
        self.api_key = api_key
        self.max_result_window = max_result_window
        self.requests: list[RecordedRequest] = []
        self._faults = Faults()
        self._records: list[dict[str, Any]] = []
        self.set_records(records)

    # --- lifecycle ---------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        for path in ("/_search", "/{index}/_search"):
            app.router.add_get(path, self._search)
            app.router.add_post(path, self._search)

    @property
    def search_url(self) -> str:
        """``{url}/{index}/_search``."""
        return f"{self.url}/{self.index}/_search"

    @property
    def api_key_header(self) -> str:
        """The ``Authorization`` value for the API key: ``ApiKey base64(id:api_key)``."""
        raw = f"{self.api_key_id}:{self.api_key}".encode()
        return "ApiKey " + base64.b64encode(raw).decode()

    @property
    def basic_auth_header(self) -> str:
        """The ``Authorization`` value for the user: ``Basic base64(user:password)``."""
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    # --- records -----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every document's ``_source``, in index order (copies)."""
        return [dict(r) for r in self._records]

    def set_records(self, records: int | Sequence[Mapping[str, Any]]) -> None:
        """Index ``records`` (``_source`` dicts with an ``id``) in place of the current ones
        (an int generates that many with :func:`make_documents`)."""
        generated = make_documents(records) if isinstance(records, int) else records
        self._records = [dict(r) for r in generated]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Index ``count`` new documents, stamped after every existing one."""
        numbers = [int(str(r["id"]).rpartition("-")[2]) for r in self._records]
        added = make_documents(count, start=max(numbers, default=0))
        latest = self._latest()
        for offset, document in enumerate(added, start=1):
            document["created_at"] = document["updated_at"] = _iso(
                latest + timedelta(minutes=offset)
            )
        self._records.extend(added)
        return [dict(d) for d in added]

    def touch(self, ids: Iterable[str]) -> list[dict[str, Any]]:
        """Update the documents ``ids``: each gets an ``updated_at`` one minute after the
        latest one, in the order given, and is reindexed (it moves to the end of ``_doc``
        order)."""
        wanted = list(ids)
        latest = self._latest()
        touched = []
        for offset, ident in enumerate(wanted, start=1):
            document = next(r for r in self._records if r["id"] == ident)
            self._records.remove(document)
            document["updated_at"] = _iso(latest + timedelta(minutes=offset))
            document["comments"] = int(document.get("comments", 0)) + 1
            self._records.append(document)
            touched.append(dict(document))
        return touched

    def fail_next(self, status: int = 500, times: int = 1, *, after: int = 0) -> None:
        """A test hook, no part of the API: answer ``times`` requests with ``status`` and
        Elasticsearch's error shape, after serving the next ``after`` (see :mod:`.faults`)."""
        self._faults.arm(status, times, after=after)

    def _latest(self) -> datetime:
        stamps = [_parse_millis(r["updated_at"], "updated_at") for r in self._records]
        stamps += [_parse_millis(r["created_at"], "created_at") for r in self._records]
        return datetime.fromtimestamp(max(stamps, default=0) / 1000, UTC)

    # --- handler -----------------------------------------------------------------------

    async def _search(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        raw = await request.read()
        body: Any = None
        parse_failure = None
        if raw.strip():
            try:
                body = json.loads(raw)
            except ValueError as exc:
                parse_failure = str(exc)
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers), body
            )
        )
        if (denied := self._authenticate(request)) is not None:
            return denied
        try:
            if (status := self._faults.take()) is not None:
                raise _SearchError(status, "exception", "Internal error (scripted).")
            included = self._check_target(request.match_info.get("index"))
            if parse_failure is not None:
                raise _SearchError(400, "x_content_parse_exception", parse_failure)
            if body is None:
                body = {}
            if not isinstance(body, dict):
                raise _SearchError(
                    400, "parsing_exception", "Unknown key for a VALUE_STRING in [query]."
                )
            answer = self._run(body, request.query, self._records if included else [])
        except _SearchError as failed:
            return self._error(failed)
        answer = {"took": int((time.monotonic() - started) * 1000), **answer}
        return web.json_response(answer, headers=_PRODUCT)

    def _authenticate(self, request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization", "")
        scheme, _, credential = header.partition(" ")
        if scheme.lower() == "apikey" and header.strip() == self.api_key_header:
            return None
        if scheme.lower() == "basic" and header.strip() == self.basic_auth_header:
            return None
        if not header:
            reason = f"missing authentication credentials for REST request [{request.path}]"
        elif scheme.lower() == "basic":
            try:
                user = base64.b64decode(credential).decode().partition(":")[0]
            except ValueError:
                user = ""
            reason = f"unable to authenticate user [{user}] for REST request [{request.path}]"
        else:
            reason = (
                "unable to authenticate with provided credentials and anonymous access is "
                "not allowed for this request"
            )
        challenge = ['Basic realm="security", charset="UTF-8"', "ApiKey"]
        cause = {
            "type": "security_exception",
            "reason": reason,
            "header": {"WWW-Authenticate": challenge},
        }
        headers: CIMultiDict[str] = CIMultiDict(_PRODUCT)
        for value in challenge:
            headers.add("WWW-Authenticate", value)
        return web.json_response(
            {"error": {"root_cause": [cause], **cause}, "status": 401},
            status=401,
            headers=headers,
        )

    def _check_target(self, target: str | None) -> bool:
        """Whether the target names this index; a missing concrete name is a 404 (a
        wildcard that matches nothing is not an error, it searches nothing)."""
        included = False
        for name in (target or "_all").split(","):
            if name in ("_all", self.index) or fnmatch.fnmatchcase(self.index, name):
                included = True
                continue
            if "*" in name:
                continue
            raise _SearchError(
                404,
                "index_not_found_exception",
                f"no such index [{name}]",
                extra={
                    "resource.type": "index_or_alias",
                    "resource.id": name,
                    "index_uuid": "_na_",
                    "index": name,
                },
            )
        return included

    def _error(self, failed: _SearchError) -> web.Response:
        cause = {"type": failed.kind, "reason": failed.reason, **failed.extra}
        error: dict[str, Any]
        if failed.shard:
            error = {
                "root_cause": [cause],
                "type": "search_phase_execution_exception",
                "reason": "all shards failed",
                "phase": "query",
                "grouped": True,
                "failed_shards": [
                    {"shard": 0, "index": self.index, "node": _NODE, "reason": cause}
                ],
                "caused_by": cause,
            }
        else:
            error = {"root_cause": [cause], **cause}
        return web.json_response(
            {"error": error, "status": failed.status}, status=failed.status, headers=_PRODUCT
        )

    def _run(
        self,
        body: Mapping[str, Any],
        params: Mapping[str, str],
        records: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        if "q" in params:
            raise _bad_request("this fixture does not model the [q] URL parameter")
        size = _integer(params.get("size", body.get("size", 10)), "size")
        offset = _integer(params.get("from", body.get("from", 0)), "from")
        sorts = _parse_sort(_url_sort(params["sort"]) if "sort" in params else body.get("sort"))
        search_after = body.get("search_after")
        if "search_after" in body and not isinstance(search_after, list):
            raise _SearchError(
                400,
                "parsing_exception",
                f"Unknown key for a {_token_name(search_after)} in [search_after].",
            )
        track: Any = body.get("track_total_hits", DEFAULT_TRACK_TOTAL_HITS)
        if "track_total_hits" in params:
            raw = params["track_total_hits"]
            track = raw == "true" if raw in ("true", "false") else _integer(raw, "track_total_hits")
        source_filter: Any = body.get("_source", True)
        if "_source" in params:
            raw = params["_source"]
            source_filter = raw == "true" if raw in ("true", "false") else raw.split(",")

        if search_after is not None and offset > 0:
            raise _SearchError(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: `from` parameter must be set to 0 when "
                "`search_after` is used.;",
            )
        if offset + size > self.max_result_window:
            raise _bad_request(
                "Result window is too large, from + size must be less than or equal to: "
                f"[{self.max_result_window}] but was [{offset + size}]. See the scroll api "
                "for a more efficient way to request large data sets. This limit can be set "
                "by changing the [index.max_result_window] index level setting.",
                shard=True,
            )
        matches = _compile(body.get("query"))
        for sort in sorts:
            _check_sortable(sort.field)
        docs = [_Doc(n, source) for n, source in enumerate(records) if matches(source)]
        # Without a sort: by score (all equal here), then index order.
        order = sorts or [_Sort("_score", True), _Sort("_doc", False)]
        keyed: list[tuple[list[Any], _Doc]] = [(_values(d, order), d) for d in docs]

        def by_values(a: tuple[list[Any], _Doc], b: tuple[list[Any], _Doc]) -> int:
            return _compare(a[0], b[0], order)

        keyed.sort(key=functools.cmp_to_key(by_values))
        docs = [d for _, d in keyed]
        total = len(docs)  # every match counts: search_after only moves the page
        scored = not sorts or any(s.field == "_score" for s in sorts)
        if search_after is not None:
            if not sorts:
                raise _bad_request("Sort must contain at least one field.", shard=True)
            if len(search_after) != len(sorts):
                raise _bad_request(
                    f"search_after has {len(search_after)} value(s) but sort has {len(sorts)}.",
                    shard=True,
                )
            mark = [_after_value(v, s.field) for v, s in zip(search_after, sorts, strict=True)]
            docs = [d for d in docs if _compare(_values(d, sorts), mark, sorts) > 0]
        page = docs[offset : offset + size]
        hits = []
        for doc in page:
            hit: dict[str, Any] = {
                "_index": self.index,
                "_id": str(doc.source["id"]),
                "_score": 1.0 if scored else None,
            }
            filtered = _filter_source(doc.source, source_filter)
            if filtered is not None:
                hit["_source"] = filtered
            if sorts:
                hit["sort"] = [
                    _reported(v, s) for v, s in zip(_values(doc, sorts), sorts, strict=True)
                ]
            hits.append(hit)
        result: dict[str, Any] = {}
        if track is not False:
            limit = total if track is True else int(track)
            result["total"] = (
                {"value": limit, "relation": "gte"}
                if total > limit
                else {"value": total, "relation": "eq"}
            )
        result["max_score"] = 1.0 if scored and page else None
        result["hits"] = hits
        return {
            "timed_out": False,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": result,
        }


# --- request parsing ---------------------------------------------------------------------


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _bad_request(f"[{name}] must be an integer, found [{value}]")
    if isinstance(value, str):
        if not re.fullmatch(r"-?\d+", value):
            raise _bad_request(f"Failed to parse int parameter [{name}] with value [{value}]")
        value = int(value)
    if value < 0:
        raise _bad_request(f"[{name}] parameter cannot be negative, found [{value}]")
    return int(value)


def _url_sort(raw: str) -> list[Any]:
    """``sort=updated_at:asc,id:desc`` as the body form."""
    items: list[Any] = []
    for part in raw.split(","):
        name, _, order = part.partition(":")
        items.append({name: order} if order else name)
    return items


def _parse_sort(spec: Any) -> list[_Sort]:
    if spec is None:
        return []
    sorts = []
    for item in spec if isinstance(spec, list) else [spec]:
        if isinstance(item, str):
            sorts.append(_Sort(item, item == "_score"))
            continue
        if not isinstance(item, dict) or len(item) != 1:
            raise _SearchError(400, "parsing_exception", f"malformed sort format, [{item}]")
        ((name, how),) = item.items()
        fmt = None
        if isinstance(how, dict):
            order, fmt = how.get("order", "desc" if name == "_score" else "asc"), how.get("format")
        else:
            order = how
        if order not in ("asc", "desc"):
            raise _bad_request(f"Unknown SortOrder [{order}]")
        sorts.append(_Sort(name, order == "desc", fmt))
    return sorts


def _token_name(value: Any) -> str:
    """The JSON token Elasticsearch names in parse errors."""
    if value is None:
        return "VALUE_NULL"
    if isinstance(value, bool):
        return "VALUE_BOOLEAN"
    if isinstance(value, int | float):
        return "VALUE_NUMBER"
    return "VALUE_STRING" if isinstance(value, str) else "START_OBJECT"


def _check_sortable(name: str) -> None:
    if name in ("_score", "_doc"):
        return
    if name == "_id":
        raise _bad_request(
            "Fielddata access on the _id field is disallowed, you can re-enable it by updating "
            "the dynamic cluster setting: indices.id_field_data.enabled",
            shard=True,
        )
    kind = _MAPPING.get(name)
    if kind is None:
        raise _SearchError(
            400,
            "query_shard_exception",
            f"No mapping found for [{name}] in order to sort on",
            shard=True,
        )
    if kind == "text":
        raise _bad_request(
            "Text fields are not optimised for operations that require per-document field "
            "data like aggregations and sorting, so these operations are disabled by default. "
            f"Please use a keyword field instead. Alternatively, set fielddata=true on [{name}] "
            "in order to load field data by uninverting the inverted index. Note that this "
            "can use significant memory.",
            shard=True,
        )


def _values(doc: _Doc, sorts: Sequence[_Sort]) -> list[Any]:
    values: list[Any] = []
    for sort in sorts:
        if sort.field == "_score":
            values.append(1.0)
        elif sort.field == "_doc":
            values.append(doc.position)
        else:
            values.append(_field_value(doc.source, sort.field))
    return values


def _after_value(value: Any, name: str) -> Any:
    """A ``search_after`` value in the field's own terms."""
    if name == "_score":
        return float(value)
    if name == "_doc":
        return int(value)
    kind = _MAPPING.get(name)
    if kind == "date":
        return _parse_millis(value, name)
    if kind == "long":
        try:
            return int(value)
        except (TypeError, ValueError):
            raise _bad_request(f'For input string: "{value}"', shard=True) from None
    return str(value)


def _reported(value: Any, sort: _Sort) -> Any:
    if sort.format is not None and _MAPPING.get(sort.field) == "date":
        return _iso(datetime.fromtimestamp(value / 1000, UTC))
    return value


def _compare(left: Sequence[Any], right: Sequence[Any], sorts: Sequence[_Sort]) -> int:
    for a, b, sort in zip(left, right, sorts, strict=True):
        if a == b:
            continue
        smaller = a < b
        return (1 if smaller else -1) if sort.descending else (-1 if smaller else 1)
    return 0


def _filter_source(source: Mapping[str, Any], spec: Any) -> dict[str, Any] | None:
    if spec is False:
        return None
    if spec is True or spec is None:
        return dict(source)
    includes: list[str]
    excludes: list[str] = []
    if isinstance(spec, str):
        includes = [spec]
    elif isinstance(spec, list):
        includes = [str(s) for s in spec]
    elif isinstance(spec, dict):
        includes = [str(s) for s in spec.get("includes", spec.get("include")) or ["*"]]
        excludes = [str(s) for s in spec.get("excludes", spec.get("exclude")) or []]
    else:
        raise _SearchError(400, "parsing_exception", f"Unknown key for [_source]: [{spec}]")
    return {
        k: v
        for k, v in source.items()
        if any(fnmatch.fnmatchcase(k, p) for p in includes)
        and not any(fnmatch.fnmatchcase(k, p) for p in excludes)
    }


# --- queries -----------------------------------------------------------------------------

_Matcher = Callable[[Mapping[str, Any]], bool]


def _clauses(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _compile(query: Any) -> _Matcher:
    """A predicate for the query clause (see module doc for what is understood)."""
    if query is None:
        return lambda _source: True
    if not isinstance(query, dict) or len(query) != 1:
        raise _SearchError(
            400, "parsing_exception", "[_na] query malformed, no start_object after query name"
        )
    ((kind, spec),) = query.items()
    if kind == "match_all":
        return lambda _source: True
    if kind == "match_none":
        return lambda _source: False
    if kind == "bool" and isinstance(spec, dict):
        must = [_compile(c) for k in ("must", "filter") for c in _clauses(spec.get(k, []))]
        must_not = [_compile(c) for c in _clauses(spec.get("must_not", []))]
        should = [_compile(c) for c in _clauses(spec.get("should", []))]
        minimum = int(spec.get("minimum_should_match", 0 if must else 1 if should else 0))

        def boolean(source: Mapping[str, Any]) -> bool:
            return (
                all(m(source) for m in must)
                and not any(m(source) for m in must_not)
                and sum(1 for m in should if m(source)) >= minimum
            )

        return boolean
    if kind == "ids" and isinstance(spec, dict):
        wanted = {str(v) for v in spec.get("values", [])}
        return lambda source: str(source.get("id")) in wanted
    if kind == "exists" and isinstance(spec, dict):
        name = str(spec.get("field"))
        return lambda source: source.get(name) is not None
    if kind in ("range", "term", "terms", "match") and isinstance(spec, dict) and len(spec) == 1:
        ((name, condition),) = spec.items()
        return _field_query(kind, str(name), condition)
    raise _SearchError(400, "parsing_exception", f"unknown query [{kind}]")


def _field_query(kind: str, name: str, condition: Any) -> _Matcher:
    def stored(source: Mapping[str, Any]) -> Any:
        return _field_value(source, name)

    def typed(value: Any) -> Any:
        kind_of = _MAPPING.get(name)
        if kind_of == "date":
            return _parse_millis(value, name)
        if kind_of == "long":
            return int(value)
        return str(value)

    if kind == "range":
        if not isinstance(condition, dict):
            raise _SearchError(400, "parsing_exception", f"[range] query malformed for [{name}]")
        bounds = [
            (op, typed(condition[op])) for op in ("gt", "gte", "lt", "lte") if op in condition
        ]
        tests = {
            "gt": lambda v, b: v > b,
            "gte": lambda v, b: v >= b,
            "lt": lambda v, b: v < b,
            "lte": lambda v, b: v <= b,
        }

        def in_range(source: Mapping[str, Any]) -> bool:
            value = stored(source)
            return value is not None and all(tests[op](value, b) for op, b in bounds)

        return in_range
    if kind == "term":
        target = typed(condition.get("value") if isinstance(condition, dict) else condition)
        return lambda source: stored(source) == target
    if kind == "terms":
        targets = {typed(v) for v in _clauses(condition)}
        return lambda source: stored(source) in targets
    words = str(condition.get("query") if isinstance(condition, dict) else condition)
    wanted = set(words.lower().split())
    return lambda source: bool(wanted & set(str(source.get(name, "")).lower().split()))
