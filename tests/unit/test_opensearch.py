"""The pure parts of the ``opensearch`` indexer (syncd.indexers.opensearch.bulk): ``_id``
encoding, NDJSON bodies, per-item results, the mapping shape check; and its config model,
whose validation and JSON Schema agree."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from syncd.api.views import redact_indexer
from syncd.errors import ValidationError
from syncd.indexers.opensearch import opensearch_secrets
from syncd.indexers.opensearch.bulk import (
    INDEX_MAPPINGS,
    MAX_ERROR,
    MAX_ID_BYTES,
    ItemResult,
    Outcome,
    chunks,
    delete_lines,
    document_id,
    document_source,
    index_lines,
    item_results,
    mapping_problems,
)
from syncd.models import DocStatus, Document, DocumentFields, PaginatorSettings
from syncd.plugins import Registry
from syncd.schema import connector_file_schema
from syncd.schema.spec import parse_create
from tests.integration.searchmapping import shown

CID = "0190a1b2c3d4e5f60718293a4b"  # a connector id as syncd makes them (hexadecimal)
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def document(external_id: str = "a", **kw: Any) -> Document:
    kw.setdefault("payload", {"id": external_id})
    return Document(CID, external_id, DocStatus.RUNNING, "f" * 64, NOW, NOW, **kw)


# --- _id ----------------------------------------------------------------------------------


def test_the_id_is_the_connector_id_and_the_external_id() -> None:
    assert document_id(CID, "TCK-1") == f"{CID}:TCK-1"
    assert document_id(CID, "a:b/c#d") == f"{CID}:a:b/c#d"  # kept verbatim, separators and all
    assert document_id(CID, "") == f"{CID}:"


def test_an_id_past_512_bytes_is_a_hash_of_the_external_id() -> None:
    room = MAX_ID_BYTES - len(CID) - 1
    fits = "x" * room
    assert document_id(CID, fits) == f"{CID}:{fits}"
    assert len(document_id(CID, fits).encode()) == MAX_ID_BYTES
    long = "x" * (room + 1)
    digest = hashlib.sha256(long.encode()).hexdigest()
    assert document_id(CID, long) == f"{CID}#sha256:{digest}"
    assert len(document_id(CID, long).encode()) == len(CID) + 8 + 64
    # Counted in UTF-8 bytes, not characters: 2 bytes each.
    accented = "é" * (room // 2 + 1)
    assert document_id(CID, accented).startswith(f"{CID}#sha256:")
    assert document_id(CID, "é" * (room // 2)) == f"{CID}:{'é' * (room // 2)}"


def test_ids_cannot_collide() -> None:
    room = MAX_ID_BYTES - len(CID) - 1
    long = "y" * (room + 10)
    hashed = document_id(CID, long)
    # An external id spelled like the hashed form stays in the plain form: ':' tells them apart.
    spelled = hashed.removeprefix(f"{CID}#")
    assert document_id(CID, spelled) == f"{CID}:{spelled}" != hashed
    assert document_id(CID, long + "z") != hashed
    assert document_id("0" * 26, "a") != document_id("1" * 26, "a")


# --- NDJSON --------------------------------------------------------------------------------------


def test_the_source_without_a_document_mapping() -> None:
    doc = document("a", payload={"id": "a", "n": 1}, payload_json='{"n":1,"id":"a"}')
    source = document_source(doc, "2024-05-01T12:00:00.000Z")
    assert b"\n" not in source
    assert orjson.loads(source) == {
        "connector_id": CID,
        "external_id": "a",
        "content_hash": "f" * 64,
        "title": None,
        "text": None,
        "url": None,
        "updated_at": None,
        "metadata": {},
        "payload": {"n": 1, "id": "a"},
        "indexed_at": "2024-05-01T12:00:00.000Z",
    }
    # The stored JSON text is spliced as it is: its key order and every digit kept.
    assert b'"payload":{"n":1,"id":"a"}' in source


def test_the_source_with_the_document_shape() -> None:
    fields = DocumentFields(
        title="Printer on fire",
        text="It burns.",
        url="https://tickets.example.com/1",
        updated_at="2024-04-30T08:00:00Z",
        metadata={"status": "open", "big": 10**30},
    )
    doc = document("1", payload={"id": "1", "big": 10**30}, fields=fields)
    source = document_source(doc, "t")
    parsed = json.loads(source)
    assert {k: parsed[k] for k in ("title", "text", "url", "updated_at")} == {
        "title": "Printer on fire",
        "text": "It burns.",
        "url": "https://tickets.example.com/1",
        "updated_at": "2024-04-30T08:00:00Z",
    }
    assert parsed["metadata"] == {"status": "open", "big": 10**30}
    assert parsed["payload"] == {"id": "1", "big": 10**30}  # no digit lost (no float)
    assert b"1000000000000000000000000000000" in source


def test_stored_text_with_line_breaks_is_re_encoded_on_one_line() -> None:
    doc = document("a", payload_json='{\n  "a": "x\\ny",\n  "b": [1,\n2]\n}')
    source = document_source(doc, "t")
    assert b"\n" not in source
    assert json.loads(source)["payload"] == {"a": "x\ny", "b": [1, 2]}


def test_a_document_that_is_not_json_raises() -> None:
    with pytest.raises((ValueError, TypeError)):
        document_source(document("a", payload={"x": float("nan")}), "t")
    with pytest.raises((ValueError, TypeError)):
        document_source(document("\ud800", payload={}), "t")


def test_bulk_lines() -> None:
    lines = index_lines("docs", f"{CID}:a", b'{"x":1}')
    assert lines == (b'{"index":{"_index":"docs","_id":"' + CID.encode() + b':a"}}\n{"x":1}\n')
    assert delete_lines("docs", f"{CID}:a") == (
        b'{"delete":{"_index":"docs","_id":"' + CID.encode() + b':a"}}\n'
    )
    action, source = (json.loads(line) for line in lines.splitlines())
    assert (action["index"]["_id"], source) == (f"{CID}:a", {"x": 1})


def test_requests_are_split_by_bytes_only_past_the_bound() -> None:
    assert chunks([b"x" * 10] * 5, 100) == [range(0, 5)]
    assert chunks([b"x" * 40] * 5, 100) == [range(0, 2), range(2, 4), range(4, 5)]
    # A single action bigger than the bound goes alone.
    assert chunks([b"x" * 10, b"x" * 500, b"x" * 10], 100) == [
        range(0, 1),
        range(1, 2),
        range(2, 3),
    ]
    assert chunks([], 100) == []


# --- per-item results ---------------------------------------------------------------------


def _item(action: str, status: int, error: dict[str, Any] | None = None) -> dict[str, Any]:
    inner: dict[str, Any] = {"_index": "docs", "_id": "x", "status": status}
    if error is not None:
        inner["error"] = error
    return {action: inner}


def test_no_errors_means_every_item_is_done() -> None:
    answer = {"took": 3, "errors": False, "items": [_item("index", 201), _item("index", 200)]}
    assert item_results(answer, 2, delete=False) == [ItemResult(Outcome.DONE)] * 2


def test_each_item_is_mapped_to_its_document() -> None:
    mapper = {
        "type": "mapper_parsing_exception",
        "reason": "failed to parse field [updated_at] of type [date]",
        "caused_by": {"type": "illegal_argument_exception", "reason": "bad date [x]"},
    }
    rejected = {"type": "es_rejected_execution_exception", "reason": "rejected execution"}
    items = [
        _item("index", 201),
        _item("index", 400, mapper),
        _item("index", 429, rejected),
        _item("index", 503, {"type": "rejected_execution_exception", "reason": "queue full"}),
        _item("index", 503, {"type": "unavailable_shards_exception", "reason": "primary down"}),
        _item("index", 409, {"type": "version_conflict_engine_exception", "reason": "exists"}),
    ]
    results = item_results({"errors": True, "items": items}, 6, delete=False)
    assert [r.outcome for r in results] == [
        Outcome.DONE,
        Outcome.FAILED,
        Outcome.RETRY,
        Outcome.RETRY,
        Outcome.FAILED,
        Outcome.FAILED,
    ]
    assert results[1].error == (
        "400 mapper_parsing_exception: failed to parse field [updated_at] of type [date]; "
        "caused by illegal_argument_exception: bad date [x]"
    )
    assert results[2].error == "429 es_rejected_execution_exception: rejected execution"
    assert results[4].error == "503 unavailable_shards_exception: primary down"
    assert results[5].type == "version_conflict_engine_exception"


def test_a_delete_answered_404_is_done() -> None:
    not_found = {"delete": {"_index": "docs", "_id": "x", "result": "not_found", "status": 404}}
    missing_index = _item("delete", 404, {"type": "index_not_found_exception", "reason": "no"})
    answer = {"errors": True, "items": [not_found, missing_index, _item("delete", 200)]}
    assert item_results(answer, 3, delete=True) == [ItemResult(Outcome.DONE)] * 3
    # ... but not an index action answered 404.
    answer = {"errors": True, "items": [missing_index]}
    assert item_results(answer, 1, delete=False)[0].outcome is Outcome.FAILED


def test_an_answer_that_does_not_fit_the_request_fails_every_item() -> None:
    for answer, error in [
        ({"errors": True, "items": [_item("index", 201)]}, "1 items for 2 actions"),
        ({"errors": False}, "no items for 2 actions"),
        ([1, 2], "not a JSON object"),
    ]:
        results = item_results(answer, 2, delete=False)
        assert {r.outcome for r in results} == {Outcome.FAILED}
        assert error in (results[0].error or "")
    odd = item_results({"errors": True, "items": [{}, {"index": {"_id": "x"}}]}, 2, delete=False)
    assert [r.error for r in odd] == [
        "unexpected _bulk item: not an object",
        "unexpected _bulk item: no status",
    ]


def test_item_errors_are_bounded() -> None:
    error = {"type": "mapper_parsing_exception", "reason": "x" * 5000}
    result = item_results({"errors": True, "items": [_item("index", 400, error)]}, 1, delete=False)
    assert len(result[0].error or "") == MAX_ERROR


# --- the mapping --------------------------------------------------------------------------


def _answer(mappings: dict[str, Any], name: str = "docs") -> dict[str, Any]:
    return {name: {"mappings": mappings}}


def test_the_created_mapping_fits() -> None:
    assert mapping_problems(_answer(shown(INDEX_MAPPINGS)), "docs") == []
    # As an index shows it once metadata has sub-fields (no "type": "object").
    grown = shown(INDEX_MAPPINGS)
    grown["properties"]["metadata"] = {
        "dynamic": "true",
        "properties": {"status": {"type": "keyword"}},
    }
    assert mapping_problems(_answer(grown), "docs") == []


def test_the_mapping_is_the_same_on_both_engines() -> None:
    # No type only one of them has (flattened / flat_object, match_only_text ...).
    text = json.dumps(INDEX_MAPPINGS)
    for kind in ("flattened", "flat_object", "match_only_text", "wildcard", "constant_keyword"):
        assert kind not in text
    assert INDEX_MAPPINGS["properties"]["payload"] == {"type": "object", "enabled": False}


def test_a_mapping_of_the_wrong_shape_is_refused_by_field() -> None:
    wrong = shown(INDEX_MAPPINGS)
    wrong["properties"]["text"] = {"type": "keyword"}
    wrong["properties"]["updated_at"] = {"type": "text"}
    wrong["properties"]["payload"] = {"properties": {"id": {"type": "keyword"}}}
    del wrong["properties"]["url"]
    assert mapping_problems(_answer(wrong), "docs") == [
        "'text' is mapped as keyword (needs text)",
        "'url' is not mapped (needs keyword)",
        "'updated_at' is mapped as text (needs date)",
        "'payload' is indexed (needs object with enabled: false)",
    ]
    assert len(mapping_problems(_answer({}), "docs")) == 10
    assert mapping_problems({}, "docs") == ["unexpected answer to GET /docs/_mapping"]


def test_other_types_that_take_the_values_are_accepted() -> None:
    other = shown(INDEX_MAPPINGS)
    other["properties"]["title"] = {"type": "match_only_text"}
    other["properties"]["metadata"] = {"type": "flattened"}
    other["properties"]["indexed_at"] = {"type": "date_nanos"}
    other["properties"]["extra"] = {"type": "long"}  # fields of its own are the owner's
    assert mapping_problems(_answer(other), "docs") == []


def test_an_alias_names_the_index_it_points_to() -> None:
    wrong = shown(INDEX_MAPPINGS)
    wrong["properties"]["title"] = {"type": "keyword"}
    answer = {"docs-v1": {"mappings": shown(INDEX_MAPPINGS)}, "docs-v2": {"mappings": wrong}}
    assert mapping_problems(answer, "docs") == [
        "docs-v2: 'title' is mapped as keyword (needs text)"
    ]


# --- the config ---------------------------------------------------------------------------

HTTP = {"type": "http", "url": "http://127.0.0.1:9000/items", "records": "data"}
BASE = {"type": "opensearch", "url": "https://search.example.com:9200", "index": "docs"}


def create(indexer: dict[str, Any]) -> dict[str, Any]:
    body = {"name": "n", "source": HTTP, "indexer": indexer}
    out: dict[str, Any] = parse_create(body, kinds=Registry.builtin(), defaults=PaginatorSettings())
    return out


def create_errors(indexer: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        create(indexer)
    return info.value.errors


ACCEPTED = [
    BASE,
    {**BASE, "url": "http://127.0.0.1:9200/es/", "index": "a.b_c-1", "batch_size": 10_000},
    {**BASE, "create_index": False, "batch_size": 1},
    {**BASE, "auth": None},
    {**BASE, "auth": {"type": "basic", "username": "syncd", "password": "${env:PW}"}},
    {**BASE, "auth": {"type": "basic", "username": "${file:/run/u}", "password": "p$ss{x}"}},
    {**BASE, "auth": {"type": "api_key", "encoded": "${env:ES_KEY}"}},
    {**BASE, "auth": {"type": "api_key", "id": "VuaCfGcBCdbkQm-e5aOx", "api_key": "k"}},
    {**BASE, "auth": {"type": "bearer", "token": "${file:/run/token}"}},
    {**BASE, "index": "x" * 255},
]
ANY = None  # a message checked below, or only its path


def _bad_index(name: Any) -> tuple[dict[str, Any], dict[str, str | None]]:
    return {**BASE, "index": name}, {"indexer.index": ANY}


REFUSED: list[tuple[dict[str, Any], dict[str, str | None]]] = [
    ({"type": "opensearch", "url": "http://h:9200"}, {"indexer.index": "Field required"}),
    ({**BASE, "url": "ftp://h/"}, {"indexer.url": "Must be an http:// or https:// URL"}),
    *[
        _bad_index(name)
        for name in ["Docs", "_docs", "-docs", ".hidden", "", "a b", "a:b", "a+b", "x" * 256, 5]
    ],
    ({**BASE, "create_index": "yes"}, {"indexer.create_index": "Must be true or false"}),
    ({**BASE, "batch_size": 0}, {"indexer.batch_size": "Must be an integer between 1 and 10000"}),
    ({**BASE, "batch_size": 1.5}, {"indexer.batch_size": "Must be an integer between 1 and 10000"}),
    ({**BASE, "refresh": True}, {"indexer.refresh": "Unknown field"}),
    (
        {**BASE, "auth": {"type": "basic", "username": "a:b", "password": "p"}},
        {"indexer.auth.username": "Must not contain ':'"},
    ),
    (
        {**BASE, "auth": {"type": "basic", "username": "u"}},
        {"indexer.auth.password": "Field required"},
    ),
    (
        {**BASE, "auth": {"type": "basic", "username": "u", "password": "***"}},
        {"indexer.auth.password": ANY},
    ),
    (
        {**BASE, "auth": {"type": "bearer", "token": "a\nb"}},
        {"indexer.auth.token": "Must not contain line breaks"},
    ),
    (
        {**BASE, "auth": {"type": "bearer", "token": "${vault:x}"}},
        {"indexer.auth.token": ANY},
    ),
    (
        {**BASE, "auth": {"type": "api_key"}},
        {"indexer.auth.encoded": "Give either `encoded`, or `id` and `api_key`"},
    ),
    (
        {**BASE, "auth": {"type": "api_key", "id": "i"}},
        {"indexer.auth.api_key": "Field required with `id`"},
    ),
    (
        {**BASE, "auth": {"type": "api_key", "api_key": "k"}},
        {"indexer.auth.id": "Field required with `api_key`"},
    ),
    (
        {**BASE, "auth": {"type": "api_key", "encoded": "e", "id": "i", "api_key": "k"}},
        {"indexer.auth.encoded": "Give either `encoded`, or `id` and `api_key`, not both"},
    ),
    (
        {**BASE, "auth": {"type": "oauth2"}},
        {"indexer.auth.type": "Unknown auth type 'oauth2'; known: api_key, basic, bearer"},
    ),
    (
        {**BASE, "auth": {"type": "bearer", "token": "t", "in": "header"}},
        {"indexer.auth.in": "Unknown field for auth type 'bearer'"},
    ),
    ({**BASE, "auth": "***"}, {"indexer.auth": ANY}),
]
MASKED = 'Still masked ("***"): write the secret or a ${env:NAME} / ${file:/path} reference'


@pytest.mark.parametrize("indexer", ACCEPTED)
def test_accepted_configs(indexer: dict[str, Any]) -> None:
    assert create(indexer)["indexer"] == indexer  # kept as sent
    assert _schema_errors(indexer) == []


@pytest.mark.parametrize(("indexer", "errors"), REFUSED)
def test_refused_configs(indexer: dict[str, Any], errors: dict[str, str | None]) -> None:
    found = create_errors(indexer)
    assert set(found) == set(errors)
    for path, message in errors.items():
        if isinstance(message, str):
            assert found[path] == message
    if "indexer.index" in errors and indexer.get("index") is not None:
        assert found["indexer.index"].startswith("Must be an index name")
    if indexer.get("auth") == "***" or "***" in str(indexer.get("auth")):
        assert MASKED in found.values()
    assert _schema_errors(indexer) != []


@functools.cache
def _validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(connector_file_schema(Registry.builtin()))


def _schema_errors(indexer: dict[str, Any]) -> list[str]:
    body = {"name": "n", "source": HTTP, "indexer": indexer}
    return [e.message for e in _validator().iter_errors(body)]


def test_the_reference_names_the_kind_and_its_auth_styles() -> None:
    schema = connector_file_schema(Registry.builtin())
    assert {
        "OpenSearchIndexerConfig",
        "OpenSearchBasicAuth",
        "OpenSearchApiKeyAuth",
        "OpenSearchBearerAuth",
    } <= set(schema["$defs"])
    props = schema["$defs"]["OpenSearchIndexerConfig"]["properties"]
    assert props["create_index"]["default"] is True
    assert props["batch_size"]["default"] == 100


# --- secrets ------------------------------------------------------------------------------


def test_secrets_of_a_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OS_PW", "pw-from-env-123")
    basic = {**BASE, "auth": {"type": "basic", "username": "syncd", "password": "${env:OS_PW}"}}
    found = opensearch_secrets(basic)
    encoded = base64.b64encode(b"syncd:pw-from-env-123").decode()
    assert {"pw-from-env-123", encoded, f"Basic {encoded}"} <= found
    assert "syncd" not in found  # the username is an identity (as for source.auth)
    api = {**BASE, "auth": {"type": "api_key", "id": "key-id-1", "api_key": "key-secret-1"}}
    pair = base64.b64encode(b"key-id-1:key-secret-1").decode()
    assert {"key-id-1", "key-secret-1", pair, f"ApiKey {pair}"} <= opensearch_secrets(api)
    # A reference that does not resolve yet is left for the request that resolves it.
    unset = {**BASE, "auth": {"type": "bearer", "token": "${env:OS_UNSET_TOKEN}"}}
    assert opensearch_secrets(unset) == set()
    creds = {**BASE, "url": "https://user:url-password-9@search.example.com:9200"}
    assert "url-password-9" in opensearch_secrets(creds)


def test_answers_show_the_auth_as_a_mask() -> None:
    config = {**BASE, "auth": {"type": "api_key", "encoded": "c2VjcmV0LWtleQ=="}}
    shown_config = redact_indexer(config)
    assert shown_config == {**BASE, "auth": "***"}
    assert "c2VjcmV0LWtleQ" not in json.dumps(shown_config)
