"""Incremental marks as real APIs take them (syncd.sources.http.marks): the stored high-water value,
moved back by ``lag`` and written as stored, ISO 8601, Unix seconds, Unix milliseconds or a
strftime pattern. Pure: no clock, every time below is fixed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from syncd.sources.http.marks import as_time, mark_value

NEW_YEAR = datetime(2024, 1, 1, tzinfo=UTC)
NEW_YEAR_S = 1_704_067_200  # 2024-01-01T00:00:00Z in Unix seconds
NEW_YEAR_MS = NEW_YEAR_S * 1000


# --- as_time: what a mark means as a time ------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "2024-01-01T00:00:00Z",
        "2024-01-01T00:00:00+00:00",
        "2024-01-01T00:00:00.000+0000",  # Jira's spelling
        "2024-01-01T00:00:00",  # no offset: UTC
        "2024-01-01",
        " 2024-01-01T00:00:00Z ",
        "2024-01-01T05:30:00+05:30",
        "2023-12-31T19:00:00-05:00",
        NEW_YEAR_S,
        float(NEW_YEAR_S),
        str(NEW_YEAR_S),
        NEW_YEAR_MS,
        str(NEW_YEAR_MS),
    ],
)
def test_iso_text_and_unix_numbers_read_as_the_same_utc_time(value: Any) -> None:
    moment = as_time(value)
    assert moment == NEW_YEAR
    assert moment.tzinfo is UTC


def test_milliseconds_start_at_ten_to_the_eleventh() -> None:
    # Below 10^11: seconds (a date in the year 5138); from it: milliseconds (in 1973).
    assert as_time(99_999_999_999) == datetime(5138, 11, 16, 9, 46, 39, tzinfo=UTC)
    assert as_time(100_000_000_000) == datetime(1973, 3, 3, 9, 46, 40, tzinfo=UTC)


def test_a_fractional_unix_mark_keeps_its_fraction() -> None:
    assert as_time(NEW_YEAR_S + 0.25) == datetime(2024, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)
    assert as_time(NEW_YEAR_MS + 250) == datetime(2024, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)
    assert as_time("1704067200.000100") == datetime(2024, 1, 1, 0, 0, 0, 100, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [None, True, False, [], {}, [NEW_YEAR_S], "", "yesterday", "nan", "inf", "2024-13-01"],
)
def test_a_value_that_is_no_time_is_refused(value: Any) -> None:
    with pytest.raises(ValueError):
        as_time(value)


def test_a_non_time_names_the_value() -> None:
    with pytest.raises(ValueError, match=r"not a time: True"):
        as_time(True)


# --- mark_value: as stored -----------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["2024-01-01T00:00:00.000+0000", NEW_YEAR_MS, 3.5, "opaque-token", True, None]
)
def test_as_stored_without_lag_sends_the_value_untouched(value: Any) -> None:
    assert mark_value(value) is value
    assert mark_value(value, "as_stored", 0) is value


def test_lag_on_a_numeric_mark_keeps_its_unit_and_type() -> None:
    assert mark_value(NEW_YEAR_S + 300, "as_stored", 300) == NEW_YEAR_S
    assert type(mark_value(NEW_YEAR_S + 300, "as_stored", 300)) is int
    # Milliseconds stay milliseconds: 300 s is 300000 of them.
    assert mark_value(NEW_YEAR_MS + 300_000, "as_stored", 300) == NEW_YEAR_MS
    assert mark_value(NEW_YEAR_MS, "as_stored", 1.5) == NEW_YEAR_MS - 1500
    # A float stays a float; an int moved by a fractional lag becomes one.
    assert mark_value(NEW_YEAR_S + 300.5, "as_stored", 300) == NEW_YEAR_S + 0.5
    assert mark_value(NEW_YEAR_S, "as_stored", 0.5) == NEW_YEAR_S - 0.5


def test_lag_on_an_iso_mark_sends_iso_utc_with_z() -> None:
    assert mark_value("2024-01-01T00:05:00Z", "as_stored", 300) == "2024-01-01T00:00:00Z"
    assert mark_value("2024-01-01T05:35:00+05:30", "as_stored", 300) == "2024-01-01T00:00:00Z"
    assert mark_value("2024-01-01T00:05:00.250Z", "as_stored", 300) == (
        "2024-01-01T00:00:00.250000Z"
    )


def test_lag_on_a_numeric_text_mark_keeps_it_unix_seconds() -> None:
    # Slack's `ts` ("1704067500.000100") is sent back as `oldest`, which takes Unix seconds.
    sent = mark_value("1704067500.000100", "as_stored", 300)
    assert float(sent) == pytest.approx(NEW_YEAR_S + 0.0001)


# --- mark_value: each format ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fmt", "sent"),
    [
        # ISO 8601: UTC, "Z", microseconds only when there are some.
        ("2024-01-01T00:00:00.000+0000", "iso8601", "2024-01-01T00:00:00Z"),
        ("2024-01-01T05:30:00+05:30", "iso8601", "2024-01-01T00:00:00Z"),
        ("2024-01-01T00:00:00", "iso8601", "2024-01-01T00:00:00Z"),
        (NEW_YEAR_S, "iso8601", "2024-01-01T00:00:00Z"),
        (NEW_YEAR_MS + 250, "iso8601", "2024-01-01T00:00:00.250000Z"),
        (str(NEW_YEAR_S), "iso8601", "2024-01-01T00:00:00Z"),
        (1_700_000_000, "iso8601", "2023-11-14T22:13:20Z"),
        # Unix seconds: an int, rounded down.
        ("2024-01-01T00:00:00Z", "unix", NEW_YEAR_S),
        ("2024-01-01T00:00:00.999Z", "unix", NEW_YEAR_S),
        (NEW_YEAR_MS + 999, "unix", NEW_YEAR_S),
        (NEW_YEAR_S + 0.9, "unix", NEW_YEAR_S),
        (NEW_YEAR_S, "unix", NEW_YEAR_S),
        ("1969-12-31T23:59:59.5Z", "unix", -1),
        # Unix milliseconds: an int.
        ("2024-01-01T00:00:00Z", "unix_ms", NEW_YEAR_MS),
        ("2024-01-01T00:00:00.250Z", "unix_ms", NEW_YEAR_MS + 250),
        (NEW_YEAR_S, "unix_ms", NEW_YEAR_MS),
        (NEW_YEAR_S + 0.25, "unix_ms", NEW_YEAR_MS + 250),
        (NEW_YEAR_MS + 7, "unix_ms", NEW_YEAR_MS + 7),
        (str(NEW_YEAR_MS + 7), "unix_ms", NEW_YEAR_MS + 7),
        # strftime patterns, in UTC.
        ("2024-01-01T03:56:39.000+0000", "%Y/%m/%d %H:%M", "2024/01/01 03:56"),
        ("2024-01-01T05:30:00+05:30", "%Y-%m-%d %H:%M", "2024-01-01 00:00"),
        (NEW_YEAR_MS, "%Y%m%dT%H%M%S", "20240101T000000"),
        (NEW_YEAR_S, "%d %b %Y", "01 Jan 2024"),
    ],
)
def test_each_format_writes_the_mark_as_the_api_takes_it(value: Any, fmt: str, sent: Any) -> None:
    out = mark_value(value, fmt)
    assert out == sent
    assert type(out) is type(sent)


@pytest.mark.parametrize(
    ("value", "fmt", "sent"),
    [
        ("2024-01-01T00:05:00Z", "unix", NEW_YEAR_S),
        ("2024-01-01T00:05:00Z", "unix_ms", NEW_YEAR_MS),
        ("2024-01-01T00:05:00Z", "iso8601", "2024-01-01T00:00:00Z"),
        (NEW_YEAR_S + 300, "iso8601", "2024-01-01T00:00:00Z"),
        (NEW_YEAR_S + 300, "unix_ms", NEW_YEAR_MS),
        (NEW_YEAR_MS + 300_000, "unix", NEW_YEAR_S),
        (NEW_YEAR_MS + 300_000, "iso8601", "2024-01-01T00:00:00Z"),
        # Jira's recipe: to the minute, 300 s before the latest update.
        ("2024-01-01T03:56:39.000+0000", "%Y/%m/%d %H:%M", "2024/01/01 03:51"),
    ],
)
def test_lag_moves_the_mark_back_before_it_is_written(value: Any, fmt: str, sent: Any) -> None:
    assert mark_value(value, fmt, 300) == sent


def test_lag_crosses_day_and_year_boundaries() -> None:
    assert mark_value("2024-01-01T00:00:30Z", "iso8601", 60) == "2023-12-31T23:59:30Z"
    assert mark_value(NEW_YEAR_S, "%Y/%m/%d", 1) == "2023/12/31"


@pytest.mark.parametrize("fmt", ["iso8601", "unix", "unix_ms", "%Y/%m/%d"])
@pytest.mark.parametrize("value", ["not a date", "", None, True, [1], {"t": 1}])
def test_a_conversion_of_a_value_that_is_no_time_raises_value_error(fmt: str, value: Any) -> None:
    with pytest.raises(ValueError):
        mark_value(value, fmt)


@pytest.mark.parametrize("value", ["opaque-token", None, False])
def test_lag_on_a_mark_that_is_no_time_raises_value_error(value: Any) -> None:
    with pytest.raises(ValueError):
        mark_value(value, "as_stored", 60)


@pytest.mark.parametrize(
    ("value", "fmt", "lag"),
    [
        (1e20, "iso8601", 0),  # OSError (EOVERFLOW) from datetime.fromtimestamp
        ("0001-01-01T00:00:00Z", "unix", 300),  # OverflowError from the subtraction
    ],
)
def test_a_mark_out_of_the_representable_range_is_a_value_error(
    value: Any, fmt: str, lag: float
) -> None:
    # HttpSource catches ValueError to fail the run with "incremental mark … is not a time".
    with pytest.raises(ValueError):
        mark_value(value, fmt, lag)
