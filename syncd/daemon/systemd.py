"""The systemd service protocol without libsystemd: sd_notify, the watchdog, socket activation.

Everything here is a no-op outside systemd: without ``NOTIFY_SOCKET`` :func:`notify` returns
``False``, without ``WATCHDOG_USEC`` :func:`watchdog_interval` returns ``None`` and without
``LISTEN_FDS`` :func:`listen_sockets` returns an empty list.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, MutableMapping

import structlog

from syncd.errors import ConfigError

__all__ = ["LISTEN_FDS_START", "listen_sockets", "notify", "watchdog_interval", "watchdog_loop"]

#: The first file descriptor systemd passes (``SD_LISTEN_FDS_START``).
LISTEN_FDS_START = 3

_log = structlog.get_logger("syncd.daemon.systemd")


def _notify_address(value: str) -> str | None:
    """The ``AF_UNIX`` address named by ``$NOTIFY_SOCKET``, or None if unsupported."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        # Abstract namespace: the leading "@" stands for a NUL byte.
        return "\0" + value[1:]
    return None


def notify(*messages: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``messages`` (``"READY=1"``, ``"STATUS=..."``) to the service manager.

    All messages go in one datagram, one per line, so systemd applies them together.
    ``$NOTIFY_SOCKET`` may be a path or an abstract socket (``@name``). Returns ``True`` when
    the datagram was sent, ``False`` when not running under systemd or when sending failed
    (logged): a daemon must keep working if its manager stops listening.
    """
    target = environ.get("NOTIFY_SOCKET", "")
    if not target:
        return False
    address = _notify_address(target)
    if address is None:
        _log.warning("systemd.notify_socket_unsupported", notify_socket=target)
        return False
    # One assignment per line: a newline inside a value (an error message in STATUS=) must
    # not be read as a second assignment.
    payload = "\n".join(" ".join(m.splitlines()) for m in messages).encode("utf-8")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            # Never block the event loop on a manager that is slow to read.
            sock.setblocking(False)
            sock.sendto(payload, address)
    except OSError as exc:
        _log.warning("systemd.notify_failed", notify_socket=target, error=str(exc))
        return False
    return True


def watchdog_interval(environ: Mapping[str, str] = os.environ) -> float | None:
    """How often to send ``WATCHDOG=1``, in seconds: half of ``$WATCHDOG_USEC``.

    ``None`` when the watchdog is off, the value is not a positive integer, or
    ``$WATCHDOG_PID`` names another process (the variables were inherited from a parent).
    """
    raw = environ.get("WATCHDOG_USEC", "")
    if not raw:
        return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = environ.get("WATCHDOG_PID", "")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec / 2 / 1_000_000


async def watchdog_loop(
    interval: float,
    *,
    environ: Mapping[str, str] = os.environ,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] | None = None,
) -> None:
    """Send ``WATCHDOG=1`` now and every ``interval`` seconds until cancelled.

    Runs as a task on the daemon's event loop, so a blocked loop stops the pings and systemd
    restarts the service. The schedule does not drift: each sleep lasts until the next
    multiple of ``interval``; after a stall the next ping goes out at once and the schedule
    restarts from there. ``sleep`` and ``clock`` (default: the loop's clock) are injectable
    for tests.
    """
    if not interval > 0:
        raise ValueError(f"watchdog interval must be positive, got {interval!r}")
    now = clock if clock is not None else asyncio.get_running_loop().time
    deadline = now()
    while True:
        notify("WATCHDOG=1", environ=environ)
        deadline += interval
        delay = deadline - now()
        if delay < 0:
            # The loop was blocked past a whole interval: ping at once, then restart the
            # schedule instead of sending a burst of catch-up pings.
            deadline = now()
            delay = 0.0
        await sleep(delay)


def listen_sockets(
    environ: Mapping[str, str] = os.environ, *, unset: bool = True
) -> list[socket.socket]:
    """The sockets systemd passed by socket activation (``$LISTEN_FDS`` from fd 3), in order.

    Empty unless ``$LISTEN_PID`` is this process. Each descriptor is marked close-on-exec so
    children do not inherit it. With ``unset`` (and a mutable ``environ``) the ``LISTEN_*``
    variables are removed, whatever the outcome, so that children do not pick them up.
    Raises :class:`~syncd.errors.ConfigError` if a passed descriptor is not a socket.
    """
    pid = environ.get("LISTEN_PID", "")
    count = environ.get("LISTEN_FDS", "")
    if unset and isinstance(environ, MutableMapping):
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            environ.pop(name, None)
    if not pid or not count:
        return []
    try:
        if int(pid) != os.getpid():
            return []
        n = int(count)
    except ValueError:
        _log.warning("systemd.listen_fds_malformed", listen_pid=pid, listen_fds=count)
        return []
    sockets: list[socket.socket] = []
    for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + max(n, 0)):
        try:
            os.set_inheritable(fd, False)
            # socket.socket(fileno=...) reads family, type and protocol from the descriptor.
            sockets.append(socket.socket(fileno=fd))
        except OSError as exc:
            for sock in sockets:
                sock.close()
            raise ConfigError("LISTEN_FDS", f"file descriptor {fd} is not a socket: {exc}") from exc
    return sockets
