"""``GET /connectors/{id}/documents[/{external_id}]`` and the run view (DESIGN.md §3, §7):
payloads come back exactly as stored, any id is reachable percent-encoded, and every cursor
a listing hands out is accepted by it."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from yarl import URL

from syncd.jsontext import canonical_json, content_hash
from syncd.models import DocStatus, DocumentInput, utcnow
from tests.api.conftest import Api, Harness, Reply

IDS = ["a/b c%?#ü", "%2F", "..", ".", "x/../y", "+", "a;b=c&d", "日本語", "tab\there", "42"]


def doc_url(connector_id: str, external_id: str) -> URL:
    # Dots too: clients drop "." and ".." path segments (RFC 3986 §5.2.4).
    encoded = quote(external_id, safe="").replace(".", "%2E")
    return URL(f"/connectors/{connector_id}/documents/{encoded}", encoded=True)


async def get(api: Api, url: URL) -> Reply:
    """GET an already percent-encoded path (``Api.get`` takes text, which yarl would decode
    and normalise: ``%2E%2E`` would become a ".." segment and be removed)."""
    async with api.session.get(url) as response:
        text = await response.text()
        body = json.loads(text) if response.content_type == "application/json" else text
        return Reply(response.status, body, response.headers, text)


async def synced(h: Harness, records: list[dict[str, Any]]) -> str:
    """A connector whose one sync served ``records`` (store indexer); its id."""
    h.feed.pages = [records]
    c = await h.api.create(indexer={"type": "store"})
    reply = await h.api.post(f"/connectors/{c['id']}/sync")
    assert reply.status == 202, reply.body
    await h.daemon.wait_run(c["id"])
    return str(c["id"])


async def list_all(api: Api, connector_id: str, limit: int = 1) -> list[str]:
    """Every external id, following each ``next_cursor`` handed out."""
    seen: list[str] = []
    params = {"limit": str(limit)}
    while True:
        reply = await api.get(f"/connectors/{connector_id}/documents", params=params)
        assert reply.status == 200, reply.body
        seen.extend(d["external_id"] for d in reply.body["data"])
        if reply.body["next_cursor"] is None:
            return seen
        params = {"limit": str(limit), "cursor": reply.body["next_cursor"]}


async def test_payload_is_returned_exactly(harness: Harness) -> None:
    record = {
        "id": "r1",
        "big": 2**80,
        "neg": -(10**30),
        "u64": 2**64 - 1,
        "nul": "a\x00b",
        "text": "é✓ 😀 \u2028 \U0010ffff",
        "float": 0.1,
        "nested": {"\x00": [None, True, {}]},
    }
    cid = await synced(harness, [record])

    reply = await get(harness.api, doc_url(cid, "r1"))

    assert reply.status == 200, reply.body
    assert reply.headers["Content-Type"].startswith("application/json")
    assert json.loads(reply.text)["payload"] == record  # stdlib: integers keep every digit
    assert '"big":1208925819614629174706176' in reply.text
    assert '"neg":-1000000000000000000000000000000' in reply.text
    assert '"nul":"a\\u0000b"' in reply.text
    # The payload is the stored canonical text, and the hash is over that text.
    payload_text = canonical_json(record).decode()
    assert f'"payload":{payload_text}' in reply.text
    assert reply.body["content_hash"] == content_hash(record)
    assert set(reply.body) == {
        "external_id",
        "status",
        "error",
        "content_hash",
        "attempts",
        "created_at",
        "updated_at",
        "indexed_at",
        "missed_crawls",
        "payload",
    }


async def test_any_id_is_reachable_percent_encoded(harness: Harness) -> None:
    cid = await synced(harness, [{"id": i, "n": n} for n, i in enumerate(IDS)] + [{"id": 7}])

    for n, external_id in enumerate(IDS):
        reply = await get(harness.api, doc_url(cid, external_id))
        assert reply.status == 200, (external_id, reply.body)
        assert reply.body["external_id"] == external_id
        assert reply.body["payload"] == {"id": external_id, "n": n}
    # An integer id is its decimal text; the record keeps its integer.
    seven = await get(harness.api, doc_url(cid, "7"))
    assert (seven.status, seven.body["payload"]) == (200, {"id": 7})
    # A slash, unencoded, is part of the id too.
    plain = await get(harness.api, URL(f"/connectors/{cid}/documents/x/%2E%2E/y", encoded=True))
    assert plain.status == 200 and plain.body["external_id"] == "x/../y"
    missing = await get(harness.api, doc_url(cid, "a/b"))
    assert (missing.status, missing.body) == (404, {"detail": "Document not found"})


async def test_every_cursor_handed_out_is_accepted(harness: Harness) -> None:
    cid = await synced(harness, [{"id": i} for i in IDS])
    expected = sorted(IDS, key=lambda e: e.encode())
    assert await list_all(harness.api, cid, limit=1) == expected
    assert await list_all(harness.api, cid, limit=3) == expected


async def test_a_stored_empty_id_does_not_break_listing(harness: Harness) -> None:
    # Stored before ids were checked: a document with an empty id, first in id order.
    h = harness
    h.feed.pages = [[{"id": "b"}], [{"id": "c"}]]
    h.feed.hang_at = 1  # the run stays current after its first page
    c = await h.api.create(indexer={"type": "store"})
    run_id = (await h.api.post(f"/connectors/{c['id']}/sync")).body["run_id"]
    await h.feed.reached.wait()
    legacy = [DocumentInput("", {"id": ""}, content_hash({"id": ""}))]
    await h.daemon.store.commit_page(
        c["id"], run_id, legacy, next_cursor="1", source_state={}, now=utcnow()
    )
    h.feed.release.set()
    await h.daemon.wait_run(c["id"])

    assert await list_all(h.api, c["id"], limit=1) == ["", "b", "c"]
    indexed = await h.api.get(
        f"/connectors/{c['id']}/documents",
        params={"limit": "1", "status": DocStatus.INDEXED.value},
    )
    assert indexed.status == 200


async def test_runs_show_rejected_records_and_note(harness: Harness) -> None:
    h = harness
    h.feed.pages = [[{"id": "ok"}, {"id": None}, {"id": True}, {"id": ""}, {"x": 1}]]
    h.feed.hang_at = None
    c = await h.api.create(indexer={"type": "store"})
    await h.api.post(f"/connectors/{c['id']}/sync")
    await h.daemon.wait_run(c["id"])

    reply = await h.api.get(f"/connectors/{c['id']}/runs")

    [run] = reply.body["data"]
    assert run["outcome"] == "succeeded"
    assert (run["documents_seen"], run["documents_rejected"], run["note"]) == (1, 4, None)
    assert run["rejections"] == [
        {"page": 1, "record": 1, "reason": "id field 'id' is null"},
        {"page": 1, "record": 2, "reason": "id field 'id' is a boolean"},
        {"page": 1, "record": 3, "reason": "id field 'id' is an empty string"},
        {"page": 1, "record": 4, "reason": "id field 'id' is missing"},
    ]
    assert [
        d["external_id"] for d in (await h.api.get(f"/connectors/{c['id']}/documents")).body["data"]
    ] == ["ok"]


async def test_the_run_note_is_shown(harness: Harness) -> None:
    h = harness
    h.feed.pages = [[{"id": "a"}], [{"id": "b"}]]
    h.feed.hang_at = 1
    c = await h.api.create(indexer={"type": "store"})
    run_id = (await h.api.post(f"/connectors/{c['id']}/sync")).body["run_id"]
    await h.feed.reached.wait()
    await h.daemon.store.commit_page(
        c["id"], run_id, [], next_cursor="1", source_state={}, now=utcnow(), note="source changed"
    )
    h.feed.release.set()
    await h.daemon.wait_run(c["id"])

    [run] = (await h.api.get(f"/connectors/{c['id']}/runs")).body["data"]
    assert (run["outcome"], run["note"], run["documents_rejected"]) == (
        "succeeded",
        "source changed",
        0,
    )
    assert run["rejections"] == []
