"""The work-queue contract: the same tests for the in-process queue and the Redis queue (on a
real Redis server), plus what only a shared queue can do (several instances, reclaiming the
batches of a dead instance, outages)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from syncd.errors import ConfigError, QueueError, QueueUnavailable
from syncd.queue import WorkQueue
from syncd.queue.base import Batch
from syncd.queue.memory import MemoryQueue
from syncd.queue.redis import RedisQueue

QueueFactory = Callable[..., WorkQueue]


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    """The backend under test: its name and, for Redis, the server URL and this test's key
    prefix (a synchronous fixture, so that it can pull in the async Redis fixtures only for
    the Redis case)."""
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        prefix: str = request.getfixturevalue("redis_prefix")
        return "redis", url, prefix
    return "memory", "", ""


@pytest.fixture
async def new_queue(backend: tuple[str, str, str]) -> AsyncIterator[QueueFactory]:
    """Builds (unopened) queues of the backend under test; closes them after the test. Redis
    queues built by one test share that test's key prefix."""
    name, url, prefix = backend
    created: list[WorkQueue] = []

    def make(**options: Any) -> WorkQueue:
        queue: WorkQueue = (
            MemoryQueue() if name == "memory" else RedisQueue(url, prefix=prefix, **options)
        )
        created.append(queue)
        return queue

    yield make
    for queue in reversed(created):
        await queue.close()


@pytest.fixture
async def queue(new_queue: QueueFactory) -> WorkQueue:
    """An open queue of the backend under test."""
    opened = new_queue()
    await opened.open()
    return opened


def ids(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}-{i}" for i in range(start, start + n)]


async def drain(queue: WorkQueue, max_items: int = 1000) -> list[Batch]:
    batches = []
    while (batch := await queue.pop(max_items, timeout=0)) is not None:
        batches.append(batch)
    return batches


# --- the contract: every backend -------------------------------------------------------


async def test_fifo_within_a_connector(queue: WorkQueue) -> None:
    await queue.push("c1", ids("d", 6))
    await queue.push("c1", ids("d", 4, start=6))

    batches = [await queue.pop(4, timeout=0) for _ in range(3)]

    assert [b.external_ids if b else None for b in batches] == [
        ("d-0", "d-1", "d-2", "d-3"),
        ("d-4", "d-5", "d-6", "d-7"),
        ("d-8", "d-9"),
    ]
    assert all(b is not None and b.connector_id == "c1" for b in batches)
    assert await queue.pop(4, timeout=0) is None


async def test_a_batch_holds_one_connector_and_at_most_max_items(queue: WorkQueue) -> None:
    await queue.push("a", ids("a", 250))
    await queue.push("b", ids("b", 3))

    batches = await drain(queue, max_items=100)

    assert [(b.connector_id, len(b.external_ids)) for b in batches] == [
        ("a", 100),
        ("b", 3),
        ("a", 100),
        ("a", 50),
    ]
    for batch in batches:
        assert all(i.startswith(f"{batch.connector_id}-") for i in batch.external_ids)


async def test_pop_goes_round_robin_across_connectors(queue: WorkQueue) -> None:
    for connector in ("a", "b", "c"):
        await queue.push(connector, ids(connector, 3))

    order = [b.connector_id for b in await drain(queue, max_items=1)]

    assert order == ["a", "b", "c"] * 3


async def test_a_small_connector_is_not_starved_by_a_big_one(queue: WorkQueue) -> None:
    for page in range(20):
        await queue.push("big", ids("big", 500, start=page * 500))
    await queue.push("small", ids("small", 10))

    first = [await queue.pop(100, timeout=0) for _ in range(3)]

    assert [b.connector_id if b else None for b in first] == ["big", "small", "big"]
    assert first[1] is not None and first[1].external_ids == tuple(ids("small", 10))
    assert await queue.depth() == {"big": 10_000 - 200}


async def test_pop_on_an_empty_queue_waits_for_the_timeout_then_returns_none(
    queue: WorkQueue,
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()

    assert await queue.pop(10, timeout=0.05) is None

    assert 0.04 <= loop.time() - started < 1.0


async def test_a_blocked_pop_wakes_when_something_is_pushed(queue: WorkQueue) -> None:
    popping = asyncio.create_task(queue.pop(10, timeout=30), name="test-pop")
    done, _ = await asyncio.wait({popping}, timeout=0.1)
    assert not done, "pop returned although the queue is empty"

    await queue.push("c1", ["x", "y"])

    # Well below the fallback poll: the push itself woke the waiter.
    batch = await asyncio.wait_for(popping, timeout=0.5)
    assert batch is not None
    assert (batch.connector_id, batch.external_ids) == ("c1", ("x", "y"))


async def test_purge_drops_one_connector_and_counts(queue: WorkQueue) -> None:
    await queue.push("a", ids("a", 5))
    await queue.push("b", ids("b", 3))
    taken = await queue.pop(2, timeout=0)
    assert taken is not None and taken.connector_id == "a"

    assert await queue.purge("a") == 3
    assert await queue.purge("a") == 0
    assert await queue.purge("never-seen") == 0

    assert await queue.depth() == {"b": 3}
    assert [b.connector_id for b in await drain(queue)] == ["b"]
    # A purged connector rejoins the rotation when it gets new work.
    await queue.push("a", ["again"])
    batch = await queue.pop(10, timeout=0)
    assert batch is not None and (batch.connector_id, batch.external_ids) == ("a", ("again",))


async def test_purge_is_atomic_against_concurrent_pushes(queue: WorkQueue) -> None:
    pages = [ids(f"p{n}", 50) for n in range(40)]

    results = await asyncio.gather(
        *(queue.push("a", page) for page in pages[:20]),
        queue.purge("a"),
        *(queue.push("a", page) for page in pages[20:]),
    )

    purged = results[20]
    assert isinstance(purged, int)
    left = (await queue.depth()).get("a", 0)
    assert purged + left == 40 * 50
    # Neither a page nor the purge is ever split: whole pages were dropped or kept.
    assert purged % 50 == 0
    kept = [i for b in await drain(queue) for i in b.external_ids]
    assert len(kept) == left
    assert len({i.split("-")[0] for i in kept}) * 50 == left


async def test_depth_counts_queued_entries_per_connector(queue: WorkQueue) -> None:
    assert await queue.depth() == {}
    await queue.push("a", ids("a", 5))
    await queue.push("b", ids("b", 2))
    assert await queue.depth() == {"a": 5, "b": 2}

    await queue.pop(3, timeout=0)
    assert await queue.depth() == {"a": 2, "b": 2}
    await queue.pop(3, timeout=0)
    assert await queue.depth() == {"a": 2}
    await queue.pop(3, timeout=0)
    assert await queue.depth() == {}


async def test_ack_forgets_the_batch_and_is_idempotent(queue: WorkQueue) -> None:
    await queue.push("a", ids("a", 3))
    batch = await queue.pop(10, timeout=0)
    assert batch is not None

    await queue.ack(batch)
    await queue.ack(batch)

    assert await queue.depth() == {}
    assert await queue.pop(10, timeout=0) is None


async def test_an_empty_push_changes_nothing(queue: WorkQueue) -> None:
    await queue.push("a", [])

    assert await queue.depth() == {}
    assert await queue.pop(10, timeout=0) is None


async def test_publish_reaches_every_subscriber_including_our_own(queue: WorkQueue) -> None:
    first, second = queue.messages(), queue.messages()

    await queue.publish({"type": "abort", "connector_id": "c1"})
    await queue.publish({"type": "abort", "connector_id": "c2"})

    for iterator in (first, second):
        got = [await asyncio.wait_for(anext(iterator), timeout=2) for _ in range(2)]
        assert got == [
            {"type": "abort", "connector_id": "c1"},
            {"type": "abort", "connector_id": "c2"},
        ]


async def test_close_wakes_a_blocked_pop_and_ends_messages(queue: WorkQueue) -> None:
    received: list[dict[str, str]] = []

    async def listen() -> None:
        async for message in queue.messages():
            received.append(message)

    popping = asyncio.create_task(queue.pop(10, timeout=30), name="test-pop")
    listening = asyncio.create_task(listen(), name="test-listen")
    done, _ = await asyncio.wait({popping, listening}, timeout=0.1)
    assert not done

    await queue.close()

    assert await asyncio.wait_for(popping, timeout=1) is None
    await asyncio.wait_for(listening, timeout=1)
    assert received == []


async def test_a_queue_is_usable_only_while_open(new_queue: QueueFactory) -> None:
    queue = new_queue()
    with pytest.raises(QueueError):
        await queue.push("a", ["x"])
    with pytest.raises(QueueError):
        await queue.ping()

    await queue.open()
    await queue.ping()
    await queue.close()
    await queue.close()

    with pytest.raises(QueueError):
        await queue.push("a", ["x"])
    with pytest.raises(QueueError):
        await queue.depth()
    with pytest.raises(QueueError):
        await queue.ping()
    assert await queue.pop(10, timeout=1) is None
    assert [m async for m in queue.messages()] == []


def test_shared_primitives_live_in_base() -> None:
    """The wake-up and fan-out primitives both backends use are in syncd.queue.base: the
    Redis queue does not load the in-process one, whose module still re-exports them."""
    from syncd.queue import base, memory, redis

    for name in ("Broadcast", "QueueState", "Signal", "Subscription", "wait_event"):
        assert getattr(memory, name) is getattr(base, name)
        assert getattr(redis, name) is getattr(base, name)
    probe = "import sys, syncd.queue.redis; print('syncd.queue.memory' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30
    )
    assert result.stdout.strip() == "False"


# --- Redis only: several instances share one queue -------------------------------------


@pytest.fixture
async def new_redis_queue(redis_url: str, redis_prefix: str) -> AsyncIterator[QueueFactory]:
    """Builds (unopened) Redis queues sharing this test's prefix; closes them afterwards."""
    created: list[RedisQueue] = []

    def make(url: str = redis_url, **options: Any) -> RedisQueue:
        queue = RedisQueue(url, prefix=redis_prefix, **options)
        created.append(queue)
        return queue

    yield make
    for queue in reversed(created):
        await queue.close()


async def test_redis_instances_sharing_a_prefix_see_each_others_work(
    new_redis_queue: QueueFactory,
) -> None:
    a, b = new_redis_queue(instance_id="a"), new_redis_queue(instance_id="b")
    await a.open()
    await b.open()
    a_messages, b_messages = a.messages(), b.messages()

    popping = asyncio.create_task(a.pop(10, timeout=30), name="test-pop")
    done, _ = await asyncio.wait({popping}, timeout=0.1)
    assert not done
    await b.push("c1", ["x", "y"])
    batch = await asyncio.wait_for(popping, timeout=0.5)
    assert batch is not None and batch.external_ids == ("x", "y")

    await b.push("c2", ["z"])
    assert await a.depth() == {"c2": 1}
    assert await a.purge("c2") == 1
    assert await b.depth() == {}

    await b.publish({"type": "abort", "connector_id": "c1"})
    for iterator in (a_messages, b_messages):
        message = await asyncio.wait_for(anext(iterator), timeout=2)
        assert message == {"type": "abort", "connector_id": "c1"}


_DOOMED_INSTANCE = """
import asyncio, json, sys
from syncd.queue.redis import RedisQueue

async def main() -> None:
    url, prefix, instance_id, max_items = sys.argv[1:5]
    queue = RedisQueue(url, prefix=prefix, instance_id=instance_id,
                       heartbeat_seconds=0.05, reclaim_after_seconds=0.3)
    await queue.open()
    batch = await queue.pop(int(max_items), timeout=10)
    print(json.dumps(list(batch.external_ids)), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def pop_in_a_process_then_kill_it(
    redis_url: str, prefix: str, instance_id: str, max_items: int
) -> list[str]:
    """Another process opens the queue, pops a batch, and is killed (SIGKILL) without
    acknowledging it; the ids it held."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _DOOMED_INSTANCE,
        redis_url,
        prefix,
        instance_id,
        str(max_items),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        held: list[str] = json.loads(line)
    finally:
        process.kill()
        await process.wait()
    return held


async def test_redis_batch_of_a_killed_instance_is_reclaimed(
    new_redis_queue: QueueFactory, redis_url: str, redis_prefix: str
) -> None:
    live = new_redis_queue(instance_id="live", heartbeat_seconds=0.05, reclaim_after_seconds=1)
    await live.open()
    await live.push("c1", ids("d", 10))

    held = await pop_in_a_process_then_kill_it(redis_url, redis_prefix, "doomed", 4)
    assert held == ids("d", 4)

    rest = await live.pop(10, timeout=0)
    assert rest is not None and rest.external_ids == tuple(ids("d", 6, start=4))
    # The dead instance's liveness key expires 0.3 s after its last heartbeat; then the next
    # heartbeat of the live instance hands the batch back and wakes this pop.
    reclaimed = await live.pop(10, timeout=10)
    assert reclaimed is not None
    assert (reclaimed.connector_id, reclaimed.external_ids) == ("c1", tuple(held))
    await live.ack(reclaimed)
    await live.ack(rest)
    assert await live.pop(10, timeout=0) is None


async def test_redis_batch_is_not_reclaimed_while_its_instance_lives(
    new_redis_queue: QueueFactory,
) -> None:
    holder = new_redis_queue(
        instance_id="holder", heartbeat_seconds=0.05, reclaim_after_seconds=0.2
    )
    other = new_redis_queue(instance_id="other", heartbeat_seconds=0.05, reclaim_after_seconds=0.2)
    await holder.open()
    await other.open()
    await holder.push("c1", ["x"])
    batch = await holder.pop(10, timeout=0)
    assert batch is not None

    # Several liveness periods and reclaim rounds of both instances go by: nothing comes back,
    # since the holder keeps its batch (it is not an orphan) and keeps heartbeating.
    assert await other.pop(10, timeout=0.6) is None
    await holder.ack(batch)


async def test_redis_restart_with_the_same_instance_id_takes_back_its_batches(
    new_redis_queue: QueueFactory, redis_url: str, redis_prefix: str
) -> None:
    first = new_redis_queue(instance_id="writer")
    await first.open()
    await first.push("c1", ids("d", 3))
    await first.push("c2", ids("e", 2))
    await first.close()

    held = await pop_in_a_process_then_kill_it(redis_url, redis_prefix, "node-1", 10)
    assert held == ids("d", 3)

    # Its liveness key has not expired yet, but a fresh process with the same id knows it
    # holds nothing: the batch is back at once.
    restarted = new_redis_queue(instance_id="node-1")
    await restarted.open()
    assert await restarted.depth() == {"c1": 3, "c2": 2}
    batches = await drain(restarted)
    assert {(b.connector_id, b.external_ids) for b in batches} == {
        ("c1", tuple(held)),
        ("c2", ("e-0", "e-1")),
    }


async def test_redis_close_hands_back_unacknowledged_batches(
    new_redis_queue: QueueFactory,
) -> None:
    leaving = new_redis_queue(instance_id="leaving")
    staying = new_redis_queue(instance_id="staying")
    await leaving.open()
    await staying.open()
    await leaving.push("c1", ids("d", 4))
    acked = await leaving.pop(2, timeout=0)
    unacked = await leaving.pop(2, timeout=0)
    assert acked is not None and unacked is not None
    await leaving.ack(acked)

    await leaving.close()
    await leaving.ack(unacked)  # too late: a no-op, the batch is already handed back

    back = await staying.pop(10, timeout=0)
    assert back is not None and back.external_ids == unacked.external_ids
    assert await staying.pop(10, timeout=0) is None


async def test_redis_close_ends_a_heartbeat_whose_cancellation_was_lost(
    new_redis_queue: QueueFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Python 3.11, redis-py sends a command through ``asyncio.wait_for``, which drops a
    cancellation that arrives in the same loop step as the end of the send (gh-86296).
    Here the heartbeat's send finishes exactly when ``close`` cancels it; the heartbeat
    must still end, or ``close`` waits for it forever."""
    queue = new_redis_queue(instance_id="closing", heartbeat_seconds=0.05)
    await queue.open()
    assert isinstance(queue, RedisQueue)
    alive = f"alive:{queue.instance_id}".encode()
    send = aioredis.connection.Connection._send_packed_command
    sent = asyncio.Event()
    reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def send_then_hold(self: Any, command: Any) -> None:
        await send(self, command)
        if not sent.is_set() and any(alive in bytes(part) for part in command):
            sent.set()
            await reply

    monkeypatch.setattr(aioredis.connection.Connection, "_send_packed_command", send_then_hold)
    await asyncio.wait_for(sent.wait(), timeout=5)
    # close stops the pub/sub reader first, then the heartbeat: releasing the send when the
    # reader ends puts its completion in the very step in which the heartbeat is cancelled.
    (reader,) = (t for t in asyncio.all_tasks() if t.get_name().startswith("syncd-queue-reader:"))
    reader.add_done_callback(lambda _: reply.set_result(None))

    closing = asyncio.create_task(queue.close(), name="test-close")
    done, _ = await asyncio.wait({closing}, timeout=5)
    assert done, "close() is stuck waiting for its heartbeat"
    await closing
    heartbeats = [
        t for t in asyncio.all_tasks() if t.get_name().startswith("syncd-queue-heartbeat:")
    ]
    assert heartbeats == []


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_redis_unreachable_server_raises_queue_error_without_the_password(
    new_redis_queue: QueueFactory,
) -> None:
    queue = new_redis_queue(
        f"redis://user:s3cret-pw@127.0.0.1:{closed_port()}/0?password=s3cret-pw"
    )

    with pytest.raises(QueueError) as caught:
        await queue.open()

    assert "s3cret-pw" not in str(caught.value)
    assert "redis://127.0.0.1:" in str(caught.value)
    with pytest.raises(QueueError):
        await queue.push("a", ["x"])


class TcpProxy:
    """A local TCP proxy to Redis that a test can cut and restore (an outage), or have lose
    the reply to one request (a connection that dies after Redis ran the command)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._marker: bytes | None = None
        self._reply_lost = asyncio.Event()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        for writer in self._writers:
            writer.close()
        self._pipes.clear()
        self._writers.clear()

    def lose_reply_to(self, marker: bytes) -> asyncio.Event:
        """Swallow the reply to the next request containing ``marker``; the event is set once
        Redis has answered it and the answer was dropped."""
        self._marker = marker
        self._reply_lost = asyncio.Event()
        return self._reply_lost

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers |= {writer, up_writer}
        swallow_next_reply = False

        def request(data: bytes) -> bool:
            nonlocal swallow_next_reply
            if self._marker is not None and self._marker in data:
                self._marker = None
                swallow_next_reply = True
            return True

        def reply(data: bytes) -> bool:
            nonlocal swallow_next_reply
            if swallow_next_reply:
                swallow_next_reply = False
                self._reply_lost.set()
                return False
            return True

        for source, sink, keep in ((reader, up_writer, request), (up_reader, writer, reply)):
            pipe = asyncio.create_task(self._pipe(source, sink, keep), name="test-proxy-pipe")
            self._pipes.add(pipe)

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, keep: Callable[[bytes], bool]
    ) -> None:
        try:
            while data := await source.read(65536):
                if keep(data):
                    sink.write(data)
                    await sink.drain()
        except ConnectionError:
            pass
        finally:
            sink.close()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[TcpProxy]:
    target = urlsplit(redis_url)
    running = TcpProxy(target.hostname or "127.0.0.1", target.port or 6379)
    await running.start()
    yield running
    await running.cut()


async def test_redis_outage_raises_queue_error_and_the_queue_recovers(
    proxy: TcpProxy, new_redis_queue: QueueFactory, redis_url: str
) -> None:
    database = urlsplit(redis_url).path or "/0"
    queue = new_redis_queue(f"redis://127.0.0.1:{proxy.port}{database}", instance_id="flaky")
    direct = new_redis_queue(instance_id="direct")
    await queue.open()
    await direct.open()
    await queue.push("c1", ["before"])

    await proxy.cut()
    with pytest.raises(QueueError):
        await queue.push("c1", ["during"])
    with pytest.raises(QueueError):
        await queue.pop(10, timeout=0)
    with pytest.raises(QueueError):
        await queue.ping()

    await proxy.start()
    await queue.ping()
    await queue.push("c1", ["after"])
    batches = await drain(queue)
    assert [i for b in batches for i in b.external_ids] == ["before", "after"]

    # The subscription comes back too. Pub/sub is lossy by design (a lost message is
    # covered by the store poll), so keep publishing until one arrives.
    messages = queue.messages()
    async with asyncio.timeout(10):
        while True:
            await direct.publish({"type": "ping"})
            try:
                got = await asyncio.wait_for(anext(messages), timeout=0.2)
            except TimeoutError:
                continue
            assert got == {"type": "ping"}
            break


async def test_redis_batch_whose_pop_reply_was_lost_is_handed_back(
    proxy: TcpProxy, new_redis_queue: QueueFactory, redis_url: str, redis_prefix: str
) -> None:
    database = urlsplit(redis_url).path or "/0"
    flaky = new_redis_queue(
        f"redis://127.0.0.1:{proxy.port}{database}",
        instance_id="flaky",
        heartbeat_seconds=0.05,
        reclaim_after_seconds=0.3,
    )
    other = new_redis_queue(instance_id="other")
    await flaky.open()
    await other.open()
    await other.push("c1", ["x", "y"])

    # Redis runs the pop script (the batch is parked under "flaky"), but the reply never
    # comes back and the caller gives up: nobody holds the batch.
    reply_lost = proxy.lose_reply_to(f"{redis_prefix}:q:".encode())
    popping = asyncio.create_task(flaky.pop(10, timeout=0), name="test-pop")
    await asyncio.wait_for(reply_lost.wait(), timeout=5)
    popping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await popping
    assert await other.depth() == {}

    # "flaky" is alive, yet its heartbeat hands the orphan back once it is older than the
    # liveness TTL, and the wake-up reaches the waiter on the other instance.
    back = await other.pop(10, timeout=10)
    assert back is not None and (back.connector_id, back.external_ids) == ("c1", ("x", "y"))


async def test_redis_control_messages_that_are_not_objects_of_strings_are_dropped(
    new_redis_queue: QueueFactory, redis_url: str, redis_prefix: str
) -> None:
    queue = new_redis_queue(instance_id="listener")
    await queue.open()
    messages = queue.messages()
    raw = aioredis.Redis.from_url(redis_url)
    try:
        for bad in (b"not json", b"[1, 2]", b'{"n": 1}'):
            await raw.publish(f"{redis_prefix}:control", bad)
    finally:
        await raw.aclose()
    await queue.publish({"type": "ok"})

    assert await asyncio.wait_for(anext(messages), timeout=2) == {"type": "ok"}


def test_redis_liveness_ttl_must_outlast_the_heartbeat(redis_url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        RedisQueue(redis_url, heartbeat_seconds=5.0, reclaim_after_seconds=5.0)
    assert caught.value.key == "queue.reclaim_after_seconds"


async def test_a_redis_that_refuses_connections_is_unavailable() -> None:
    """Nothing listens on the port: the queue is unavailable (a run would wait, issue 23)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    queue = RedisQueue(f"redis://127.0.0.1:{port}/0", prefix="syncd-unavailable")
    with pytest.raises(QueueUnavailable, match="open failed"):
        await queue.open()
