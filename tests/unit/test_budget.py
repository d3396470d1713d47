"""Per-host budgets: the in-process token bucket on a fake clock, the rules every
implementation follows (in process and on a real Redis), and Redis's sharing, slot expiry
and fallback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

import pytest
import redis.asyncio as aioredis

from syncd.config import HostBudget
from syncd.http.budget import HostBudgets, LocalHostBudgets, budget_key
from syncd.http.budget_redis import RedisHostBudgets, open_budgets
from syncd.models import WaitReason

Waits = list[tuple[WaitReason, float]]


class FakeClock:
    """A monotonic clock that only moves when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def local(hosts: dict[str, HostBudget], clock: FakeClock) -> LocalHostBudgets:
    return LocalHostBudgets(hosts, clock=clock, sleep=clock.sleep)


# --- the in-process bucket on a fake clock -------------------------------------------------


async def test_burst_then_one_token_per_interval() -> None:
    clock = FakeClock()
    budgets = local({"h": HostBudget(rate=4, burst=2)}, clock)
    times = []
    for _ in range(5):
        await budgets.acquire("h")
        times.append(clock.now)
    assert times == pytest.approx([0, 0, 0.25, 0.5, 0.75])


async def test_an_idle_bucket_refills_up_to_burst_only() -> None:
    clock = FakeClock()
    budgets = local({"h": HostBudget(rate=2, burst=3)}, clock)
    for _ in range(3):
        await budgets.acquire("h")
    clock.now = 100.0
    for _ in range(3):
        await budgets.acquire("h")
    assert clock.now == 100.0
    await budgets.acquire("h")
    assert clock.now == pytest.approx(100.5)


async def test_only_waits_over_50_ms_are_shown_as_throttle() -> None:
    clock = FakeClock()
    budgets = local({"fast": HostBudget(50, 1), "slow": HostBudget(2, 1)}, clock)
    waits: Waits = []
    for key in ("fast", "fast", "slow", "slow"):
        await budgets.acquire(key, on_wait=lambda r, s: waits.append((r, s)))
    assert clock.sleeps == pytest.approx([0.02, 0.5])
    assert [r for r, _ in waits] == [WaitReason.THROTTLE]
    assert waits[0][1] == pytest.approx(0.5)


async def test_cooldown_holds_configured_and_unconfigured_hosts() -> None:
    clock = FakeClock()
    budgets = local({"h": HostBudget(10, 10)}, clock)
    await budgets.cooldown("h", 3.0)
    await budgets.cooldown("other", 1.5)
    waits: Waits = []
    await budgets.acquire("h", on_wait=lambda r, s: waits.append((r, s)))
    assert clock.now == pytest.approx(3.0)
    assert [r for r, _ in waits] == [WaitReason.HOST_COOLDOWN]
    assert waits[0][1] == pytest.approx(3.0)
    # The other host's cooldown ended while this one waited.
    await budgets.acquire("other")
    assert clock.now == pytest.approx(3.0)
    assert await budgets.cooldown_left("h") == 0.0


async def test_a_cooldown_is_lengthened_never_shortened() -> None:
    clock = FakeClock()
    budgets = local({}, clock)
    await budgets.cooldown("h", 5.0)
    await budgets.cooldown("h", 1.0)
    assert await budgets.cooldown_left("h") == 5.0
    await budgets.cooldown("h", 8.0)
    assert await budgets.cooldown_left("h") == 8.0


async def test_a_cooldown_recorded_during_a_token_wait_is_honoured() -> None:
    clock = FakeClock()
    budgets = local({"h": HostBudget(1, 1)}, clock)
    await budgets.acquire("h")
    waits: Waits = []
    waiter = asyncio.create_task(budgets.acquire("h", on_wait=lambda r, s: waits.append((r, s))))
    await asyncio.sleep(0)  # the waiter is asleep for its token (1 s)
    ends = clock.now + 4.0
    await budgets.cooldown("h", 4.0)
    await waiter
    assert [r for r, _ in waits] == [WaitReason.THROTTLE, WaitReason.HOST_COOLDOWN]
    assert clock.now == pytest.approx(ends)


async def test_waiters_are_served_in_arrival_order() -> None:
    clock = FakeClock()
    budgets = local({"h": HostBudget(1, 1)}, clock)
    order: list[int] = []

    async def take(n: int) -> None:
        await budgets.acquire("h")
        order.append(n)

    await asyncio.gather(*(take(n) for n in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert clock.now == pytest.approx(4.0)


async def test_concurrency_slot_is_held_until_release() -> None:
    clock = FakeClock()
    budgets = local({"h": HostBudget(1000, 1000, concurrency=1)}, clock)
    first = await budgets.acquire("h")
    second = asyncio.create_task(budgets.acquire("h"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not second.done()
    await first.release()
    await first.release()  # idempotent: no second slot appears
    lease = await asyncio.wait_for(second, 1)
    third = asyncio.create_task(budgets.acquire("h"))
    await asyncio.sleep(0)
    assert not third.done()
    await lease.release()
    await (await asyncio.wait_for(third, 1)).release()


async def test_cancelled_wait_gives_its_slot_back() -> None:
    forever = asyncio.Event()

    async def sleep(seconds: float) -> None:
        await forever.wait()

    budgets = LocalHostBudgets({"h": HostBudget(1, 1, concurrency=1)}, sleep=sleep)
    await (await budgets.acquire("h")).release()  # the one token
    waiter = asyncio.create_task(budgets.acquire("h"))  # holds the slot, waits for a token
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    # The waiter's slot is free again.
    state = budgets._state["h"]
    assert state.slots is not None and not state.slots.locked()


# --- which budget a URL draws from ---------------------------------------------------------


def test_budget_key_prefers_host_and_port_then_host() -> None:
    hosts = {
        "api.example.com": HostBudget(1, 1),
        "api.example.com:8443": HostBudget(1, 1),
        "[::1]:8080": HostBudget(1, 1),
    }
    assert budget_key("https://API.Example.com/x?y=1", hosts) == "api.example.com"
    assert budget_key("https://api.example.com:8443/x", hosts) == "api.example.com:8443"
    assert budget_key("http://api.example.com:9000/", hosts) == "api.example.com"
    assert budget_key("http://[::1]:8080/", hosts) == "[::1]:8080"
    assert budget_key("http://[::1]:8081/", hosts) == "[::1]"
    assert budget_key("http://other.example.com/", hosts) == "other.example.com"
    assert budget_key("http://bücher.de/", hosts) == "xn--bcher-kva.de"
    assert budget_key("/relative", hosts) is None


def test_a_host_port_key_matches_the_default_port_too() -> None:
    hosts = {"api.example.com:443": HostBudget(1, 1)}
    assert budget_key("https://api.example.com/", hosts) == "api.example.com:443"
    assert budget_key("http://api.example.com/", hosts) == "api.example.com"


def test_budgets_follow_the_queue_backend() -> None:
    assert isinstance(open_budgets("memory://", {}), LocalHostBudgets)
    assert isinstance(open_budgets("redis://127.0.0.1:6379/0", {}), RedisHostBudgets)


# --- every implementation, real time ------------------------------------------------------

Factory = Callable[[dict[str, HostBudget]], HostBudgets]


@pytest.fixture(params=["local", "redis"])
def redis_at(request: pytest.FixtureRequest) -> tuple[str, str] | None:
    """``None`` for the in-process budgets, else Redis's URL and this test's key prefix."""
    if request.param == "local":
        return None
    return request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")


@pytest.fixture
async def make_budgets(redis_at: tuple[str, str] | None) -> AsyncIterator[Factory]:
    """Budgets objects of one implementation; with Redis, each call is another instance
    on this test's key prefix."""
    async with AsyncExitStack() as stack:

        def build(hosts: dict[str, HostBudget]) -> HostBudgets:
            if redis_at is None:
                return LocalHostBudgets(hosts)
            budgets = RedisHostBudgets(redis_at[0], hosts, prefix=redis_at[1])
            stack.push_async_callback(budgets.close)
            return budgets

        yield build


async def opened(budgets: HostBudgets) -> HostBudgets:
    await budgets.open()
    return budgets


async def test_burst_is_free_then_the_wait_is_shown(make_budgets: Factory) -> None:
    budgets = await opened(make_budgets({"h": HostBudget(rate=4, burst=2)}))
    waits: Waits = []
    started = time.monotonic()
    for _ in range(3):
        await budgets.acquire("h", on_wait=lambda r, s: waits.append((r, s)))
    elapsed = time.monotonic() - started
    assert len(waits) == 1 and waits[0][0] is WaitReason.THROTTLE
    assert 0.15 < waits[0][1] <= 0.25
    assert 0.15 < elapsed < 0.5


async def test_cooldown_is_shown_and_only_lengthened(make_budgets: Factory) -> None:
    budgets = await opened(make_budgets({}))
    await budgets.cooldown("h", 0.3)
    await budgets.cooldown("h", 0.1)
    assert 0.2 < await budgets.cooldown_left("h") <= 0.3
    waits: Waits = []
    started = time.monotonic()
    await budgets.acquire("h", on_wait=lambda r, s: waits.append((r, s)))
    assert time.monotonic() - started >= 0.2
    assert [r for r, _ in waits] == [WaitReason.HOST_COOLDOWN]
    assert await budgets.cooldown_left("h") == 0.0


async def test_concurrency_and_cancellation(make_budgets: Factory) -> None:
    budgets = await opened(make_budgets({"h": HostBudget(100, 100, concurrency=1)}))
    first = await budgets.acquire("h")
    second = asyncio.create_task(budgets.acquire("h"))
    done, _ = await asyncio.wait({second}, timeout=0.2)
    assert not done
    # Cancelling a waiter ends its wait at once and takes nothing.
    started = time.monotonic()
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert time.monotonic() - started < 0.05
    third = asyncio.create_task(budgets.acquire("h"))
    await first.release()
    lease = await asyncio.wait_for(third, 1)
    await lease.release()
    await (await asyncio.wait_for(budgets.acquire("h"), 1)).release()


async def test_cancelling_a_cooldown_wait_returns_at_once(make_budgets: Factory) -> None:
    budgets = await opened(make_budgets({}))
    await budgets.cooldown("h", 30)
    waiter = asyncio.create_task(budgets.acquire("h"))
    done, _ = await asyncio.wait({waiter}, timeout=0.05)
    assert not done
    started = time.monotonic()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert time.monotonic() - started < 0.05


# --- Redis: one budget for every instance --------------------------------------------------


RedisFactory = Callable[..., RedisHostBudgets]


@pytest.fixture
async def redis_budgets(redis_url: str, redis_prefix: str) -> AsyncIterator[RedisFactory]:
    """Redis budgets on this test's prefix: each one another instance; all closed at the end."""
    made: list[RedisHostBudgets] = []

    def build(hosts: dict[str, HostBudget], **options: float) -> RedisHostBudgets:
        budgets = RedisHostBudgets(redis_url, hosts, prefix=redis_prefix, **options)
        made.append(budgets)
        return budgets

    yield build
    for budgets in made:
        await budgets.close()


async def test_instances_share_one_bucket_and_cooldown(
    redis_budgets: RedisFactory, redis_url: str, redis_prefix: str
) -> None:
    hosts = {"h": HostBudget(rate=2, burst=2)}
    a, b = await opened(redis_budgets(hosts)), await opened(redis_budgets(hosts))
    await a.acquire("h")
    await a.acquire("h")
    waits: Waits = []
    await b.acquire("h", on_wait=lambda r, s: waits.append((r, s)))
    assert len(waits) == 1 and waits[0][0] is WaitReason.THROTTLE
    assert 0.35 < waits[0][1] <= 0.5
    await a.cooldown("other", 5)
    assert 4 < await b.cooldown_left("other") <= 5
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = {k async for k in client.scan_iter(match=f"{redis_prefix}:host:*")}
        assert keys == {f"{redis_prefix}:host:h", f"{redis_prefix}:host:other:cooldown"}
        assert 4000 < await client.pttl(f"{redis_prefix}:host:other:cooldown") <= 5000
    finally:
        await client.aclose()


async def test_slots_are_renewed_while_held_and_expire_after_a_crash(
    redis_budgets: RedisFactory,
) -> None:
    hosts = {"h": HostBudget(100, 100, concurrency=1)}
    a = redis_budgets(hosts, slot_ttl=0.3)
    b = redis_budgets(hosts, slot_ttl=0.3)
    await a.open()
    await b.open()
    await a.acquire("h")  # never released: its holder will "crash"
    waiter = asyncio.create_task(b.acquire("h"))
    # Longer than the slot's lifetime: a live holder keeps renewing it.
    done, _ = await asyncio.wait({waiter}, timeout=0.7)
    assert not done
    started = time.monotonic()
    await a.close()  # stops renewing without releasing, as a crash would
    lease = await asyncio.wait_for(waiter, 2)
    assert time.monotonic() - started <= 0.5
    await lease.release()


async def test_unreachable_redis_falls_back_to_the_local_budget() -> None:
    budgets = RedisHostBudgets("redis://127.0.0.1:1/0", {"h": HostBudget(rate=4, burst=1)})
    await budgets.open()
    try:
        waits: Waits = []
        await budgets.acquire("h")
        await budgets.acquire("h", on_wait=lambda r, s: waits.append((r, s)))
        assert [r for r, _ in waits] == [WaitReason.THROTTLE]
        await budgets.cooldown("h", 0.1)
        assert await budgets.cooldown_left("h") > 0
    finally:
        await budgets.close()
