"""AsyncCursorPaginator semantics (DESIGN.md §6), with an injected sleep: exact schedules."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.errors import (
    Aborted,
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    PaginationLoopError,
    ServerError,
    SourceError,
)
from syncd.http.paginator import AsyncCursorPaginator, CancelToken
from syncd.models import Page, WaitReason


class FakeSleep:
    """Records the requested durations; returns at once unless ``block`` is set."""

    def __init__(self, *, block: bool = False) -> None:
        self.calls: list[float] = []
        self.block = block
        self.started = asyncio.Event()
        self.cancelled = 0

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.started.set()
        if self.block:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise


Outcome = Page | BaseException


class ScriptedFetch:
    """``fetch_page`` answering from a script: a Page is returned, an exception raised."""

    def __init__(self, script: Sequence[Outcome]) -> None:
        self.script = list(script)
        self.cursors: list[str | None] = []
        self.raised: list[BaseException] = []

    async def __call__(self, cursor: str | None) -> Page:
        self.cursors.append(cursor)
        outcome = self.script.pop(0)
        if isinstance(outcome, BaseException):
            self.raised.append(outcome)
            raise outcome
        return outcome


def pages(*cursors: str | None) -> list[Page]:
    """Pages with one record each, linked by ``cursors`` (the next cursor of each page)."""
    return [Page([{"id": str(i)}], c) for i, c in enumerate(cursors)]


async def collect(paginator: AsyncCursorPaginator) -> list[Page]:
    return [page async for page in paginator]


async def test_pages_follow_cursors_and_end_on_none() -> None:
    fetch = ScriptedFetch(pages("a", "b", None))
    paginator = AsyncCursorPaginator(fetch)
    assert paginator.cursor is None
    result = await collect(paginator)
    assert [p.records[0]["id"] for p in result] == ["0", "1", "2"]
    assert fetch.cursors == [None, "a", "b"]
    assert paginator.pages == 3
    assert paginator.cursor is None
    assert paginator.page_cursor == "b"
    with pytest.raises(StopAsyncIteration):
        await paginator.__anext__()


async def test_cursor_attributes_track_the_next_page() -> None:
    paginator = AsyncCursorPaginator(ScriptedFetch(pages("a", None)))
    await paginator.__anext__()
    assert (paginator.page_cursor, paginator.cursor) == (None, "a")
    await paginator.__anext__()
    assert (paginator.page_cursor, paginator.cursor) == ("a", None)


async def test_empty_string_cursor_ends_and_empty_pages_continue() -> None:
    fetch = ScriptedFetch([Page([], "a"), Page([], "")])
    result = await collect(AsyncCursorPaginator(fetch))
    assert [p.records for p in result] == [[], []]
    assert fetch.cursors == [None, "a"]


async def test_start_cursor_is_the_first_fetch() -> None:
    fetch = ScriptedFetch(pages("y", None))
    paginator = AsyncCursorPaginator(fetch, start_cursor="x")
    assert paginator.cursor == "x"
    await collect(paginator)
    assert fetch.cursors == ["x", "y"]


async def test_always_503_retries_with_exact_backoff_and_reraises_the_last() -> None:
    errors = [ServerError(503, f"attempt {i}") for i in range(4)]
    for i, error in enumerate(errors):
        error.__cause__ = OSError(f"cause {i}")
    fetch = ScriptedFetch(errors)
    sleep = FakeSleep()
    waits: list[tuple[WaitReason, float]] = []
    retries: list[tuple[BaseException, int]] = []
    paginator = AsyncCursorPaginator(
        fetch,
        max_retries=3,
        backoff_factor=2.0,
        sleep=sleep,
        on_wait=lambda r, s: waits.append((r, s)),
        on_retry=lambda e, n: retries.append((e, n)),
    )
    with pytest.raises(ServerError) as info:
        await paginator.__anext__()
    assert info.value is errors[3]
    assert isinstance(info.value.__cause__, OSError)
    assert str(info.value.__cause__) == "cause 3"
    assert len(fetch.cursors) == 4
    assert sleep.calls == [2.0, 4.0, 8.0]
    assert waits == [
        (WaitReason.BACKOFF, 2.0),
        (WaitReason.BACKOFF, 4.0),
        (WaitReason.BACKOFF, 8.0),
    ]
    assert [(e, n) for e, n in retries] == [(errors[0], 1), (errors[1], 2), (errors[2], 3)]


async def test_503_then_500_raises_the_500_after_one_sleep() -> None:
    fetch = ScriptedFetch([ServerError(503), ServerError(500), *pages(None)])
    sleep = FakeSleep()
    paginator = AsyncCursorPaginator(fetch, max_retries=3, sleep=sleep)
    with pytest.raises(ServerError) as info:
        await paginator.__anext__()
    assert info.value.status == 500
    assert sleep.calls == [2.0]
    assert len(fetch.cursors) == 2


async def test_backoff_factor_scales_the_schedule() -> None:
    fetch = ScriptedFetch([ClientTimeoutError("t"), ClientConnectionError("c"), *pages(None)])
    sleep = FakeSleep()
    result = await collect(
        AsyncCursorPaginator(fetch, max_retries=2, backoff_factor=0.5, sleep=sleep)
    )
    assert len(result) == 1
    assert sleep.calls == [0.5, 1.0]


async def test_max_retries_zero_means_one_attempt() -> None:
    fetch = ScriptedFetch([ServerError(503), *pages(None)])
    sleep = FakeSleep()
    with pytest.raises(ServerError):
        await collect(AsyncCursorPaginator(fetch, sleep=sleep))
    assert sleep.calls == []
    assert len(fetch.cursors) == 1


@pytest.mark.parametrize(
    "error",
    [ServerError(500), ClientError(404), ClientError(429), SourceError("bad"), ValueError("x")],
)
async def test_errors_not_listed_are_raised_at_once(error: Exception) -> None:
    fetch = ScriptedFetch([error, *pages(None)])
    sleep = FakeSleep()
    with pytest.raises(type(error)) as info:
        await collect(AsyncCursorPaginator(fetch, max_retries=3, sleep=sleep))
    assert info.value is error
    assert sleep.calls == []


async def test_429_is_retried_when_listed_and_retry_after_decides_the_wait() -> None:
    fetch = ScriptedFetch(
        [
            ClientError(429, retry_after=7.0),  # longer than backoff 2 → 7
            ClientError(429, retry_after=1.0),  # shorter than backoff 4 → 4
            ClientError(429, retry_after=120.0),  # clamped to 60 (> backoff 8)
            *pages(None),
        ]
    )
    sleep = FakeSleep()
    waits: list[tuple[WaitReason, float]] = []
    result = await collect(
        AsyncCursorPaginator(
            fetch,
            max_retries=3,
            retry_on_status=(429, 503),
            sleep=sleep,
            on_wait=lambda r, s: waits.append((r, s)),
        )
    )
    assert len(result) == 1
    assert sleep.calls == [7.0, 4.0, 60.0]
    assert waits == [
        (WaitReason.RETRY_AFTER, 7.0),
        (WaitReason.BACKOFF, 4.0),
        (WaitReason.RETRY_AFTER, 60.0),
    ]


async def test_throttle_between_pages_only() -> None:
    sleep = FakeSleep()
    waits: list[tuple[WaitReason, float]] = []
    fetch = ScriptedFetch(pages("a", "b", None))
    await collect(
        AsyncCursorPaginator(
            fetch, throttle_seconds=0.5, sleep=sleep, on_wait=lambda r, s: waits.append((r, s))
        )
    )
    assert sleep.calls == [0.5, 0.5]
    assert waits == [(WaitReason.THROTTLE, 0.5), (WaitReason.THROTTLE, 0.5)]


async def test_throttle_once_per_page_not_per_retry() -> None:
    sleep = FakeSleep()
    fetch = ScriptedFetch([pages("a")[0], ServerError(502), ServerError(504), *pages(None)])
    await collect(AsyncCursorPaginator(fetch, max_retries=2, throttle_seconds=0.5, sleep=sleep))
    assert sleep.calls == [0.5, 2.0, 4.0]
    assert fetch.cursors == [None, "a", "a", "a"]


async def test_repeated_cursor_raises_a_loop_error_naming_it() -> None:
    fetch = ScriptedFetch(pages("a", "b", "a", None))
    paginator = AsyncCursorPaginator(fetch)
    with pytest.raises(PaginationLoopError, match="'a'"):
        await collect(paginator)
    assert fetch.cursors == [None, "a", "b"]


async def test_cursor_pointing_to_itself_is_a_loop() -> None:
    fetch = ScriptedFetch(pages("x"))
    with pytest.raises(PaginationLoopError, match="'x'"):
        await collect(AsyncCursorPaginator(fetch, start_cursor="x"))


async def test_non_page_result_is_a_source_error() -> None:
    async def fetch(cursor: str | None) -> Page:
        return {"records": []}  # type: ignore[return-value]

    with pytest.raises(SourceError, match=r"expected syncd\.Page"):
        await collect(AsyncCursorPaginator(fetch))


# --- cancellation ---------------------------------------------------------------------


async def test_token_set_before_start_aborts_without_fetching() -> None:
    token = CancelToken()
    token.cancel()
    fetch = ScriptedFetch(pages(None))
    with pytest.raises(Aborted):
        await collect(AsyncCursorPaginator(fetch, cancel_token=token))
    assert fetch.cursors == []


async def test_token_checked_before_the_next_page() -> None:
    token = CancelToken()
    fetch = ScriptedFetch(pages("a", None))
    paginator = AsyncCursorPaginator(fetch, cancel_token=token)
    await paginator.__anext__()
    token.cancel()
    with pytest.raises(Aborted):
        await paginator.__anext__()
    assert fetch.cursors == [None]


async def test_token_set_during_backoff_sleep_aborts_at_once() -> None:
    token = CancelToken()
    sleep = FakeSleep(block=True)
    fetch = ScriptedFetch([ServerError(503), *pages(None)])
    paginator = AsyncCursorPaginator(fetch, max_retries=3, cancel_token=token, sleep=sleep)
    task = asyncio.create_task(paginator.__anext__(), name="test-iterate")
    await sleep.started.wait()
    token.cancel()
    with pytest.raises(Aborted):
        await task
    assert sleep.calls == [2.0]
    assert sleep.cancelled == 1
    assert len(fetch.cursors) == 1


async def test_token_interrupts_a_real_asyncio_sleep() -> None:
    token = CancelToken()
    waits: list[float] = []

    def on_wait(reason: WaitReason, seconds: float) -> None:
        waits.append(seconds)
        asyncio.get_running_loop().call_soon(token.cancel)

    fetch = ScriptedFetch([ServerError(503), *pages(None)])
    paginator = AsyncCursorPaginator(
        fetch, max_retries=1, backoff_factor=1000.0, cancel_token=token, on_wait=on_wait
    )
    started = time.monotonic()
    with pytest.raises(Aborted):
        await paginator.__anext__()
    assert time.monotonic() - started < 1.0
    assert waits == [1000.0]
    assert len(fetch.cursors) == 1


async def test_token_set_during_throttle_aborts() -> None:
    token = CancelToken()
    sleep = FakeSleep(block=True)
    fetch = ScriptedFetch(pages("a", None))
    paginator = AsyncCursorPaginator(fetch, throttle_seconds=5.0, cancel_token=token, sleep=sleep)
    await paginator.__anext__()
    task = asyncio.create_task(paginator.__anext__(), name="test-iterate")
    await sleep.started.wait()
    token.cancel()
    with pytest.raises(Aborted):
        await task
    assert fetch.cursors == [None]


async def test_token_interrupts_an_in_flight_fetch() -> None:
    token = CancelToken()
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def hung_fetch(cursor: str | None) -> Page:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    paginator = AsyncCursorPaginator(hung_fetch, max_retries=3, cancel_token=token)
    task = asyncio.create_task(paginator.__anext__(), name="test-iterate")
    await entered.wait()
    started = time.monotonic()
    token.cancel()
    with pytest.raises(Aborted):
        await task
    assert time.monotonic() - started < 0.5
    assert cancelled.is_set()


async def test_abort_leaves_the_task_uncancelled() -> None:
    """The interruption is the task's own cancellation turned into Aborted: once raised,
    the task must not look cancelled to asyncio.timeout or a TaskGroup."""
    token = CancelToken()
    entered = asyncio.Event()

    async def hung_fetch(cursor: str | None) -> Page:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def iterate() -> tuple[int, bool]:
        paginator = AsyncCursorPaginator(hung_fetch, cancel_token=token)
        with pytest.raises(Aborted):
            await paginator.__anext__()
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(0)  # no pending cancellation may surface here
        async with asyncio.timeout(5):
            await asyncio.sleep(0)
        return task.cancelling(), paginator._unregister is None

    task = asyncio.create_task(iterate(), name="test-iterate")
    await entered.wait()
    token.cancel()
    assert await task == (0, True)


async def test_fetch_that_swallows_the_interruption_still_aborts() -> None:
    token = CancelToken()
    entered = asyncio.Event()

    async def stubborn_fetch(cursor: str | None) -> Page:
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # a badly behaved plugin
            await asyncio.Event().wait()
        return Page([], "next")

    paginator = AsyncCursorPaginator(stubborn_fetch, cancel_token=token)
    task = asyncio.create_task(paginator.__anext__(), name="test-iterate")
    await entered.wait()
    token.cancel()
    with pytest.raises(Aborted):
        await task


async def test_cancel_token_set_from_a_plain_callback() -> None:
    token = CancelToken()
    sleep = FakeSleep(block=True)
    fetch = ScriptedFetch([ServerError(503), *pages(None)])
    paginator = AsyncCursorPaginator(fetch, max_retries=1, cancel_token=token, sleep=sleep)
    task = asyncio.create_task(paginator.__anext__(), name="test-iterate")
    await sleep.started.wait()
    asyncio.get_running_loop().call_soon(token.cancel)
    with pytest.raises(Aborted):
        await task


async def test_error_after_token_set_is_aborted_not_retried() -> None:
    token = CancelToken()

    async def fetch(cursor: str | None) -> Page:
        token.cancel()
        raise ServerError(503)

    sleep = FakeSleep()
    with pytest.raises(Aborted) as info:
        await collect(AsyncCursorPaginator(fetch, max_retries=3, cancel_token=token, sleep=sleep))
    assert isinstance(info.value.__cause__, ServerError)
    assert sleep.calls == []


@pytest.mark.parametrize("with_token", [False, True])
async def test_cancelling_the_iterating_task_propagates_during_fetch(with_token: bool) -> None:
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def hung_fetch(cursor: str | None) -> Page:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    token = CancelToken() if with_token else None
    paginator = AsyncCursorPaginator(hung_fetch, max_retries=5, cancel_token=token)
    task = asyncio.create_task(paginator.__anext__(), name="test-iterate")
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


async def test_cancelling_the_iterating_task_during_sleep_propagates() -> None:
    sleep = FakeSleep(block=True)
    fetch = ScriptedFetch([ServerError(503), *pages(None)])
    paginator = AsyncCursorPaginator(fetch, max_retries=3, cancel_token=CancelToken(), sleep=sleep)
    task = asyncio.create_task(paginator.__anext__(), name="test-iterate")
    await sleep.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sleep.cancelled == 1
    assert len(fetch.cursors) == 1


async def test_cancelled_error_from_fetch_is_never_retried() -> None:
    fetch = ScriptedFetch([asyncio.CancelledError(), *pages(None)])
    sleep = FakeSleep()
    with pytest.raises(asyncio.CancelledError):
        await collect(AsyncCursorPaginator(fetch, max_retries=3, sleep=sleep))
    assert sleep.calls == []
    assert len(fetch.cursors) == 1


async def test_cancel_token_wait_and_callbacks() -> None:
    token = CancelToken()
    calls: list[str] = []
    unregister = token.on_cancel(lambda: calls.append("kept"))
    token.on_cancel(lambda: calls.append("removed"))()
    waiter = asyncio.create_task(token.wait(), name="test-wait")
    await asyncio.sleep(0)
    assert not waiter.done() and not token.cancelled
    token.cancel()
    token.cancel()
    await waiter
    assert token.cancelled
    assert calls == ["kept"]
    unregister()
    token.on_cancel(lambda: calls.append("late"))
    assert calls == ["kept", "late"]


# --- property: the retry schedule -----------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    max_retries=st.integers(min_value=0, max_value=5),
    factor=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    failures=st.integers(min_value=0, max_value=7),
)
def test_retry_schedule_property(max_retries: int, factor: float, failures: int) -> None:
    async def scenario() -> tuple[list[float], int, bool]:
        script: list[Outcome] = [ServerError(503) for _ in range(failures)]
        fetch = ScriptedFetch([*script, *pages(None)])
        sleep = FakeSleep()
        paginator = AsyncCursorPaginator(
            fetch, max_retries=max_retries, backoff_factor=factor, sleep=sleep
        )
        try:
            await collect(paginator)
        except ServerError:
            return sleep.calls, len(fetch.cursors), False
        return sleep.calls, len(fetch.cursors), True

    calls, fetches, succeeded = asyncio.run(scenario())
    retried = min(failures, max_retries)
    assert calls == [factor * 2**n for n in range(retried)]
    assert succeeded == (failures <= max_retries)
    assert fetches == retried + 1
