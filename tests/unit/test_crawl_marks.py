"""The mark a completed crawl stores never passes the crawl's start (DESIGN.md §12): pure
rules (:mod:`syncd.rules.marks`, ``rules.settled_state`` and the success transition) with
times fixed here, and the ``http`` source's crawl start read from an injected clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from multidict import CIMultiDict

from syncd import rules
from syncd.errors import ServerError
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Response, Transport
from syncd.models import Connector
from syncd.rules.marks import as_time, capped_mark, is_time_mark, started_text, written_like
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource

# The crawl started at 12:30:45.678901 UTC on 2024-05-01; the largest value it saw is later.
START = datetime(2024, 5, 1, 12, 30, 45, 678901, tzinfo=UTC)
STARTED = "2024-05-01T12:30:45.678901Z"
START_S = 1_714_566_645  # START in Unix seconds, rounded down


def test_the_start_is_kept_as_iso_utc_with_microseconds() -> None:
    assert started_text(START) == STARTED
    paris = START.astimezone(datetime.fromisoformat("2024-01-01T00:00+02:00").tzinfo)
    assert started_text(paris) == STARTED


# --- the start written as the field's values are ---------------------------------------------


@pytest.mark.parametrize(
    ("seen", "mark"),
    [
        # ISO 8601 text keeps its separator, precision and kind of offset, rounded down.
        ("2024-06-01T00:00:00Z", "2024-05-01T12:30:45Z"),
        ("2024-06-01T00:00:00.000Z", "2024-05-01T12:30:45.678Z"),
        ("2024-06-01T00:00:00.123456Z", "2024-05-01T12:30:45.678901Z"),
        ("2024-06-01T00:00:00.123456789Z", "2024-05-01T12:30:45.678901000Z"),
        ("2024-06-01T00:00:00+00:00", "2024-05-01T12:30:45+00:00"),
        ("2024-06-01T00:00:00.000+0000", "2024-05-01T12:30:45.678+0000"),  # Jira
        ("2024-06-01T00:00:00", "2024-05-01T12:30:45"),  # no offset: UTC
        ("2024-06-01 00:00:00", "2024-05-01 12:30:45"),
        ("2024-06-01T02:00:00.5+02:00", "2024-05-01T14:30:45.6+02:00"),  # another zone's
        ("2024-06-01T00:00:00-05:00", "2024-05-01T07:30:45-05:00"),
        ("2024-06-01T00:00Z", "2024-05-01T12:30Z"),
        ("2024-06-01", "2024-05-01"),
        # Unix time keeps its unit and its kind.
        (1_717_200_000, START_S),
        (1_717_200_000_000, START_S * 1000 + 678),
        (1_717_200_000.5, START_S + 0.678901),
        ("1717200000", str(START_S)),
        ("1717200000.000100", f"{START_S}.678901"),
        ("1717200000.5", f"{START_S}.6"),
    ],
)
def test_the_start_is_written_like_the_values_and_rounded_down(seen: Any, mark: Any) -> None:
    written = written_like(START, seen)
    assert written == mark
    assert type(written) is type(mark)
    assert as_time(written) <= START


@pytest.mark.parametrize(
    ("value", "fmt", "time"),
    [
        ("2024-06-01T00:00:00Z", "as_stored", True),
        ("2024-06-01", "as_stored", True),
        # A plain number under as_stored is a sequence number, a version, a token.
        (1_717_200_000, "as_stored", False),
        ("1717200000.000100", "as_stored", False),  # Slack's ts as stored
        (42, "as_stored", False),
        ("cursor-abc", "as_stored", False),
        ("20240601", "as_stored", False),  # ISO 8601's basic format: too like a number
        # A format that names a time says it is one.
        (1_717_200_000, "unix", True),
        (1_717_200_000_000, "unix_ms", True),
        ("1717200000.000100", "unix", True),
        ("2024-06-01T00:00:00Z", "iso8601", True),
        ("2024-06-01T00:00:00Z", "%Y/%m/%d %H:%M", True),
        ("cursor-abc", "iso8601", False),
        (None, "iso8601", False),
        (True, "unix", False),
    ],
)
def test_which_marks_are_times(value: Any, fmt: str, time: bool) -> None:
    assert is_time_mark(value, fmt) is time


# --- the earlier of the largest value seen and the start ------------------------------------


def test_a_mark_later_than_the_start_becomes_the_start() -> None:
    assert capped_mark("2024-06-01T00:00:00Z", STARTED) == "2024-05-01T12:30:45Z"
    assert capped_mark(1_717_200_000, STARTED, "unix") == START_S
    assert capped_mark(1_717_200_000_000, STARTED, "unix_ms") == START_S * 1000 + 678


def test_a_mark_no_later_than_the_start_is_kept_as_it_is() -> None:
    earlier = "2024-05-01T12:30:45.000+0000"  # rounded down, still earlier: untouched
    assert capped_mark(earlier, STARTED) is earlier
    assert capped_mark("2024-04-01", STARTED) == "2024-04-01"
    assert capped_mark(START_S - 1, STARTED, "unix") == START_S - 1


@pytest.mark.parametrize(
    ("seen", "started", "fmt"),
    [
        (9_999_999_999_999, STARTED, "as_stored"),  # a sequence number: the largest seen
        ("opaque-token-2", STARTED, "as_stored"),
        ("2024-06-01T00:00:00Z", None, "as_stored"),  # a crawl begun before starts were kept
        ("2024-06-01T00:00:00Z", "not a time", "as_stored"),
        ("next week", STARTED, "iso8601"),  # no time: sending it fails the run, as before
        (None, STARTED, "iso8601"),
    ],
)
def test_a_mark_that_is_no_time_or_has_no_start_keeps_todays_rule(
    seen: Any, started: Any, fmt: str
) -> None:
    assert capped_mark(seen, started, fmt) == seen


def test_the_stored_mark_never_reads_later_than_the_start() -> None:
    samples: list[Any] = ["2099-01-01T00:00:00Z", "2099-01-01T00:00:00.1+0000", 4_000_000_000]
    samples += [4_000_000_000_000, 4_000_000_000.25, "4000000000.1", "2099-01-01"]
    moment = START
    for _ in range(200):
        moment += timedelta(microseconds=987_654_321)
        for sample in samples:
            assert as_time(capped_mark(sample, started_text(moment), "unix")) <= moment


# --- the rule: a completed crawl's state --------------------------------------------------


def connector(source: dict[str, Any], state: dict[str, Any]) -> Connector:
    return Connector(
        id="c1",
        name="tickets",
        source={"type": "http", "url": "http://127.0.0.1:9/items", **source},
        indexer={"type": "store"},
        created_at=START,
        updated_at=START,
        source_state=state,
    )


INCREMENTAL = {"incremental": {"field": "updated_at", "param": "since"}}


def test_a_completed_crawl_stores_the_earlier_of_its_largest_value_and_its_start() -> None:
    crawl = {"since": "2024-04-30T00:00:00Z", "high_water": "2024-05-01T13:00:00Z"}
    c = connector(INCREMENTAL, {"completed": {}, "crawl": {**crawl, "started": STARTED}})
    promoted = rules.settled_state(rules.crawl_states(c)[1], c.source)
    assert promoted == {**crawl, "high_water": "2024-05-01T12:30:45Z", "started": STARTED}
    # What the success transition writes, and what the next fresh crawl starts from.
    t = rules.trigger(c, run_id="r1", owner="i1", now=START)
    done = rules.succeed(t.connector, run_id="r1", now=START + timedelta(minutes=5))
    assert done.connector.source_state["completed"] == promoted
    assert done.connector.source_state["mark_set"]["by"] == "crawl"  # (rules.steering)
    assert rules.start_state(done.connector, resuming=False)["high_water"] == (
        "2024-05-01T12:30:45Z"
    )


def test_a_format_that_names_a_time_makes_a_numeric_mark_a_time() -> None:
    crawl = {"since": None, "high_water": 1_717_200_000, "started": STARTED}
    plain = connector(INCREMENTAL, {"crawl": crawl})
    assert rules.settled_state(crawl, plain.source)["high_water"] == 1_717_200_000
    unix = connector({"incremental": {**INCREMENTAL["incremental"], "format": "unix"}}, {})
    assert rules.settled_state(crawl, unix.source)["high_water"] == START_S


def test_states_the_rule_does_not_touch() -> None:
    later = {"since": None, "high_water": "2024-06-01T00:00:00Z"}
    # Stored before this change: no start, the largest value seen as before.
    assert rules.settled_state(later, connector(INCREMENTAL, {}).source) == later
    # A source without `incremental` (a plugin's state is its own).
    plugin = {"high_water": "2024-06-01T00:00:00Z", "started": STARTED, "page": 3}
    assert rules.settled_state(plugin, connector({}, {}).source) == plugin


# --- the http source: the crawl's start from its clock -----------------------------------


class Clock:
    """A clock that reads ``START``, then a second later at each read."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> datetime:
        self.reads += 1
        return START + timedelta(seconds=self.reads - 1)


class FakeTransport:
    """Answers each request with the next of ``answers`` (a body, or an error raised)."""

    timeouts = Timeouts()

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    async def request(self, method: str, url: str, **kwargs: Any) -> Response:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Response(200, CIMultiDict(), url, json.dumps(answer).encode())


def source(transport: FakeTransport, clock: Clock, **context: Any) -> HttpSource:
    config = {
        "type": "http",
        "url": "https://api.example/items",
        "records": "data",
        "incremental": {"field": "updated_at", "param": "since"},
    }
    return HttpSource(config, SourceContext("c1", cast(Transport, transport), now=clock, **context))


PAGE = {"data": [{"id": 1, "updated_at": "2024-06-01T00:00:00Z"}], "next_cursor": "2"}


async def test_the_crawl_start_is_when_its_first_page_was_first_asked_for() -> None:
    clock = Clock()
    fresh = source(FakeTransport(ServerError(503), PAGE, PAGE), clock)
    assert "started" not in fresh.checkpoint()
    with pytest.raises(ServerError):
        await fresh.fetch_page(None)
    await fresh.fetch_page(None)  # the retry keeps the first attempt's time, the earlier
    await fresh.fetch_page("2")
    assert clock.reads == 1
    assert fresh.checkpoint() == {
        "since": None,
        "high_water": "2024-06-01T00:00:00Z",
        "started": STARTED,
    }


async def test_a_resumed_crawl_keeps_its_start_and_a_fresh_one_takes_a_new_one() -> None:
    clock = Clock()
    state = {"since": "2024-04-30T00:00:00Z", "high_water": "x", "started": STARTED}
    resumed = source(FakeTransport(PAGE), clock, state=state, resuming=True)
    await resumed.fetch_page("2")
    assert resumed.checkpoint()["started"] == STARTED
    assert clock.reads == 0
    fresh = source(FakeTransport(PAGE), clock, state=state)
    await fresh.fetch_page(None)
    assert fresh.checkpoint()["started"] == started_text(START)  # the clock's first read
    later = source(FakeTransport(PAGE), clock, state=state)
    await later.fetch_page(None)
    assert later.checkpoint()["started"] == started_text(START + timedelta(seconds=1))
