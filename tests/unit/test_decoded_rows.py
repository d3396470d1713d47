"""Decoded rows are shared while a row's values are unchanged, and the API's text of a
connector follows: a changed value is decoded and rendered anew."""

from __future__ import annotations

import sqlite3
from typing import Any

from syncd.api import views
from syncd.models import DocStatus
from syncd.store.codec import DecodedRows
from tests.contract.factories import make_connector


def _decoder() -> tuple[DecodedRows[dict[str, Any]], list[Any]]:
    calls: list[Any] = []

    def decode(row: Any) -> dict[str, Any]:
        calls.append(row)
        return {"values": list(row)}

    return DecodedRows(decode, size=3), calls


def test_equal_rows_decode_once_and_share_the_result() -> None:
    decoded, calls = _decoder()
    first = decoded(("a", 1, None))
    assert decoded(("a", 1, None)) is first
    assert decoded(("a", 2, None)) is not first
    assert len(calls) == 2


def test_native_json_values_are_keyed_by_their_text_in_their_order() -> None:
    decoded, calls = _decoder()
    one = decoded(("a", {"x": 1, "y": [1, 2]}))
    assert decoded(("a", {"x": 1, "y": [1, 2]})) is one
    assert decoded(("a", {"y": [1, 2], "x": 1})) is not one  # key order is answered
    assert decoded(("a", {"x": 1, "y": [1, 3]})) is not one
    assert len(calls) == 3


def test_sqlite_rows_are_keyed_by_their_values() -> None:
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    decoded, calls = _decoder()
    row = db.execute("SELECT 'a' AS id, 1 AS n").fetchone()
    same = db.execute("SELECT 'a' AS id, 1 AS n").fetchone()
    assert decoded(same) is decoded(row)
    assert len(calls) == 1


def test_a_full_cache_starts_over() -> None:
    decoded, calls = _decoder()
    for n in range(5):
        decoded((n,))
    assert decoded((4,)) is decoded((4,))
    assert len(calls) == 5


def test_connector_text_follows_the_objects_it_was_given() -> None:
    c = make_connector("text-cache")
    counts = dict.fromkeys(DocStatus, 0)
    text = views.connector_text(c, counts)
    assert views.connector_text(c, counts) is text
    # Other objects, even equal ones, are rendered anew; a change shows.
    other_counts = {**counts, DocStatus.PENDING: 3}
    changed = views.connector_text(c, other_counts)
    assert '"pending": 3' in changed
    renamed = make_connector("text-cache-2")
    assert '"name": "text-cache-2"' in views.connector_text(renamed, counts)


def test_a_json_column_first_null_then_an_object_is_keyed_right() -> None:
    decoded, calls = _decoder()
    empty = decoded(("a", None, 1))
    full = decoded(("a", {"k": [1]}, 1))
    assert full is not empty
    assert decoded(("a", {"k": [1]}, 1)) is full
    assert decoded(("a", None, 1)) is empty  # the column keyed as text now: None stays None
    assert decoded(("a", {"k": [2]}, 1)) is not full
    assert len(calls) == 3
