"""A backfill's window in the ``http`` source (:mod:`syncd.sources.http.window`): values read
as the connector's format reads them, the window's request, the records past its end."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.models import CrawlWindow
from syncd.sources.http.pagination import PageRequest
from syncd.sources.http.window import beyond, read_mark, window_request


def config(**incremental: Any) -> dict[str, Any]:
    return {"incremental": {"field": "u", "param": "since", **incremental}}


@pytest.mark.parametrize(
    ("fmt", "value"),
    [
        ("as_stored", "opaque"),
        ("as_stored", 17),
        ("iso8601", "2024-05-01T10:00:00Z"),
        ("iso8601", 1714557600),
        ("unix", "2024-05-01"),
        ("unix_ms", 1714557600000),
        ("%Y/%m/%d", "2024-05-01T10:00:00+02:00"),
    ],
)
def test_what_a_format_reads(fmt: str, value: Any) -> None:
    read_mark(config(format=fmt), value)


@pytest.mark.parametrize(
    ("cfg", "value", "message"),
    [
        (config(format="unix"), "soon", "the incremental format 'unix' cannot read 'soon'"),
        (config(lag=60), "opaque", "the incremental format 'as_stored' cannot read 'opaque'"),
        (config(), True, "Must be a string or a number"),
        (config(), None, "Must be a string or a number"),
        ({}, 1, "The connector's source has no incremental field"),
    ],
)
def test_what_a_format_cannot_read(cfg: dict[str, Any], value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        read_mark(cfg, value)


def test_values_are_ordered_as_their_kind_says() -> None:
    iso = config(format="iso8601")
    assert read_mark(iso, "2024-05-01T10:00:00Z") < read_mark(iso, 1714557601)  # one second on
    plain = config()
    assert read_mark(plain, 9) < read_mark(plain, "10")  # numeric text is a number
    assert read_mark(plain, "2024-05-01T10:00:00+02:00") < read_mark(plain, "2024-05-01T09:00:00Z")
    assert read_mark(plain, "b")[0] != read_mark(plain, 1)[0]


def test_records_at_or_after_the_end_are_past_the_window() -> None:
    until = read_mark(config(), "2024-05-02T00:00:00Z")
    assert beyond({"u": "2024-05-02T00:00:00.000000Z"}, "u", until, "as_stored")
    assert beyond({"u": "2024-05-03T00:00:00Z"}, "u", until, "as_stored")
    assert not beyond({"u": "2024-05-01T23:59:59.999999Z"}, "u", until, "as_stored")
    # Not known to be past it: kept.
    for record in ({"u": None}, {}, {"u": "soon"}, {"u": 5}, "not an object", {"u": True}):
        assert not beyond(record, "u", until, "as_stored")
    numbers = read_mark(config(), 100)
    assert beyond({"u": 100}, "u", numbers, "as_stored")
    assert not beyond({"u": "99.5"}, "u", numbers, "as_stored")
    unix = read_mark(config(format="unix"), "2024-05-02T00:00:00Z")
    assert beyond({"u": 1714608000}, "u", unix, "unix")
    assert not beyond({"u": 1714607999}, "u", unix, "unix")


def inc(**incremental: Any) -> dict[str, Any]:
    result: dict[str, Any] = config(**incremental)["incremental"]
    return result


def test_the_request_of_a_window() -> None:
    base = PageRequest("http://h/items", {"limit": "10"})
    window = CrawlWindow("2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z")
    # `since` where the mark goes, without lag; `until` only where the config names it.
    sent = window_request(base, inc(lag=3600), window)
    assert sent.params == {"limit": "10", "since": "2024-05-01T00:00:00Z"}
    sent = window_request(base, inc(format="unix", until_param="until"), window)
    assert sent.params == {"limit": "10", "since": "1714521600", "until": "1714608000"}
    cfg = inc(
        template='updated >= "{since}"',
        window_template='updated >= "{since}" AND updated < "{until}"',
    )
    sent = window_request(base, cfg, window)
    assert sent.params["since"] == (
        'updated >= "2024-05-01T00:00:00Z" AND updated < "2024-05-02T00:00:00Z"'
    )
    # Open-ended: the template of the mark.
    sent = window_request(base, cfg, CrawlWindow("2024-05-01T00:00:00Z"))
    assert sent.params["since"] == 'updated >= "2024-05-01T00:00:00Z"'
    body = window_request(
        PageRequest("http://h/search", {}, {"q": 1}),
        inc(**{"in": "body", "param": "range.gte", "until_param": "range.lt"}),
        CrawlWindow(5, 9),
    )
    assert body.body == {"q": 1, "range": {"gte": 5, "lt": 9}}
