"""cancel_and_wait and the Supervisor: a fake clock and injected sleeps, never real waits
for state."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from syncd.runtime.tasks import Supervisor, TaskReturned, cancel_and_wait


async def _forever() -> None:
    await asyncio.Event().wait()


async def _stubborn(release: asyncio.Event, interrupted: asyncio.Event) -> None:
    """Ignores cancellation until released, then returns normally."""
    while not release.is_set():
        try:
            await release.wait()
        except asyncio.CancelledError:
            interrupted.set()


def _failures(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == event]


# --- cancel_and_wait --------------------------------------------------------------------


async def test_absorbs_the_tasks_own_cancellation() -> None:
    task = asyncio.create_task(_forever(), name="side")
    await asyncio.sleep(0)  # let it start
    await cancel_and_wait(task)
    assert task.cancelled()
    me = asyncio.current_task()
    assert me is not None and me.cancelling() == 0


async def test_propagates_a_cancellation_aimed_at_the_caller() -> None:
    cleaning = asyncio.Event()
    release = asyncio.Event()

    async def slow_cleanup() -> None:
        try:
            await _forever()
        finally:
            cleaning.set()
            await release.wait()

    task = asyncio.create_task(slow_cleanup(), name="side")
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancel_and_wait(task))
    await cleaning.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert caller.cancelled()
    assert not task.done()  # cancelled, still cleaning up: finishes on its own
    release.set()
    await asyncio.wait({task})
    assert task.cancelled()


async def test_a_task_ignoring_its_cancellation_does_not_swallow_the_callers() -> None:
    # Awaiting the task directly would forward the caller's cancellation to the task, which
    # ignores it and returns normally: the caller would then go on as if never cancelled.
    interrupted = asyncio.Event()
    release = asyncio.Event()
    task = asyncio.create_task(_stubborn(release, interrupted), name="stubborn")
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancel_and_wait(task))
    await interrupted.wait()
    caller.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait({task})
    assert not task.cancelled() and task.exception() is None


async def test_timeout_bounds_a_task_that_ignores_cancellation() -> None:
    release = asyncio.Event()
    task = asyncio.create_task(_stubborn(release, asyncio.Event()), name="stubborn")
    await asyncio.sleep(0)
    with capture_logs() as logs:
        await cancel_and_wait(task, timeout=0.01)
    assert not task.done()
    [warning] = _failures(logs, "task.not_stopped")
    assert warning["task"] == "stubborn"
    release.set()
    await asyncio.wait({task})


async def test_an_error_of_the_task_is_logged_not_raised() -> None:
    async def fails_on_cancel() -> None:
        try:
            await _forever()
        except asyncio.CancelledError:
            raise ValueError("boom") from None

    task = asyncio.create_task(fails_on_cancel(), name="side")
    await asyncio.sleep(0)
    with capture_logs() as logs:
        await cancel_and_wait(task)
    [entry] = _failures(logs, "task.failed")
    assert entry["task"] == "side"
    assert entry["error"] == "ValueError: boom"
    assert isinstance(task.exception(), ValueError)


async def test_a_task_already_failed_is_reported_without_waiting() -> None:
    async def fails() -> None:
        raise OSError("gone")

    task = asyncio.create_task(fails(), name="side")
    await asyncio.wait({task})
    with capture_logs() as logs:
        await cancel_and_wait(task)
    assert [e["error"] for e in _failures(logs, "task.failed")] == ["OSError: gone"]


# --- Supervisor ---------------------------------------------------------------------------


class Clock:
    """Monotonic seconds that move only when told (sleeps move it by their delay)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """The supervisor's sleep: records each delay and advances the clock by it. With a gate,
    each sleep waits until the test opens it."""

    def __init__(self, clock: Clock, *, gated: bool = False) -> None:
        self.clock = clock
        self.delays: list[float] = []
        self.sleeping = asyncio.Event()
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self.clock.now += delay
        self.sleeping.set()
        await self.gate.wait()
        self.sleeping.clear()


class Fatal:
    """The on_fatal callback: records calls and wakes the test."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, BaseException]] = []
        self.called = asyncio.Event()

    def __call__(self, name: str, exc: BaseException) -> None:
        self.calls.append((name, exc))
        self.called.set()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fatal() -> Fatal:
    return Fatal()


async def test_restarts_with_doubling_backoff_then_gives_up(clock: Clock, fatal: Fatal) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(
        fatal, max_restarts=7, max_backoff=1.0, restart_window=3600, clock=clock, sleep=sleeps
    )
    attempts = 0

    async def broken() -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError("boom")

    with capture_logs() as logs:
        sup.spawn("job", broken)
        await asyncio.wait_for(fatal.called.wait(), 5)
    assert sleeps.delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert attempts == 8
    [(name, exc)] = fatal.calls
    assert name == "job" and isinstance(exc, ValueError)
    died = _failures(logs, "task.died")
    assert [e["next_attempt_in"] for e in died] == sleeps.delays
    assert died[0]["task"] == "job" and died[0]["error"] == "ValueError: boom"
    assert sup.problems() == {"job": "failed: ValueError: boom"}
    await sup.stop()


async def test_default_budget_is_five_restarts_within_a_minute(clock: Clock, fatal: Fatal) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(fatal, clock=clock, sleep=sleeps)

    async def broken() -> None:
        raise ValueError("boom")

    sup.spawn("job", broken)
    await asyncio.wait_for(fatal.called.wait(), 5)
    assert sleeps.delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6])
    assert len(fatal.calls) == 1
    await sup.stop()


async def test_deaths_spread_beyond_the_window_never_exhaust_the_budget(
    clock: Clock, fatal: Fatal
) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(fatal, max_restarts=2, restart_window=60, clock=clock, sleep=sleeps)
    attempts = 0
    tenth = asyncio.Event()

    async def dies_every_forty_seconds() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 10:
            tenth.set()
            await _forever()
        clock.now += 40  # ran 40 s: not healthy long enough to reset the backoff
        raise OSError("flaky")

    sup.spawn("job", dies_every_forty_seconds)
    await asyncio.wait_for(tenth.wait(), 5)
    assert fatal.calls == []
    assert sleeps.delays[:3] == pytest.approx([0.1, 0.2, 0.4])
    await sup.stop()


async def test_a_long_healthy_run_resets_the_backoff(clock: Clock, fatal: Fatal) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(fatal, max_restarts=100, healthy_after=60, clock=clock, sleep=sleeps)
    attempts = 0
    sixth = asyncio.Event()

    async def job() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 6:
            sixth.set()
            await _forever()
        if attempts == 4:
            clock.now += 61  # this run was healthy
        raise ValueError("boom")

    sup.spawn("job", job)
    await asyncio.wait_for(sixth.wait(), 5)
    assert sleeps.delays == pytest.approx([0.1, 0.2, 0.4, 0.1, 0.2])
    await sup.stop()


async def test_problems_while_restarting_and_cleared_once_running(
    clock: Clock, fatal: Fatal
) -> None:
    sleeps = Sleeps(clock, gated=True)
    sup = Supervisor(fatal, clock=clock, sleep=sleeps)
    running_again = asyncio.Event()
    attempts = 0

    async def job() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("listener lost")
        running_again.set()
        await _forever()

    sup.spawn("control-messages", job)
    sup.spawn("metrics-refresh", _forever)
    await asyncio.wait_for(sleeps.sleeping.wait(), 5)
    assert sup.problems() == {"control-messages": "restarting: ConnectionError: listener lost"}
    sleeps.gate.set()
    await asyncio.wait_for(running_again.wait(), 5)
    assert sup.problems() == {}
    assert sup.names == {"control-messages", "metrics-refresh"}
    await sup.stop()


async def test_returning_counts_as_dying(clock: Clock, fatal: Fatal) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(fatal, max_restarts=1, clock=clock, sleep=sleeps)

    async def returns() -> None:
        return

    with capture_logs() as logs:
        sup.spawn("scheduler", returns)
        await asyncio.wait_for(fatal.called.wait(), 5)
    [died] = _failures(logs, "task.died")
    assert died["error"].startswith("TaskReturned")
    assert isinstance(fatal.calls[0][1], TaskReturned)
    await sup.stop()


async def test_without_restart_the_first_death_is_fatal(clock: Clock, fatal: Fatal) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(fatal, clock=clock, sleep=sleeps)

    async def broken() -> None:
        raise RuntimeError("no way back")

    sup.spawn("watchdog", broken, restart=False)
    await asyncio.wait_for(fatal.called.wait(), 5)
    assert sleeps.delays == []
    assert [name for name, _ in fatal.calls] == ["watchdog"]
    assert sup.problems() == {"watchdog": "failed: RuntimeError: no way back"}
    await sup.stop()


async def test_a_cancelled_error_not_aimed_at_the_task_is_a_death(
    clock: Clock, fatal: Fatal
) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(fatal, clock=clock, sleep=sleeps)
    again = asyncio.Event()
    attempts = 0

    async def awaits_a_cancelled_future() -> None:
        nonlocal attempts
        attempts += 1
        if attempts > 1:
            again.set()
            await _forever()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.cancel()
        await future

    sup.spawn("job", awaits_a_cancelled_future)
    await asyncio.wait_for(again.wait(), 5)
    assert sleeps.delays == pytest.approx([0.1])
    await sup.stop()


async def test_a_failing_on_fatal_is_logged(clock: Clock) -> None:
    def on_fatal(name: str, exc: BaseException) -> None:
        raise KeyError(name)

    sup = Supervisor(on_fatal, clock=clock, sleep=Sleeps(clock))

    async def broken() -> None:
        raise ValueError("boom")

    with capture_logs() as logs:
        sup.spawn("job", broken, restart=False)
        for _ in range(5):
            await asyncio.sleep(0)
    assert _failures(logs, "task.on_fatal_failed")
    assert sup.problems() == {"job": "failed: ValueError: boom"}
    await sup.stop()


async def test_stop_cancels_and_awaits_every_task(clock: Clock, fatal: Fatal) -> None:
    sleeps = Sleeps(clock, gated=True)
    sup = Supervisor(fatal, clock=clock, sleep=sleeps)
    started = {"a": asyncio.Event(), "b": asyncio.Event()}
    cleaned: list[str] = []

    def runner(name: str) -> Any:
        async def run() -> None:
            started[name].set()
            try:
                await _forever()
            finally:
                await asyncio.sleep(0)  # cleanup that awaits is awaited too
                cleaned.append(name)

        return run

    async def broken() -> None:
        raise ValueError("boom")

    sup.spawn("a", runner("a"))
    sup.spawn("b", runner("b"))
    sup.spawn("backing-off", broken)
    await asyncio.wait_for(asyncio.gather(started["a"].wait(), started["b"].wait()), 5)
    await asyncio.wait_for(sleeps.sleeping.wait(), 5)
    await sup.stop()
    assert sorted(cleaned) == ["a", "b"]
    assert sup.problems() == {} and sup.names == frozenset()
    assert fatal.calls == []
    with pytest.raises(RuntimeError):
        sup.spawn("late", _forever)


async def test_stop_propagates_a_cancellation_of_its_caller(clock: Clock, fatal: Fatal) -> None:
    cleaning = asyncio.Event()
    release = asyncio.Event()

    async def slow_cleanup() -> None:
        try:
            await _forever()
        finally:
            cleaning.set()
            await release.wait()

    sup = Supervisor(fatal, clock=clock, sleep=Sleeps(clock))
    sup.spawn("slow", slow_cleanup)
    await asyncio.sleep(0)
    stopper = asyncio.create_task(sup.stop())
    await cleaning.wait()
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    release.set()


async def test_finish_lets_a_task_end_without_counting_a_death(clock: Clock, fatal: Fatal) -> None:
    sleeps = Sleeps(clock)
    sup = Supervisor(fatal, clock=clock, sleep=sleeps)
    asked = asyncio.Event()
    finished_tick = False

    async def scheduler() -> None:
        nonlocal finished_tick
        await asyncio.wait_for(asked.wait(), 5)
        await asyncio.sleep(0)  # the tick in progress completes
        finished_tick = True

    sup.spawn("scheduler", scheduler)
    await asyncio.sleep(0)
    asked.set()  # Scheduler.stop()
    with capture_logs() as logs:
        await sup.finish("scheduler", timeout=5)
    assert finished_tick
    assert sleeps.delays == [] and fatal.calls == [] and logs == []
    assert sup.names == frozenset()
    await sup.stop()


async def test_finish_cancels_a_task_that_does_not_end_in_time(clock: Clock, fatal: Fatal) -> None:
    sup = Supervisor(fatal, clock=clock, sleep=Sleeps(clock))
    sup.spawn("stuck", _forever)
    await asyncio.sleep(0)
    await sup.finish("stuck", timeout=0)
    assert sup.names == frozenset() and fatal.calls == []
