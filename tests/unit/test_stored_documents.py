"""Documents as a store decodes them: ``Document.stored`` and a payload parsed on first read."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime

import pytest

from syncd.models import PARSE_ON_READ, DocOp, DocStatus, Document
from syncd.store.codec import DOCUMENT_COLUMNS, document_from_row

T0 = datetime(2024, 5, 1, tzinfo=UTC)
TEXT = '{"big":123456789012345678901234567890,"id":"a-1","title":"Ünïcode"}'


def row(payload: str | None = TEXT) -> tuple[object, ...]:
    """A row of DOCUMENT_COLUMNS (then the payload), as the SQLite store reads one."""
    values: dict[str, object] = {
        "connector_id": "c1",
        "external_id": "a-1",
        "status": "running",
        "content_hash": "h" * 64,
        "created_at": "2024-05-01T00:00:00.000000Z",
        "updated_at": "2024-05-01T00:00:01.000000Z",
        "error": None,
        "attempts": 2,
        "indexed_at": None,
        "lease_token": "t1",
        "lease_until": "2024-05-01T00:05:00.000000Z",
        "op": "index",
        "missed": 1,
    }
    assert list(values) == list(DOCUMENT_COLUMNS)
    return (*values.values(), *(() if payload is None else (payload,)))


def test_a_decoded_row_equals_the_document_the_constructor_builds() -> None:
    decoded = document_from_row(row(), with_payload=True)
    built = Document(
        connector_id="c1",
        external_id="a-1",
        status=DocStatus.RUNNING,
        content_hash="h" * 64,
        created_at=T0,
        updated_at=T0.replace(second=1),
        attempts=2,
        payload={"big": 123456789012345678901234567890, "id": "a-1", "title": "Ünïcode"},
        lease_token="t1",
        lease_until=T0.replace(minute=5),
        payload_json=TEXT,
        op=DocOp.INDEX,
        missed=1,
    )
    assert decoded == built
    assert decoded.payload_json == TEXT
    assert decoded.fields is None


def test_stored_fills_every_field_of_the_dataclass() -> None:
    """A field added to Document must be given by the store's decoding too."""
    decoded = document_from_row(row(), with_payload=False)
    state = vars(decoded)
    names = {f.name for f in dataclasses.fields(Document)}
    assert set(state) == (names - {"payload"}) | {"_payload"}
    assert decoded.payload is None


def test_the_payload_is_parsed_once_on_first_read_and_exactly() -> None:
    decoded = document_from_row(row(), with_payload=True)
    assert vars(decoded)["_payload"] is PARSE_ON_READ
    first = decoded.payload
    assert first["big"] == 123456789012345678901234567890  # beyond 64 bits, every digit
    assert decoded.payload is first  # kept, not parsed again
    assert vars(decoded)["_payload"] is first


def test_a_document_stays_frozen() -> None:
    decoded = document_from_row(row(), with_payload=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decoded.payload = {}  # type: ignore[misc]


@pytest.mark.parametrize(
    "clone", [copy.copy, copy.deepcopy, lambda d: pickle.loads(pickle.dumps(d))]
)
def test_copies_and_pickles_still_parse_the_payload(clone: object) -> None:
    decoded = document_from_row(row(), with_payload=True)
    copied = clone(decoded)  # type: ignore[operator]
    assert copied.payload == decoded.payload
    assert copied == decoded


def test_replace_keeps_the_payload() -> None:
    decoded = document_from_row(row(), with_payload=True)
    changed = dataclasses.replace(decoded, fields=None, error="x")
    assert changed.payload == decoded.payload
    assert changed.payload_json == TEXT


def test_a_document_built_by_hand_keeps_its_payload_as_given() -> None:
    document = Document("c1", "a-1", DocStatus.PENDING, "h", T0, T0, payload=[1, 2])
    assert document.payload == [1, 2]
    assert Document("c1", "a-1", DocStatus.PENDING, "h", T0, T0).payload is None
