"""Paths that name any key, end to end: a connector whose ``records``, ``id_field``,
``pagination.next_cursor``, ``incremental.field`` and ``hash_fields`` are JSON Pointers
(RFC 6901) to keys holding dots, ``@``, ``$``, spaces, ``/`` and ``~`` crawls a local server
completely in a real daemon, stores each record under the right id and content hash, and
sends the incremental mark it read through its pointer."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import Run, RunOutcome
from tests.integration.loopback import LoopbackServer

COUNT = 25
PAGE = 10
CURSOR_PARAM = "$skiptoken"


def make_record(i: int) -> dict[str, Any]:
    """Record ``i``: its id, time and content under keys no dotted path can name."""
    return {
        "sys": {"id.v1": f"rec-{i:03d}", "@type": "Thing"},
        "$v": {"updated at": f"2024-01-01T00:{i:02d}:00Z"},
        "body": {"m~n": f"Text {i}", "tags": [f"t{i}", "common"]},
        "view count": i * 3,  # changes without changing the content
    }


class OddKeys(LoopbackServer):
    """A JSON API in the shape of OData/JSON-LD answers: ``GET /v1/things`` answers
    ``{"@odata.context", "@search.results": {"a/b": [...]}, "$meta": {"next cursor"}}``,
    ``PAGE`` records a page, the next page asked with ``$skiptoken``; ``since`` keeps records
    whose ``$v."updated at"`` is at or after it (ISO 8601 text compares as time)."""

    path = "/v1/things"

    def __init__(self, count: int) -> None:
        self.records = [make_record(i) for i in range(count)]
        self.queries: list[dict[str, str]] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_get(self.path, self._things)

    async def _things(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.queries.append(query)
        since = query.get("since")
        rows = [r for r in self.records if since is None or r["$v"]["updated at"] >= since]
        start = int(query.get(CURSOR_PARAM) or 0)
        following = str(start + PAGE) if start + PAGE < len(rows) else None
        return web.json_response(
            {
                "@odata.context": "https://odd.example/$metadata#things",
                "@search.results": {"a/b": rows[start : start + PAGE]},
                "$meta": {"next cursor": following, "count": len(rows)},
            }
        )


@pytest.fixture
async def odd() -> AsyncIterator[OddKeys]:
    async with OddKeys(COUNT) as server:
        yield server


#: Each pointer names a key with a character a dotted path cannot hold or that RFC 6901
#: escapes: "/" (~1), "~" (~0), ".", "@", "$", a space, and an array index.
RECORDS = "/@search.results/a~1b"
ID_FIELD = "/sys/id.v1"
UPDATED = "/$v/updated at"
HASH_FIELDS = ["/body/m~0n", "/body/tags/0"]


def connector(url: str) -> dict[str, Any]:
    return {
        "name": "odd-keys",
        "source": {
            "type": "http",
            "url": url,
            "records": RECORDS,
            "id_field": ID_FIELD,
            "pagination": {
                "type": "cursor",
                "cursor_param": CURSOR_PARAM,
                "next_cursor": "/$meta/next cursor",
            },
            "incremental": {"field": UPDATED, "param": "since"},
        },
        "hash_fields": HASH_FIELDS,
        "page_retries": 0,
    }


def expected_hash(record: dict[str, Any]) -> str:
    """The content hash the hash_fields call for, computed here from the record: SHA-256 of
    the compact, key-sorted JSON of the sub-document the two pointers name."""
    part = {"body": {"m~n": record["body"]["m~n"], "tags": {"0": record["body"]["tags"][0]}}}
    text = json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


async def sync(daemon: Daemon, connector_id: str) -> Run:
    run_id = await daemon.trigger_sync(connector_id)
    assert run_id is not None
    await asyncio.wait_for(daemon.wait_run(connector_id), 30)
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    return runs[0]


async def stored(daemon: Daemon, connector_id: str) -> dict[str, tuple[str, Any]]:
    """Every document of the connector: its external id → (content hash, payload)."""
    found: dict[str, tuple[str, Any]] = {}
    cursor = None
    while True:
        docs, cursor = await daemon.list_documents(connector_id, limit=500, cursor=cursor)
        for d in docs:
            full = await daemon.get_document(connector_id, d.external_id)
            found[d.external_id] = (full.content_hash, full.payload)
        if cursor is None:
            return found


async def test_json_pointers_name_records_ids_cursors_marks_and_hashed_fields(
    daemon: Daemon, odd: OddKeys
) -> None:
    c = await daemon.create_connector(connector(odd.url))
    assert c.source["records"] == RECORDS and c.hash_fields == tuple(HASH_FIELDS)

    run = await sync(daemon, c.id)
    assert (run.outcome, run.error, run.pages) == (RunOutcome.SUCCEEDED, None, 3)
    assert (run.documents_seen, run.documents_rejected) == (COUNT, 0)
    # The cursor was read through "/$meta/next cursor" and sent back as $skiptoken.
    assert [q.get(CURSOR_PARAM) for q in odd.queries] == [None, "10", "20"]
    assert all("since" not in q for q in odd.queries)

    docs = await stored(daemon, c.id)
    assert sorted(docs) == [f"rec-{i:03d}" for i in range(COUNT)]
    for record in odd.records:
        content_hash, payload = docs[record["sys"]["id.v1"]]
        assert content_hash == expected_hash(record)
        assert payload == record  # the payload is the whole record

    # Record 5: only the view count (not hashed) changes; record 7: its hashed text. Both
    # are updated after the mark, which the next crawl sends as read through its pointer.
    mark = odd.records[-1]["$v"]["updated at"]
    before = copy.deepcopy(docs)
    odd.records[5]["view count"] += 1000
    odd.records[5]["$v"]["updated at"] = "2024-01-01T01:00:00Z"
    odd.records[7]["body"]["m~n"] = "Text 7, edited"
    odd.records[7]["$v"]["updated at"] = "2024-01-01T01:01:00Z"
    odd.queries.clear()

    again = await sync(daemon, c.id)
    assert (again.outcome, again.error, again.pages) == (RunOutcome.SUCCEEDED, None, 1)
    assert [q.get("since") for q in odd.queries] == [mark]
    # The last record (at the mark) and the two updated ones; only record 7 hashes anew.
    assert (again.documents_seen, again.documents_enqueued) == (3, 1)
    docs = await stored(daemon, c.id)
    assert docs["rec-005"][0] == before["rec-005"][0] == expected_hash(odd.records[5])
    assert docs["rec-007"][0] == expected_hash(odd.records[7]) != before["rec-007"][0]
    assert docs["rec-007"][1]["body"]["m~n"] == "Text 7, edited"
    changed = {k for k in docs if docs[k][0] != before[k][0]}
    assert changed == {"rec-007"}

    # A third crawl sends the new mark, read from the record updated last.
    odd.queries.clear()
    third = await sync(daemon, c.id)
    assert third.outcome is RunOutcome.SUCCEEDED
    assert [q.get("since") for q in odd.queries] == ["2024-01-01T01:01:00Z"]


async def test_a_preview_reads_every_pointer_and_warns_of_none(
    daemon: Daemon, odd: OddKeys
) -> None:
    shown = await daemon.preview({"connector": connector(odd.url), "pages": 5})
    assert shown.error is None
    assert [(p.records, p.warnings) for p in shown.pages] == [(10, ()), (10, ()), (5, ())]
    assert all(p.next_cursor for p in shown.pages[:-1])
    assert shown.pages[-1].next_cursor is None


async def test_the_same_keys_as_dotted_paths_find_nothing_and_the_run_fails_naming_them(
    daemon: Daemon, odd: OddKeys
) -> None:
    body = connector(odd.url)
    body["source"]["records"] = "@search.results.a/b"  # the dots split the key
    c = await daemon.create_connector(body)
    run = await sync(daemon, c.id)
    assert run.outcome is RunOutcome.FAILED and run.error is not None
    assert "records path '@search.results.a/b' not found in the response" in run.error
    assert await stored(daemon, c.id) == {}
