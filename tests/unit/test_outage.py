"""Riding out a store or queue outage (syncd.runtime.outage): capped exponential backoff, a
budget of continuous unavailability, waits that an abort interrupts; fake clock, fake sleep."""

from __future__ import annotations

import pytest

from syncd.errors import (
    Aborted,
    OutageTooLong,
    QueueUnavailable,
    StoreError,
    StoreUnavailable,
)
from syncd.models import WaitReason
from syncd.runtime.outage import Backoff, Outage, OutagePolicy, ride_out


class FakeTime:
    """A clock that only the fake sleep moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Flaky:
    """Fails ``failures`` times with ``error``, then answers ``"ok"``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_backoff_doubles_up_to_its_cap() -> None:
    delays = [Backoff().delay(n) for n in range(7)]
    assert delays == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5])
    assert Backoff().delay(10_000) == 0.5  # no overflow however long the outage


async def test_a_call_goes_through_once_the_store_is_back() -> None:
    time = FakeTime()
    call = Flaky(6, StoreUnavailable("lost connection to PostgreSQL"))
    waits: list[tuple[WaitReason, float]] = []
    lasted: list[float] = []
    result = await ride_out(
        call,
        policy=OutagePolicy(budget=60, clock=time.clock),
        sleep=time.sleep,
        on_wait=lambda reason, seconds: waits.append((reason, seconds)),
        on_recovered=lasted.append,
    )
    assert result == "ok" and call.calls == 7
    assert time.slept == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5])
    assert {reason for reason, _ in waits} == {WaitReason.STORE_UNAVAILABLE}
    assert lasted == pytest.approx([sum(time.slept)])


async def test_a_queue_outage_is_shown_as_such() -> None:
    time = FakeTime()
    waits: list[WaitReason] = []
    await ride_out(
        Flaky(1, QueueUnavailable("Redis queue: push failed")),
        policy=OutagePolicy(clock=time.clock),
        sleep=time.sleep,
        on_wait=lambda reason, _: waits.append(reason),
    )
    assert waits == [WaitReason.QUEUE_UNAVAILABLE]


async def test_the_call_fails_when_the_budget_is_spent_and_not_later() -> None:
    time = FakeTime()
    cause = StoreUnavailable("lost connection to PostgreSQL at db:5432 (commit page)")
    call = Flaky(10**6, cause)
    with pytest.raises(OutageTooLong) as caught:
        await ride_out(call, policy=OutagePolicy(budget=3.0, clock=time.clock), sleep=time.sleep)
    # Waited exactly the budget: the last wait is cut to what was left of it.
    assert time.now == pytest.approx(3.0)
    assert max(time.slept) <= 0.5
    message = str(caught.value)
    assert message.startswith("store unavailable for 3.0s, longer than [sync] outage_seconds (3s)")
    assert message.endswith(str(cause))
    assert caught.value.__cause__ is cause


async def test_other_errors_are_not_waited_for() -> None:
    time = FakeTime()
    call = Flaky(1, StoreError("PostgreSQL error (commit page): syntax error"))
    with pytest.raises(StoreError, match="syntax error"):
        await ride_out(call, policy=OutagePolicy(clock=time.clock), sleep=time.sleep)
    assert call.calls == 1 and time.slept == []


async def test_a_sleep_that_raises_ends_the_wait_at_once() -> None:
    """The engine's sleep raises Aborted when the run's cancel token is set."""
    call = Flaky(10**6, StoreUnavailable("down"))

    async def aborted(seconds: float) -> None:
        raise Aborted()

    with pytest.raises(Aborted):
        await ride_out(call, policy=OutagePolicy(), sleep=aborted)
    assert call.calls == 1


def test_the_budget_counts_continuous_unavailability_only() -> None:
    time = FakeTime()
    outage = Outage(OutagePolicy(budget=10, clock=time.clock))
    error = StoreUnavailable("down")
    outage.failed(error)
    time.now = 9.0
    assert outage.failed(error) == pytest.approx(0.1)
    assert outage.recovered() == pytest.approx(9.0)
    assert not outage.active
    # A new outage starts a new budget (and a new backoff).
    time.now = 100.0
    assert outage.failed(error) == pytest.approx(0.05)
    time.now = 109.9
    outage.failed(error)
    time.now = 110.0
    with pytest.raises(OutageTooLong, match=r"for 10\.0s"):
        outage.failed(error)
