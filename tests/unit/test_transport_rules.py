"""Pure rules of the transport: Retry-After parsing, timeout precedence, backoff schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from structlog.testing import capture_logs

from syncd.errors import SourceError
from syncd.http.retry_after import MAX_RETRY_AFTER, clamp_retry_after, parse_retry_after
from syncd.http.timeouts import ENV_CONNECT, ENV_READ, Timeouts, resolve_timeouts
from syncd.http.transport import Response, Transport
from syncd.http.urls import safe_url

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

# --- Retry-After ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 7 ", 7.0),
        ("1.5", 1.5),
        ("-3", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
        ("inf", None),
    ],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_retry_after_http_date_in_the_future() -> None:
    value = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert value.endswith("GMT")
    assert parse_retry_after(value, now=NOW) == 90.0


def test_retry_after_http_date_in_the_past_is_zero() -> None:
    value = format_datetime(NOW - timedelta(hours=1), usegmt=True)
    assert parse_retry_after(value, now=NOW) == 0.0


def test_retry_after_obsolete_date_formats() -> None:
    # RFC 850 and asctime forms are still valid HTTP-dates.
    assert parse_retry_after("Wednesday, 01-May-24 12:00:30 GMT", now=NOW) == 30.0
    assert parse_retry_after("Wed May  1 12:01:00 2024", now=NOW) == 60.0


def test_retry_after_garbage_date_is_none() -> None:
    assert parse_retry_after("Wed, 99 Foo 2024 25:61:00 GMT", now=NOW) is None


@pytest.mark.parametrize(
    ("value", "expected"), [(120.0, 60.0), (60.0, 60.0), (3.0, 3.0), (-1.0, 0.0)]
)
def test_clamp_retry_after(value: float, expected: float) -> None:
    assert MAX_RETRY_AFTER == 60.0
    assert clamp_retry_after(value) == expected


# --- timeouts -------------------------------------------------------------------------

CONFIG = Timeouts(read=12.0, connect=3.0)


def test_built_in_timeouts() -> None:
    assert Timeouts() == Timeouts(read=30.0, connect=5.0)
    assert resolve_timeouts(None, config=Timeouts(), environ={}) == Timeouts(30.0, 5.0)


def test_config_applies_without_environment() -> None:
    assert resolve_timeouts(None, config=CONFIG, environ={}) == CONFIG


def test_environment_overrides_config() -> None:
    env = {ENV_READ: "45", ENV_CONNECT: "2.5"}
    assert resolve_timeouts(None, config=CONFIG, environ=env) == Timeouts(45.0, 2.5)


def test_explicit_overrides_environment_per_key() -> None:
    env = {ENV_READ: "45", ENV_CONNECT: "2.5"}
    assert resolve_timeouts({"read": 90}, config=CONFIG, environ=env) == Timeouts(90.0, 2.5)
    assert resolve_timeouts({"connect": 1}, config=CONFIG, environ=env) == Timeouts(45.0, 1.0)
    both = resolve_timeouts({"read": 1, "connect": 2}, config=CONFIG, environ=env)
    assert both == Timeouts(1.0, 2.0)


@pytest.mark.parametrize("raw", ["", "  ", "abc", "0", "-5", "nan", "NaN", "inf", "-inf", "1e999"])
def test_invalid_environment_value_warns_and_falls_back(raw: str) -> None:
    with capture_logs() as logs:
        result = resolve_timeouts(None, config=CONFIG, environ={ENV_READ: raw, ENV_CONNECT: "4"})
    assert result == Timeouts(read=12.0, connect=4.0)
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["variable"] == ENV_READ
    assert warnings[0]["value"] == raw
    assert warnings[0]["fallback"] == 12.0


def test_valid_environment_logs_nothing() -> None:
    with capture_logs() as logs:
        resolve_timeouts(None, config=CONFIG, environ={ENV_READ: "1", ENV_CONNECT: "2"})
    assert logs == []


@pytest.mark.parametrize("value", [0, -1, "30", True, float("nan"), float("inf"), None])
def test_invalid_explicit_value_is_a_source_error(value: object) -> None:
    with pytest.raises(SourceError, match=r"timeout\.read"):
        resolve_timeouts({"read": value}, config=CONFIG, environ={})


def test_unknown_explicit_key_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="total"):
        resolve_timeouts({"total": 3}, config=CONFIG, environ={})


# --- backoff, URLs, responses ---------------------------------------------------------


def test_transport_backoff_is_urllib3_style() -> None:
    transport = Transport(backoff_factor=2.0)
    assert [transport.backoff(n) for n in (1, 2, 3)] == [0.0, 4.0, 8.0]
    assert [Transport(backoff_factor=0.5).backoff(n) for n in (1, 2, 3, 4)] == [0, 1, 2, 4]


def test_transport_rejects_negative_retries() -> None:
    with pytest.raises(ValueError, match="retries"):
        Transport(retries=-1)


def test_safe_url_drops_credentials_and_query() -> None:
    assert safe_url("https://user:pw@api.example.com/v1/items?token=abc#x") == (
        "https://api.example.com/v1/items"
    )


def test_response_json_errors_are_source_errors() -> None:
    response = Response(200, {}, "http://h/items?key=secret", b"{not json")
    with pytest.raises(SourceError, match="invalid JSON from http://h/items") as info:
        response.json()
    assert "secret" not in str(info.value)
    assert Response(200, {}, "http://h", b'{"a": [1]}').json() == {"a": [1]}
    assert Response(204, {}, "http://h", b"\xff").text() == "\ufffd"
