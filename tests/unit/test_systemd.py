"""sd_notify, the watchdog and socket activation against real sockets and processes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncd.systemd import listen_sockets, notify, watchdog_interval, watchdog_loop

SOCKET_ACTIVATE = "/usr/bin/systemd-socket-activate"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path: AF_UNIX paths are limited to 107 bytes."""
    path = Path("/tmp") / f"syncd-{uuid.uuid4().hex[:10]}"
    path.mkdir()
    yield path
    shutil.rmtree(path)


@pytest.fixture
def receiver(short_tmp: Path) -> Iterator[tuple[socket.socket, dict[str, str]]]:
    """A unix datagram socket standing in for systemd, and the environment naming it."""
    path = str(short_tmp / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    yield sock, {"NOTIFY_SOCKET": path}
    sock.close()


async def recv(sock: socket.socket) -> str:
    """The next datagram, waiting on the socket (bounded so a missing one fails the test)."""
    loop = asyncio.get_running_loop()
    data = await asyncio.wait_for(loop.sock_recv(sock, 4096), timeout=5)
    return data.decode()


def pending(sock: socket.socket) -> list[str]:
    """Datagrams already queued on ``sock``, without waiting."""
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


# --- notify ---------------------------------------------------------------------------


async def test_notify_sends_one_datagram_to_a_path(
    receiver: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = receiver
    assert notify("READY=1", "STATUS=2 syncs running, queue depth 7", environ=env) is True
    assert await recv(sock) == "READY=1\nSTATUS=2 syncs running, queue depth 7"
    assert pending(sock) == []


async def test_notify_keeps_each_message_on_one_line(
    receiver: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = receiver
    assert notify("STATUS=failed:\nREADY=1", "ERRNO=5", environ=env) is True
    assert await recv(sock) == "STATUS=failed: READY=1\nERRNO=5"


async def test_notify_reaches_an_abstract_socket() -> None:
    name = f"syncd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.setblocking(False)
        assert notify("STOPPING=1", environ={"NOTIFY_SOCKET": "@" + name}) is True
        assert await recv(sock) == "STOPPING=1"


def test_notify_without_notify_socket_is_a_no_op() -> None:
    assert notify("READY=1", environ={}) is False
    assert notify("READY=1", environ={"NOTIFY_SOCKET": ""}) is False


def test_notify_reports_failure_instead_of_raising(short_tmp: Path) -> None:
    # Nobody listens on that path: the daemon must carry on.
    assert notify("READY=1", environ={"NOTIFY_SOCKET": str(short_tmp / "gone")}) is False
    assert notify("READY=1", environ={"NOTIFY_SOCKET": "vsock:2:1234"}) is False


# --- watchdog_interval ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "1000"}, 0.0005),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": ""}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(env) == expected


# --- watchdog_loop --------------------------------------------------------------------


class FakeTime:
    """A clock that only moves when the loop under test sleeps (plus any injected lag)."""

    def __init__(self, lags: list[float], stop_after: int) -> None:
        self.now = 1000.0
        self.lags = lags
        self.stop_after = stop_after
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        lag = self.lags[len(self.sleeps) - 1] if len(self.sleeps) <= len(self.lags) else 0.0
        self.now += delay + lag
        if len(self.sleeps) == self.stop_after:
            raise asyncio.CancelledError


async def test_watchdog_loop_pings_at_once_then_every_interval(
    receiver: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = receiver
    fake = FakeTime(lags=[], stop_after=4)
    with pytest.raises(asyncio.CancelledError):
        await watchdog_loop(10.0, environ=env, sleep=fake.sleep, clock=fake.clock)
    assert fake.sleeps == [10.0, 10.0, 10.0, 10.0]
    assert pending(sock) == ["WATCHDOG=1"] * 4


async def test_watchdog_loop_does_not_drift_and_skips_missed_pings(
    receiver: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = receiver
    # Sleeps overrun by 2 s, then the loop is blocked for 25 s (two whole intervals).
    fake = FakeTime(lags=[2.0, 25.0, 0.0, 0.0], stop_after=4)
    with pytest.raises(asyncio.CancelledError):
        await watchdog_loop(10.0, environ=env, sleep=fake.sleep, clock=fake.clock)
    # 10; 8 (back on the 10 s grid); then one immediate ping, not a burst; then the grid again.
    assert fake.sleeps == [10.0, 8.0, 0.0, 10.0]
    assert pending(sock) == ["WATCHDOG=1"] * 4


async def test_watchdog_loop_pings_at_the_right_rate_in_real_time(
    receiver: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = receiver
    interval = 0.02
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(watchdog_loop(interval, environ=env), name="test-watchdog")
    try:
        assert await recv(sock) == "WATCHDOG=1"
        first = loop.time()
        for _ in range(5):
            assert await recv(sock) == "WATCHDOG=1"
        elapsed = loop.time() - first
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # Five intervals: never faster than the schedule; generous upper bound for slow CI.
    assert elapsed >= 5 * interval - 0.005
    assert elapsed < 5 * interval + 1.0


async def test_watchdog_loop_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="positive"):
        await watchdog_loop(0.0, environ={})


async def test_a_blocked_loop_stops_the_pings(
    receiver: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = receiver
    task = asyncio.create_task(watchdog_loop(0.01, environ=env), name="test-watchdog")
    try:
        assert await recv(sock) == "WATCHDOG=1"
        pending(sock)
        # Block the event loop (as a runaway synchronous call would) for 20 intervals.
        loop = asyncio.get_running_loop()
        start = loop.time()
        while loop.time() - start < 0.2:
            pass
        # Nothing was sent while the loop was blocked (a thread would have kept pinging)...
        assert pending(sock) == []
        # ...and the pings resume once the loop runs again.
        assert await recv(sock) == "WATCHDOG=1"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# --- listen_sockets -------------------------------------------------------------------


def test_listen_sockets_ignores_variables_meant_for_another_process() -> None:
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "api"}
    assert listen_sockets(env) == []
    assert env == {}


def test_listen_sockets_can_keep_the_variables() -> None:
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}
    assert listen_sockets(env, unset=False) == []
    assert env == {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}


@pytest.mark.parametrize(
    "env",
    [{}, {"LISTEN_FDS": "1"}, {"LISTEN_PID": "self"}, {"LISTEN_PID": "self", "LISTEN_FDS": "0"}],
)
def test_listen_sockets_without_passed_sockets(env: dict[str, str]) -> None:
    env = {k: str(os.getpid()) if v == "self" else v for k, v in env.items()}
    assert listen_sockets(env) == []


def test_listen_sockets_rejects_malformed_values() -> None:
    assert listen_sockets({"LISTEN_PID": "me", "LISTEN_FDS": "1"}) == []
    assert listen_sockets({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "one"}) == []


CHILD = """
import json, os, socket, sys
from syncd.systemd import listen_sockets
names = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")
before = sorted(n for n in names if n in os.environ)
socks = listen_sockets()
info = {
    "before": before,
    "after": sorted(n for n in names if n in os.environ),
    "fds": [s.fileno() for s in socks],
    "families": [s.family.name for s in socks],
    "types": [s.type.name for s in socks],
    "addresses": [s.getsockname() for s in socks],
    "inheritable": [os.get_inheritable(s.fileno()) for s in socks],
}
conn, _ = socks[0].accept()
conn.sendall(json.dumps(info).encode())
conn.close()
"""


@pytest.mark.needs("systemd-socket-activate")
async def test_listen_sockets_takes_over_sockets_from_systemd_socket_activate(
    short_tmp: Path,
) -> None:
    first, second = str(short_tmp / "api.sock"), str(short_tmp / "other.sock")
    proc = await asyncio.create_subprocess_exec(
        SOCKET_ACTIVATE,
        "-l",
        first,
        "-l",
        second,
        "--fdname=api:other",
        "-E",
        "PATH",
        "-E",
        "PYTHONPATH",
        "--",
        sys.executable,
        "-c",
        CHILD,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        # systemd-socket-activate announces each socket once it listens.
        for path in (first, second):
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=10)
            assert line.decode().startswith(f"Listening on {path}"), line
        # The first connection makes it exec the child with the listening sockets.
        reader, writer = await asyncio.open_unix_connection(first)
        data = await asyncio.wait_for(reader.read(), timeout=30)
        writer.close()
        await writer.wait_closed()
        assert await asyncio.wait_for(proc.wait(), timeout=10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    info = json.loads(data)
    assert info == {
        "before": ["LISTEN_FDNAMES", "LISTEN_FDS", "LISTEN_PID"],
        "after": [],
        "fds": [3, 4],
        "families": ["AF_UNIX", "AF_UNIX"],
        "types": ["SOCK_STREAM", "SOCK_STREAM"],
        "addresses": [first, second],
        "inheritable": [False, False],
    }


async def test_listen_sockets_refuses_a_descriptor_that_is_not_a_socket(
    short_tmp: Path,
) -> None:
    # Put a regular file at fd 3 in a child process and claim it was passed by systemd.
    script = """
import os, sys
from syncd.errors import ConfigError
from syncd.systemd import listen_sockets
fd = os.open(sys.argv[1], os.O_RDONLY)
os.dup2(fd, 3)
try:
    listen_sockets({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1"})
except ConfigError as exc:
    print(exc.key, exc.message.split(":")[0])
"""
    target = short_tmp / "plain"
    target.write_text("not a socket")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(target), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0
    assert out.decode().strip() == "LISTEN_FDS file descriptor 3 is not a socket"
