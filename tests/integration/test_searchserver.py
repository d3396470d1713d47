"""The local engine of :mod:`tests.integration.searchserver` keeps to the documented semantics
it claims (so that the ``opensearch`` indexer's tests mean something): ``_bulk`` parsing and
per-item answers, index creation and mappings, documents, authentication."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.integration.searchserver import SearchServer

NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
async def engine() -> AsyncIterator[SearchServer]:
    async with SearchServer(flavor="elasticsearch") as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    json: Any = None,
) -> tuple[int, Any]:
    async with http.request(method, url, data=body, headers=headers, json=json) as response:
        text = await response.text()
        if response.content_type == "application/json":
            return response.status, await response.json()
        return response.status, text


async def test_bulk_answers_each_action_in_order(
    engine: SearchServer, http: aiohttp.ClientSession
) -> None:
    body = (
        b'{"index": {"_index": "t", "_id": "1"}}\n{"a": "x"}\n'
        b'{"create": {"_index": "t", "_id": "1"}}\n{"a": "y"}\n'
        b'{"delete": {"_index": "t", "_id": "2"}}\n'
        b'{"index": {"_id": "1"}}\n{"a": "z"}\n'
        b'{"delete": {"_id": "1"}}\n'
    )
    status, answer = await call(http, "POST", f"{engine.url}/t/_bulk", body, NDJSON)
    assert status == 200 and answer["errors"] is True
    summary = [
        (action, inner["status"], inner.get("result"))
        for item in answer["items"]
        for action, inner in item.items()
    ]
    assert summary == [
        ("index", 201, "created"),
        ("create", 409, None),
        ("delete", 404, "not_found"),
        ("index", 200, "updated"),
        ("delete", 200, "deleted"),
    ]
    conflict = answer["items"][1]["create"]["error"]
    assert conflict["type"] == "version_conflict_engine_exception"
    assert (
        conflict["reason"] == "[1]: version conflict, document already exists (current version [1])"
    )
    assert "error" not in answer["items"][2]["delete"]  # a missing document is not an error
    # Only not-found deletes: no error, so errors is false.
    only = b'{"delete": {"_index": "t", "_id": "9"}}\n'
    status, answer = await call(http, "POST", f"{engine.url}/_bulk", only, NDJSON)
    assert (status, answer["errors"], answer["items"][0]["delete"]["status"]) == (200, False, 404)


@pytest.mark.parametrize(
    ("body", "headers", "status", "kind"),
    [
        (b'{"index": {"_index": "t"}}\n{"a": 1}', NDJSON, 400, "illegal_argument_exception"),
        (b'{"index": {"_index": "t"}}\n{"a": 1}\n', {"Content-Type": "text/plain"}, 406, None),
        (b"", NDJSON, 400, "action_request_validation_exception"),
        (b"not json\n", NDJSON, 400, "illegal_argument_exception"),
        (b'{"upsert": {"_index": "t"}}\n{}\n', NDJSON, 400, "illegal_argument_exception"),
        (b'{"index": {"_id": "1"}}\n{}\n', NDJSON, 400, "action_request_validation_exception"),
        (
            b'{"index": {"_index": "t", "_id": "' + b"x" * 513 + b'"}}\n{}\n',
            NDJSON,
            400,
            "action_request_validation_exception",
        ),
    ],
    ids=[
        "no-final-newline",
        "content-type",
        "empty",
        "not-json",
        "unknown-action",
        "no-index",
        "long-id",
    ],
)
async def test_a_malformed_bulk_is_refused_whole(
    engine: SearchServer,
    http: aiohttp.ClientSession,
    body: bytes,
    headers: dict[str, str],
    status: int,
    kind: str | None,
) -> None:
    got, answer = await call(http, "POST", f"{engine.url}/_bulk", body, headers)
    assert got == status
    if kind is not None:
        assert answer["error"]["type"] == kind and answer["status"] == status
        assert answer["error"]["root_cause"][0]["type"] == kind
    assert engine.indices == {}


async def test_indices_mappings_and_documents(
    engine: SearchServer, http: aiohttp.ClientSession
) -> None:
    url = engine.url
    assert (await call(http, "HEAD", f"{url}/t"))[0] == 404
    mappings = {
        "dynamic": "strict",
        "properties": {
            "when": {"type": "date"},
            "blob": {"type": "object", "enabled": False},
            "meta": {"type": "object", "dynamic": True},
        },
    }
    status, answer = await call(http, "PUT", f"{url}/t", json={"mappings": mappings})
    assert (status, answer) == (
        200,
        {"acknowledged": True, "shards_acknowledged": True, "index": "t"},
    )
    assert (await call(http, "HEAD", f"{url}/t"))[0] == 200
    status, answer = await call(http, "PUT", f"{url}/t", json={})
    assert (status, answer["error"]["type"]) == (400, "resource_already_exists_exception")
    status, answer = await call(http, "PUT", f"{url}/Upper", json={})
    assert (status, answer["error"]["type"]) == (400, "invalid_index_name_exception")
    flat = {"mappings": {"properties": {"m": {"type": "flat_object"}}}}
    status, answer = await call(http, "PUT", f"{url}/u", json=flat)
    assert (status, answer["error"]["reason"]) == (
        400,
        "No handler for type [flat_object] declared on field [m]",
    )  # Elasticsearch's name for it is flattened

    docs = (
        b'{"index": {"_index": "t", "_id": "ok"}}\n'
        b'{"when": "2024-01-01T00:00:00Z", "blob": "any value", "meta": {"s": "x", "n": 1}}\n'
        b'{"index": {"_index": "t", "_id": "date"}}\n{"when": "yesterday"}\n'
        b'{"index": {"_index": "t", "_id": "strict"}}\n{"other": 1}\n'
        b'{"index": {"_index": "t", "_id": "object"}}\n{"meta": "flat"}\n'
    )
    _, answer = await call(http, "POST", f"{url}/_bulk", docs, NDJSON)
    errors = [i["index"].get("error", {}).get("type") for i in answer["items"]]
    assert errors == [
        None,
        "mapper_parsing_exception",
        "strict_dynamic_mapping_exception",
        "mapper_parsing_exception",
    ]
    status, shown = await call(http, "GET", f"{url}/t/_mapping")
    assert shown["t"]["mappings"]["dynamic"] == "strict"
    meta = shown["t"]["mappings"]["properties"]["meta"]
    assert "type" not in meta  # an object with sub-fields is shown without its type
    assert meta["properties"] == {
        "s": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}},
        "n": {"type": "long"},
    }
    status, found = await call(http, "GET", f"{url}/t/_doc/ok")
    assert (status, found["found"], found["_version"], found["_source"]["blob"]) == (
        200,
        True,
        1,
        "any value",
    )
    status, missing = await call(http, "GET", f"{url}/t/_doc/date")
    assert (status, missing) == (404, {"_index": "t", "_id": "date", "found": False})
    status, answer = await call(http, "GET", f"{url}/nope/_mapping")
    assert (status, answer["error"]["type"]) == (404, "index_not_found_exception")


async def test_automatic_index_creation_maps_dynamically(
    engine: SearchServer, http: aiohttp.ClientSession
) -> None:
    body = b'{"index": {"_index": "auto", "_id": "1"}}\n{"at": "2024-01-01", "n": 1.5}\n'
    await call(http, "POST", f"{engine.url}/_bulk", body, NDJSON)
    assert engine.mapping("auto")["properties"] == {"at": {"type": "date"}, "n": {"type": "float"}}


async def test_authentication() -> None:
    key = base64.b64encode(b"key-id:key-secret").decode()
    async with (
        SearchServer(
            flavor="elasticsearch", users={"u": "p"}, api_keys={"key-id": "key-secret"}
        ) as es,
        SearchServer(flavor="opensearch", users={"u": "p"}) as os_,
        aiohttp.ClientSession() as http,
    ):
        status, answer = await call(http, "GET", f"{es.url}/t/_mapping")
        assert status == 401 and answer["error"]["type"] == "security_exception"
        assert (
            answer["error"]["reason"]
            == "missing authentication credentials for REST request [/t/_mapping]"
        )
        basic = {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()}
        assert (await call(http, "GET", f"{es.url}/t/_mapping", headers=basic))[0] == 404
        api_key = {"Authorization": f"ApiKey {key}"}
        assert (await call(http, "GET", f"{es.url}/t/_mapping", headers=api_key))[0] == 404
        assert (await call(http, "GET", f"{os_.url}/t/_mapping", headers=api_key)) == (
            401,
            "Unauthorized",
        )
        assert (await call(http, "GET", f"{os_.url}/t/_mapping", headers=basic))[0] == 404


async def test_scripted_failures(engine: SearchServer, http: aiohttp.ClientSession) -> None:
    engine.fail_items(["a"], status=429, times=1)
    engine.fail_requests(503, times=1)
    body = b'{"index": {"_index": "t", "_id": "a"}}\n{}\n'
    assert (await call(http, "POST", f"{engine.url}/_bulk", body, NDJSON))[0] == 503
    _, answer = await call(http, "POST", f"{engine.url}/_bulk", body, NDJSON)
    item = answer["items"][0]["index"]
    assert (item["status"], item["error"]["type"]) == (429, "es_rejected_execution_exception")
    _, answer = await call(http, "POST", f"{engine.url}/_bulk", body, NDJSON)
    assert answer["items"][0]["index"]["status"] == 201
