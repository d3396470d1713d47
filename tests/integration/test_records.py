"""Records end to end (DESIGN.md §7 "Records and ids"): every valid JSON record is stored,
hashed and returned exactly on both backend pairs; a record without a usable id is rejected
and counted on its run, never collapsed into another document; the run goes on.

The source is a tiny aiohttp app that serves fixed JSON text, so the test controls every
byte the daemon parses (integers beyond 64 bits, ``\\u0000`` escapes, ``NaN``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from syncd.api import build_app
from syncd.daemon import Daemon
from syncd.jsontext import PayloadError, canonical_json, parse_json
from syncd.models import DocStatus, Rejection, RunOutcome
from syncd.rules.records import MAX_EXTERNAL_ID_BYTES, document_inputs, external_id_of
from tests.integration.conftest import DaemonFactory

# Raw JSON text of the records, page by page, as the source sends them.
PAGES: list[list[str]] = [
    [
        '{"id": "big", "n": 1208925819614629174706176, "neg": -98765432109876543210987654321,'
        ' "u64": 18446744073709551615, "f": 0.1}',
        '{"id": "nul", "s": "a\\u0000b", "k\\u0000": ["\\u0000"]}',
        '{"id": "unicode", "s": "\u00e9\u2713 \\ud83d\\ude00 \u2028 \\u00fc"}',
        '{"id": null, "v": 1}',
        '"a bare string"',
        '{"id": true}',
        '{"id": {"k": 1}}',
        '{"id": ""}',
        '{"v": "no id"}',
        '{"id": 1.5}',
        '{"id": [1]}',
    ],
    [
        '{"id": "a/b c%?#\u00fc", "x": 1}',
        '{"id": 42, "x": 2}',
        '{"id": 18446744073709551616, "x": 3}',
        '{"id": "..", "x": 4}',
        '{"id": "%2F", "x": 5}',
        '{"id": "nan", "x": NaN}',
        '{"id": "surrogate", "s": "\\ud800"}',
    ],
]
VALID = {
    "big": PAGES[0][0],
    "nul": PAGES[0][1],
    "unicode": PAGES[0][2],
    "a/b c%?#\u00fc": PAGES[1][0],
    "42": PAGES[1][1],
    "18446744073709551616": PAGES[1][2],
    "..": PAGES[1][3],
    "%2F": PAGES[1][4],
}
REASONS = [
    (1, 3, "id field 'id' is null"),
    (1, 4, "record is not an object"),
    (1, 5, "id field 'id' is a boolean"),
    (1, 6, "id field 'id' is an object"),
    (1, 7, "id field 'id' is an empty string"),
    (1, 8, "id field 'id' is missing"),
    (1, 9, "id field 'id' is a number that is not an integer"),
    (1, 10, "id field 'id' is an array"),
    (2, 5, "payload cannot be stored: NaN and infinity are not JSON numbers"),
    (2, 6, "payload cannot be stored: text is not valid Unicode (a lone surrogate)"),
]


def page_body(index: int) -> bytes:
    next_cursor = json.dumps(str(index + 1)) if index + 1 < len(PAGES) else "null"
    text = f'{{"data": [{", ".join(PAGES[index])}], "next_cursor": {next_cursor}}}'
    return text.encode()


@pytest.fixture
async def source_url() -> AsyncIterator[str]:
    """A source serving :data:`PAGES` with cursor pagination (the cursor is the page)."""

    async def items(request: web.Request) -> web.Response:
        body = page_body(int(request.query.get("cursor") or 0))
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/items", items)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}/items"
    finally:
        await runner.cleanup()


@pytest.fixture
async def api(any_daemon: Daemon) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client of ``any_daemon``'s control API, served on 127.0.0.1, port 0."""
    app = build_app(any_daemon.service, any_daemon, any_daemon.config.api)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as session:
            yield session
    finally:
        await runner.cleanup()


def source_config(url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": url,
        "records": "data",
        "id_field": "id",
        "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next_cursor"},
    }


def document_path(connector_id: str, external_id: str) -> URL:
    """The document's URL path, its id percent-encoded: every reserved character, and dots
    too, since clients remove "." and ".." path segments (RFC 3986 §5.2.4)."""
    encoded = quote(external_id, safe="").replace(".", "%2E")
    return URL(f"/connectors/{connector_id}/documents/{encoded}", encoded=True)


async def sync(daemon: Daemon, connector_id: str) -> Any:
    run_id = await daemon.trigger_sync(connector_id)
    await daemon.wait_run(connector_id)
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    return runs[0]


async def test_records_are_stored_exactly_and_bad_ids_rejected(
    any_daemon: Daemon, source_url: str, api: aiohttp.ClientSession
) -> None:
    daemon = any_daemon
    c = await daemon.create_connector({"name": "records", "source": source_config(source_url)})

    run = await sync(daemon, c.id)

    assert run.outcome is RunOutcome.SUCCEEDED, run.error
    assert (run.pages, run.documents_seen, run.documents_enqueued) == (2, 8, 8)
    assert run.documents_rejected == len(REASONS)
    assert [(r.page, r.record, r.reason) for r in run.rejections] == REASONS
    counts = await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == len(VALID))
    assert sum(counts.values()) == len(VALID)  # nothing collapsed into "None" or "True"

    for external_id, raw in VALID.items():
        reply = await api.get(document_path(c.id, external_id))
        assert reply.status == 200, (external_id, await reply.text())
        text = await reply.text()
        body = json.loads(text)  # the stdlib keeps every digit of an integer
        assert body["external_id"] == external_id
        assert body["payload"] == json.loads(raw)
        assert body["content_hash"] == (await daemon.get_document(c.id, external_id)).content_hash
        if external_id == "big":
            assert '"n":1208925819614629174706176' in text
            assert '"neg":-98765432109876543210987654321' in text
            assert type(body["payload"]["u64"]) is int
        if external_id == "nul":
            assert '"s":"a\\u0000b"' in text
    missing = await api.get(document_path(c.id, "None"))
    assert missing.status == 404

    # Every cursor the listing hands out is accepted, and the pages cover every document.
    seen: list[str] = []
    params: dict[str, str] = {"limit": "1"}
    while True:
        reply = await api.get(f"/connectors/{c.id}/documents", params=params)
        assert reply.status == 200, await reply.text()
        page = await reply.json()
        seen.extend(d["external_id"] for d in page["data"])
        if page["next_cursor"] is None:
            break
        params = {"limit": "1", "cursor": page["next_cursor"]}
    assert sorted(seen) == sorted(VALID)

    reply = await api.get(f"/connectors/{c.id}/runs")
    shown = (await reply.json())["data"][0]
    assert shown["documents_rejected"] == len(REASONS)
    assert shown["rejections"] == [
        {"page": page, "record": record, "reason": reason} for page, record, reason in REASONS
    ]
    assert shown["note"] is None

    # The same records again: same canonical text and hash, nothing enqueued.
    again = await sync(daemon, c.id)
    assert (again.documents_seen, again.documents_enqueued) == (8, 0)
    assert again.documents_rejected == len(REASONS)


async def test_a_page_of_only_rejected_records_still_commits(
    make_any_daemon: DaemonFactory, source_url: str
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    source = {**source_config(source_url), "id_field": "missing"}
    c = await daemon.create_connector({"name": "no-ids", "source": source})

    run = await sync(daemon, c.id)

    assert run.outcome is RunOutcome.SUCCEEDED, run.error
    assert (run.pages, run.documents_seen, run.documents_rejected) == (2, 0, 18)
    assert len(run.rejections) == 10
    assert run.rejections[0] == Rejection(0, "id field 'missing' is missing", page=1)
    assert (await daemon.get_connector(c.id)).progress.pages == 2


# --- the rules, without a daemon -------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"id": None}, "id field 'id' is null"),
        ({"id": True}, "id field 'id' is a boolean"),
        ({"id": False}, "id field 'id' is a boolean"),
        ({"id": 1.0}, "id field 'id' is a number that is not an integer"),
        ({"id": {}}, "id field 'id' is an object"),
        ({"id": []}, "id field 'id' is an array"),
        ({"id": ""}, "id field 'id' is an empty string"),
        ({"other": 1}, "id field 'id' is missing"),
        ("text", "record is not an object"),
        ({"id": "a\x00b"}, "id field 'id' contains a NUL character"),
        ({"id": "a\ud800"}, "id field 'id' is not valid Unicode (a lone surrogate)"),
        (
            {"id": "x" * (MAX_EXTERNAL_ID_BYTES + 1)},
            f"id field 'id' is longer than {MAX_EXTERNAL_ID_BYTES} bytes",
        ),
        ({"id": 10**600}, f"id field 'id' is longer than {MAX_EXTERNAL_ID_BYTES} bytes"),
    ],
)
def test_unusable_ids_are_rejected(record: Any, reason: str) -> None:
    docs, rejected = document_inputs([{"id": "ok"}, record, {"id": "ok2"}])
    assert [d.external_id for d in docs] == ["ok", "ok2"]
    assert rejected == [Rejection(1, reason)]


@pytest.mark.parametrize(
    ("value", "external_id"),
    [
        (7, "7"),
        (-7, "-7"),
        (0, "0"),
        (2**80, "1208925819614629174706176"),
        ("é/✓ %?#", "é/✓ %?#"),
        (" ", " "),
        ("x" * MAX_EXTERNAL_ID_BYTES, "x" * MAX_EXTERNAL_ID_BYTES),
    ],
)
def test_usable_ids(value: Any, external_id: str) -> None:
    assert external_id_of({"id": value}, ["id"]) == external_id


def test_dotted_id_field() -> None:
    docs, rejected = document_inputs(
        [{"meta": {"key": 5}}, {"meta": 5}, {"meta": {"key": None}}], "meta.key"
    )
    assert [d.external_id for d in docs] == ["5"]
    assert rejected == [
        Rejection(1, "id field 'meta.key' is missing"),
        Rejection(2, "id field 'meta.key' is null"),
    ]


def test_canonical_json_is_exact_and_refuses_what_json_cannot_hold() -> None:
    record = {"b": 2**70, "a": "\x00é", "c": [1.5, None]}
    text = canonical_json(record).decode()
    assert text == '{"a":"\\u0000é","b":1180591620717411303424,"c":[1.5,null]}'
    assert parse_json(text) == record and type(parse_json(text)["b"]) is int
    # orjson's path and the exact path agree where both can write.
    assert canonical_json({"b": 2, "a": "\x00é"}) == b'{"a":"\\u0000\xc3\xa9","b":2}'
    for bad in (
        {"x": float("nan")},
        {"x": [float("inf")]},
        {"x": "\ud800"},
        {"x": "\ud800", "n": 2**70},
    ):
        with pytest.raises(PayloadError):
            canonical_json(bad)
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(PayloadError):
        canonical_json(deep)
