"""Pure rules of rate limits announced in headers (syncd.http.ratelimit): which answer is a
rate-limit refusal, which header says what, epoch or delta resets, the structured RateLimit
field of draft-ietf-httpapi-ratelimit-headers, and the host cooldown they lead to. "Now" is
always passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from multidict import CIMultiDict

from syncd.http.budget import cooldown_seconds
from syncd.http.ratelimit import (
    DEFAULT_MAX_RATE_LIMIT_WAIT,
    MIN_RATE_LIMIT_WAIT,
    Quota,
    RateLimit,
    parse_ratelimit_field,
    quotas,
    rate_limit,
    refusal_note,
    reset_seconds,
)

NOW = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT
DATE = format_datetime(datetime.fromtimestamp(NOW, UTC), usegmt=True)


def github_403(reset: float, **extra: str) -> dict[str, str]:
    """GitHub's documented answer once the primary rate limit is used up."""
    return {
        "Date": DATE,
        "x-ratelimit-limit": "60",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-used": "60",
        "x-ratelimit-reset": str(int(reset)),
        "x-ratelimit-resource": "core",
        **extra,
    }


# --- reset values: epoch or delta -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30", 30.0),  # seconds from now
        ("0", 0.0),
        ("1.5", 1.5),
        (" 45 ", 45.0),
        ("999999999", 999_999_999.0),  # just under 10**9: still a delta
        (str(int(NOW) + 90), 90.0),  # Unix seconds (GitHub)
        (str(int(NOW) - 90), 0.0),  # a Unix time already past
        (str(int(NOW * 1000) + 2500), 2.5),  # Unix milliseconds
        ("1000000000", 0.0),  # 10**9 (September 2001) is a Unix time, long past
        ("-5", None),
        ("soon", None),
        ("", None),
        ("nan", None),
        ("inf", None),
        (None, None),
    ],
)
def test_reset_values(value: str | None, expected: float | None) -> None:
    assert reset_seconds(value, now=NOW) == expected


# --- the structured RateLimit field ---------------------------------------------------------


def test_structured_field_list_of_service_limits() -> None:
    # draft -08 and later: "policy";r=<remaining>;t=<seconds until reset>
    assert parse_ratelimit_field('"default";r=0;t=50', now=NOW) == [Quota(0, 50, "RateLimit")]
    assert parse_ratelimit_field('"burst";r=5;t=1, "daily";r=0;t=3600', now=NOW) == [
        Quota(5, 1, "RateLimit"),
        Quota(0, 3600, "RateLimit"),
    ]
    # A token as the policy name, a partition key and unknown parameters (comments).
    value = "default;r=999;pk=:dHJpYWwxMjEzMjM=:;acme-burst=4"
    assert parse_ratelimit_field(value, now=NOW) == [Quota(999, None, "RateLimit")]
    # A policy name with the separators in it.
    assert parse_ratelimit_field('"a=b, c;d";r=0;t=5', now=NOW) == [Quota(0, 5, "RateLimit")]


def test_structured_field_dictionary_of_draft_07() -> None:
    value = "limit=100, remaining=0, reset=50"
    assert parse_ratelimit_field(value, now=NOW) == [Quota(0, 50, "RateLimit")]
    # remaining is optional there; parameters are to be ignored.
    assert parse_ratelimit_field("limit=10;x=1, reset=7", now=NOW) == [Quota(None, 7, "RateLimit")]


@pytest.mark.parametrize(
    "value",
    [
        "",
        '"default;r=0;t=5',  # unterminated string
        '"default";r=-1;t=5',
        '"default";r=0;t=soon',
        '"default";R=0',  # keys are lower case
        '"default";r=0,',  # trailing comma
        'limit=100, "default";r=0',  # both forms at once
        "limit=100, remaining=x",
        "12 monkeys;r=0",
    ],
)
def test_a_malformed_structured_field_is_ignored_as_a_whole(value: str) -> None:
    assert parse_ratelimit_field(value, now=NOW) is None
    # ... and so does not decide anything on its own.
    assert rate_limit(429, {"RateLimit": value}, now=NOW) is None


def test_every_family_of_quotas_is_read() -> None:
    headers = {
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": str(int(NOW) + 30),
        "RateLimit-Remaining": "3;w=60",  # a draft -06 Item: its parameters dropped
        "RateLimit-Reset": "20",
        "RateLimit": '"daily";r=0;t=100',
    }
    assert quotas(headers, now=NOW) == [
        Quota(0, 30, "x-ratelimit-reset"),
        Quota(3, 20, "ratelimit-reset"),
        Quota(0, 100, "RateLimit"),
    ]


# --- which answers are rate-limit refusals, and the wait ------------------------------------


def test_githubs_403_waits_until_the_reset() -> None:
    limit = rate_limit(403, github_403(NOW + 1800), now=NOW)
    assert limit == RateLimit(
        1800.0, 1800.0, "x-ratelimit-reset", datetime.fromtimestamp(NOW + 1800, UTC)
    )
    # GitHub also answers 429 with the same headers.
    assert rate_limit(429, github_403(NOW + 1800), now=NOW) == limit


def test_an_epoch_reset_is_measured_from_the_servers_date() -> None:
    # The local clock runs 10 minutes ahead of the server's: the wait is still the 30 s
    # the server means (and not 0), measured from its Date.
    headers = github_403(NOW + 30)
    limit = rate_limit(403, headers, now=NOW + 600)
    assert limit is not None and limit.wait == 30.0
    # Without a (valid) Date, the local clock is the reference.
    del headers["Date"]
    limit = rate_limit(403, headers, now=NOW + 10)
    assert limit is not None and limit.wait == 20.0
    limit = rate_limit(403, {**headers, "Date": "yesterday"}, now=NOW + 10)
    assert limit is not None and limit.wait == 20.0


@pytest.mark.parametrize(
    "headers",
    [
        # A 403 without a remaining count of 0 is a plain refusal.
        {"x-ratelimit-remaining": "12", "x-ratelimit-reset": "30"},
        {"x-ratelimit-reset": "30"},
        {"Retry-After": "30"},
        {"RateLimit": '"default";r=4;t=30'},
        {},
        # Remaining 0, but nothing says when to come back.
        {"x-ratelimit-remaining": "0"},
        {"RateLimit": '"default";r=0'},
    ],
)
def test_403s_that_are_not_rate_limit_refusals(headers: dict[str, str]) -> None:
    assert rate_limit(403, headers, now=NOW) is None


@pytest.mark.parametrize(
    ("headers", "wait", "field"),
    [
        ({"RateLimit-Remaining": "0", "RateLimit-Reset": "50"}, 50.0, "ratelimit-reset"),
        ({"RateLimit": '"default";r=0;t=50'}, 50.0, "RateLimit"),
        ({"RateLimit": "limit=100, remaining=0, reset=50"}, 50.0, "RateLimit"),
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "40"}, 40.0, "x-ratelimit-reset"),
        ({"x-ratelimit-remaining": "0", "Retry-After": "15"}, 15.0, "Retry-After"),
    ],
)
def test_403s_with_no_quota_left(headers: dict[str, str], wait: float, field: str) -> None:
    limit = rate_limit(403, headers, now=NOW)
    assert limit is not None and (limit.wait, limit.field) == (wait, field)


def test_429_retry_after_is_clamped_to_60_s_and_never_beyond_the_maximum() -> None:
    limit = rate_limit(429, {"Retry-After": "7200"}, now=NOW)
    assert limit is not None and (limit.wait, limit.reset, limit.field) == (
        60.0,
        None,
        "Retry-After",
    )
    assert not limit.beyond(30.0)
    # The HTTP-date form is measured from the server's Date too.
    when = format_datetime(datetime.fromtimestamp(NOW + 20, UTC), usegmt=True)
    limit = rate_limit(429, {"Date": DATE, "Retry-After": when}, now=NOW + 500)
    assert limit is not None and limit.wait == 20.0


def test_429_reset_without_remaining_counts() -> None:
    limit = rate_limit(429, {"RateLimit-Reset": "25"}, now=NOW)
    assert limit is not None and limit.wait == 25.0


def test_a_quota_with_units_left_did_not_cause_the_refusal() -> None:
    assert rate_limit(429, {"x-ratelimit-remaining": "7", "x-ratelimit-reset": "30"}, now=NOW) is (
        None
    )
    # With several policies, the exhausted one's reset counts, the others' not.
    value = '"burst";r=5;t=900, "minute";r=0;t=40'
    limit = rate_limit(429, {"RateLimit": value}, now=NOW)
    assert limit is not None and limit.wait == 40.0
    # Several exhausted: the latest reset.
    value = '"minute";r=0;t=40, "hour";r=0;t=1200'
    limit = rate_limit(429, {"RateLimit": value, "x-ratelimit-remaining": "0"}, now=NOW)
    assert limit is not None and limit.wait == 1200.0


def test_retry_after_and_reset_both_honoured_the_longer_wins() -> None:
    reset_later = {"Retry-After": "10", "RateLimit": '"d";r=0;t=30'}
    limit = rate_limit(429, reset_later, now=NOW)
    assert limit is not None and (limit.wait, limit.reset, limit.field) == (30, 30, "RateLimit")
    retry_after_later = {"Retry-After": "30", "RateLimit": '"d";r=0;t=5'}
    limit = rate_limit(429, retry_after_later, now=NOW)
    assert limit is not None and (limit.wait, limit.reset, limit.field) == (30, 5, "Retry-After")
    # A reset beyond the maximum is beyond it whatever Retry-After says.
    limit = rate_limit(403, github_403(NOW + 3600, **{"Retry-After": "60"}), now=NOW)
    assert limit is not None and limit.beyond(DEFAULT_MAX_RATE_LIMIT_WAIT)
    assert limit.wait == 3600.0


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "0"},
        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) - 5), "Date": DATE},
        {"RateLimit": '"default";r=0;t=0'},
    ],
)
def test_a_wait_is_never_shorter_than_the_minimum(headers: dict[str, str]) -> None:
    limit = rate_limit(429, headers, now=NOW)
    assert limit is not None and limit.wait == MIN_RATE_LIMIT_WAIT == 1.0


@pytest.mark.parametrize("status", [200, 301, 400, 401, 404, 500, 503])
def test_other_statuses_are_no_rate_limit_refusals(status: int) -> None:
    assert rate_limit(status, github_403(NOW + 30, **{"Retry-After": "5"}), now=NOW) is None


def test_a_field_repeated_over_several_lines_is_one_list() -> None:
    headers: CIMultiDict[str] = CIMultiDict()
    headers.add("RateLimit", '"burst";r=3;t=1')
    headers.add("ratelimit", '"daily";r=0;t=600')
    limit = rate_limit(429, headers, now=NOW)
    assert limit is not None and limit.wait == 600.0


def test_the_maximum_bounds_the_reset() -> None:
    limit = rate_limit(403, github_403(NOW + 900), now=NOW)
    assert limit is not None and not limit.beyond(900.0)
    limit = rate_limit(403, github_403(NOW + 901), now=NOW)
    assert limit is not None and limit.beyond(900.0) and not limit.beyond(3600.0)


# --- what becomes of them: messages and host cooldowns ------------------------------------


def test_refusal_notes_name_the_reset_time() -> None:
    far = rate_limit(403, github_403(NOW + 3000), now=NOW)
    assert far is not None
    assert refusal_note(far, max_wait=900, waits=0) == (
        "rate limited until 2023-11-14T23:03:20Z (in 3000 s, from x-ratelimit-reset): "
        "beyond http.max_rate_limit_wait_seconds (900 s), not waited for"
    )
    near = rate_limit(403, github_403(NOW + 30), now=NOW)
    assert near is not None
    assert refusal_note(near, max_wait=900, waits=5) == (
        "rate limited until 2023-11-14T22:13:50Z (from x-ratelimit-reset): "
        "still refused after 5 rate-limit waits"
    )
    assert refusal_note(near, max_wait=900, waits=0) == (
        "rate limited until 2023-11-14T22:13:50Z (from x-ratelimit-reset)"
    )
    assert near.until == datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=30)


def test_host_cooldowns() -> None:
    near = rate_limit(403, github_403(NOW + 30), now=NOW)
    far = rate_limit(403, github_403(NOW + 3000), now=NOW)
    headers = github_403(NOW + 30)
    assert cooldown_seconds(403, headers, near, 900) == 30.0
    # A reset beyond the maximum fails its request and holds nobody.
    assert cooldown_seconds(403, headers, far, 900) is None
    assert cooldown_seconds(403, headers, far, 3600) == 3000.0
    # 503 with Retry-After, as before (clamped to 60 s); without, or another status: none.
    assert cooldown_seconds(503, {"Retry-After": "120"}, None, 900) == 60.0
    assert cooldown_seconds(503, {}, None, 900) is None
    assert cooldown_seconds(500, {"Retry-After": "5"}, None, 900) is None
    assert cooldown_seconds(403, {}, None, 900) is None
