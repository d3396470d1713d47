"""The fast connector rendering of the API is byte for byte the plain one, a changed
configuration is never answered from the masked-config cache, and an unchanged row read from
the store is answered from the connector cache."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from syncd.api import views
from syncd.models import (
    Connector,
    ConnectorStatus,
    DocStatus,
    Progress,
    SyncStatus,
    Transition,
    Waiting,
    WaitReason,
)
from syncd.store.codec import connector_from_row, connector_to_row
from syncd.store.sqlite import SQLiteStore
from tests.contract.factories import make_connector

NOW = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)

SOURCE: dict[str, Any] = {
    "type": "http",
    "url": "https://user:pa%40ss@api.example.com/v1/items?api_key=abc&page=1",
    "headers": {"Authorization": "Bearer ${env:API_TOKEN}", "X-Tenant": "acme"},
    "params": {"limit": "500", "token": "${file:/run/secrets/q}"},
    "auth": {
        "type": "oauth2",
        "grant": "client_credentials",
        "token_url": "https://auth.example.com/token",
        "client_id": "syncd",
        "client_secret": "${env:CLIENT_SECRET}",
        "scopes": ["read", "write"],
        "extra": {"client_assertion": "eyJ.x.y"},
    },
    "pagination": {"cursor_path": "next", "cursor_param": "cursor"},
    "records": "data",
    "id_field": "id",
    "timeout": 30,
    "ratio": 0.5,
    "label": "caf\u00e9 \u2603 \U0001f600",
}


def _connectors() -> list[Connector]:
    base = Connector(
        id="c-1",
        name="crm contacts",
        source=SOURCE,
        indexer={
            "type": "webhook",
            "url": "https://sink.example.com/index?sig=s3cr3t",
            "headers": {"Authorization": "Bearer literal-secret"},
            "batch_size": 10,
        },
        created_at=NOW,
        updated_at=NOW,
    )
    return [
        base,
        dataclasses.replace(
            base,
            id="c-2",
            name="n\u00e4me \u2603",  # not ASCII: json.dumps escapes it
            status=ConnectorStatus.PAUSED,
            sync_status=SyncStatus.RUNNING,
            run_id="r-1",
            sync_started_at=NOW,
            last_synced_at=NOW - timedelta(hours=1),
            next_run_at=NOW + timedelta(minutes=5),
            sync_schedule="*/5 * * * *",
            sync_timezone="Europe/Paris",
            sync_owner="host:1",
            sync_heartbeat_at=NOW,
            progress=Progress(12, 6000),
            waiting=Waiting(WaitReason.HOST_COOLDOWN, NOW + timedelta(seconds=3)),
            hash_fields=("title", "author.name"),
            retry_on_status=(429, 503),
            page_retry_backoff=2.5,
            throttle_seconds=0.25,
            prune=False,
            prune_max_fraction=0.1,
            full_crawl_schedule="0 3 * * *",
            deletions_held=7,
            last_error='failed: "quoted" \\ and \n newline',
        ),
        dataclasses.replace(
            base,
            id="c-3",
            # A plugin indexer with a token, an integer where a float is usual, offsets.
            indexer={"type": "plugin", "name": "acme", "config": {"api_token": "t", "n": 1}},
            source={"type": "http", "url": "http://h/x", "headers": {}},
            page_retry_backoff=2,  # type: ignore[arg-type]
            updated_at=NOW.astimezone(timezone(timedelta(hours=2))),
            sync_queued_at=NOW.replace(tzinfo=None),  # naive: taken as UTC
            sync_status=SyncStatus.QUEUED,
        ),
        dataclasses.replace(
            base,
            id="c-4",
            source={1: "non-string key", "headers": {"A": "b"}},  # type: ignore[dict-item]
            indexer={"type": "store"},
        ),
    ]


COUNTS: list[dict[DocStatus, int]] = [
    {},
    {DocStatus.PENDING: 3, DocStatus.INDEXED: 5000},
    dict.fromkeys(DocStatus, 1),
    {DocStatus.FAILED: 2},
]


def _plain(connector: Connector, counts: dict[DocStatus, int]) -> str:
    # What the API wrote before: web.json_response's json.dumps of connector_json.
    return json.dumps(views.connector_json(connector, counts))


@pytest.mark.parametrize("index", range(4))
def test_connector_text_is_json_dumps_of_connector_json(index: int) -> None:
    connector, counts = _connectors()[index], COUNTS[index]
    for _ in range(2):  # the second time from the cache
        assert views.connector_text(connector, counts) == _plain(connector, counts)


def test_rows_read_back_render_the_same() -> None:
    for connector in _connectors()[:2]:
        read = connector_from_row(connector_to_row(connector))
        assert read == connector
        assert views.connector_text(read, {}) == _plain(connector, {})


def test_secrets_are_masked() -> None:
    text = views.connector_text(_connectors()[0], {})
    for secret in ("pa%40ss", "abc", "API_TOKEN", "CLIENT_SECRET", "eyJ", "literal", "s3cr3t"):
        assert secret not in text


@pytest.mark.parametrize("next_cursor", [None, "Yy0x", "~"])
def test_page_text_is_json_dumps_of_the_page(next_cursor: str | None) -> None:
    for connectors in ([], _connectors()):
        texts = [views.connector_text(c, {}) for c in connectors]
        plain = {"data": [views.connector_json(c, {}) for c in connectors]}
        plain["next_cursor"] = next_cursor  # type: ignore[assignment]
        assert views.connectors_page_text(texts, next_cursor) == json.dumps(plain)


def test_a_changed_config_is_not_served_from_the_cache() -> None:
    first = _connectors()[0]
    views.connector_text(first, {})
    changes: list[dict[str, Any]] = [
        {"source": {**SOURCE, "headers": {"X-Other": "v"}}},
        {"source": {**SOURCE, "url": "https://api.example.com/v2/items"}},
        {"source": {**SOURCE, "records": "items"}},
        {"source": dict(reversed(SOURCE.items()))},  # key order is shown
        {"source": {**SOURCE, "timeout": 30.0}},  # 30 and 30.0 are written differently
        {"source": {**SOURCE, "timeout": True}},
        {"indexer": {**first.indexer, "headers": {"Authorization": "x", "X-Key": "y"}}},
    ]
    for change in changes:
        changed = dataclasses.replace(first, **change)
        assert views.connector_text(changed, {}) == _plain(changed, {})
        assert views.connector_text(first, {}) == _plain(first, {})


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "MASKED_CACHE_SIZE", 3)
    first = _connectors()[0]
    for n in range(10):
        changed = dataclasses.replace(first, source={**SOURCE, "timeout": n})
        assert views.connector_text(changed, {}) == _plain(changed, {})
        assert len(views._masked_texts) <= 3


async def test_the_store_answers_an_unchanged_row_from_the_cache(tmp_path: Path) -> None:
    # connector_text hits only on the very objects it rendered: the store hands them out
    # again for an unchanged row (codec.DecodedRows). Were it to stop, the API would get
    # slower without a word: this says it.
    store = SQLiteStore(tmp_path / "syncd.db")
    await store.open()
    try:
        c = await store.create_connector(make_connector("cached"))
        one = await store.get_connector_with_counts(c.id)
        two = await store.get_connector_with_counts(c.id)
        assert one is not None and two is not None
        text = views.connector_text(*one)
        assert views.connector_text(*two) is text
        first, again = (
            await store.list_connectors_with_counts(),
            await store.list_connectors_with_counts(),
        )
        assert views.connector_text(*again[0]) is views.connector_text(*first[0])
        await store.mutate_connector(
            c.id, lambda x: Transition(dataclasses.replace(x, name="renamed"))
        )
        changed = await store.get_connector_with_counts(c.id)
        assert changed is not None
        assert '"name": "renamed"' in views.connector_text(*changed)
    finally:
        await store.close()
