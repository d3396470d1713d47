"""Which indexing failures are tried again (syncd.errors.is_transient), and when
(syncd.rules.documents.split_retries)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from syncd.errors import ClientConnectionError, ClientTimeoutError, ServerError, is_transient
from syncd.indexers.postgres import PostgresIndexerError
from syncd.indexers.webhook import WebhookError
from syncd.models import DocStatus
from syncd.rules.documents import RETRY_WAIT_MAX, Retry, split_retries

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Flagged(Exception):
    transient = True


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (ClientTimeoutError("read timed out"), True),
        (ClientConnectionError("cannot connect"), True),
        (ServerError(503), True),
        (WebhookError("HTTP 429", 429), True),
        (WebhookError("HTTP 408", 408), True),
        (WebhookError("HTTP 500", 500), True),
        (WebhookError("HTTP 400", 400), False),
        (WebhookError("HTTP 404", 404), False),
        (PostgresIndexerError("connection lost", transient=True), True),
        (PostgresIndexerError("value too long"), False),
        (Flagged(), True),
        (ValueError("bad document"), False),
    ],
)
def test_what_is_transient(exc: BaseException, expected: bool) -> None:
    assert is_transient(exc) is expected


def test_transient_failures_wait_doubling_until_the_last_attempt() -> None:
    results = [
        ("a", DocStatus.FAILED, "HTTP 503"),
        ("b", DocStatus.FAILED, "HTTP 503"),
        ("c", DocStatus.FAILED, "HTTP 400"),
        ("d", DocStatus.INDEXED, None),
        ("e", DocStatus.FAILED, "Index timeout"),
    ]
    final, retries = split_retries(
        results,
        {"a", "b", "e"},
        {"a": 1, "b": 5, "c": 1, "d": 1, "e": 3},
        max_attempts=5,
        backoff=10.0,
        now=NOW,
    )
    assert final == [results[1], results[2], results[3]]  # b: its fifth attempt; c: a 400
    assert retries == [
        Retry("a", "HTTP 503 (attempt 1 of 5; retrying)", NOW + timedelta(seconds=10)),
        Retry("e", "Index timeout (attempt 3 of 5; retrying)", NOW + timedelta(seconds=40)),
    ]


def test_the_wait_is_capped() -> None:
    _, [retry] = split_retries(
        [("a", DocStatus.FAILED, "x")], {"a"}, {"a": 30}, max_attempts=99, backoff=10.0, now=NOW
    )
    assert retry.not_before == NOW + RETRY_WAIT_MAX


def test_one_attempt_means_no_retry() -> None:
    final, retries = split_retries(
        [("a", DocStatus.FAILED, "x")], {"a"}, {"a": 1}, max_attempts=1, backoff=1.0, now=NOW
    )
    assert (len(final), retries) == (1, [])
