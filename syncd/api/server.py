"""Serving the control API: TCP ``host:port``, ``unix:/path``, or a socket handed over by
systemd (socket activation).

The daemon owns signals and the event loop; the web layer is only an ``AppRunner`` that the
daemon cleans up on stop. The API refuses to listen beyond loopback without a token.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import stat
from collections.abc import Callable, Sequence

from aiohttp import web

from syncd.errors import ConfigError

KEY = "api.listen"
UNIX_PREFIX = "unix:"
UNIX_SOCKET_MODE = 0o600

_SiteFactory = Callable[[web.AppRunner], web.BaseSite]


async def start_api(
    app: web.Application,
    listen: str,
    *,
    token: str | None,
    sock: socket.socket | None = None,
    socks: Sequence[socket.socket] = (),
) -> web.AppRunner:
    """Serve ``app`` and return its started runner (``await runner.cleanup()`` stops it).

    ``listen`` is ``host:port`` (``[::1]:8765`` for IPv6; port 0 picks a free port, read it
    back from ``runner.addresses``) or ``unix:/path`` (a stale socket file is replaced; the
    socket is created with mode 0600). A pre-bound ``sock`` (socket activation) takes
    precedence over ``listen``; ``socks`` serves several (systemd may pass a TCP and a unix
    socket), one site each, on one runner. Without ``token``, only loopback addresses and
    unix sockets are accepted: anything else raises :class:`ConfigError` (``api.listen``).
    """
    passed = [*([sock] if sock is not None else []), *socks]
    if passed:
        for s in passed:
            _check_exposure(_socket_host(s), token)
        return await _serve(app, *(_sock_site(s) for s in passed))
    if listen.startswith(UNIX_PREFIX):
        path = listen[len(UNIX_PREFIX) :]
        if not path:
            raise ConfigError(KEY, "expected unix:/path/to/socket")
        unix_sock = _bind_unix(path)
        try:
            return await _serve(app, lambda runner: _UnixSocketSite(runner, unix_sock, path))
        except BaseException:
            unix_sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
    host, port = parse_host_port(listen)
    _check_exposure(host, token)
    return await _serve(app, lambda runner: web.TCPSite(runner, host or None, port))


def parse_host_port(listen: str) -> tuple[str, int]:
    """``127.0.0.1:8765`` / ``[::1]:0`` / ``:8765`` (every interface) → ``(host, port)``."""
    if listen.startswith("["):
        host, sep, rest = listen[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ConfigError(KEY, f"expected [ipv6]:port, got {listen!r}")
        port_text = rest[1:]
    else:
        host, sep, port_text = listen.rpartition(":")
        if not sep or ":" in host:
            raise ConfigError(KEY, f"expected host:port, [ipv6]:port or unix:/path, got {listen!r}")
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ConfigError(KEY, f"port must be an integer between 0 and 65535, got {port_text!r}")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals; every other name counts as exposed."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_exposure(host: str | None, token: str | None) -> None:
    # None: a unix socket, reachable only through the file system.
    if host is None or token or is_loopback(host):
        return
    where = host or "every interface"
    raise ConfigError(
        KEY,
        f"refusing to listen on {where} without an API token: set [api] token, "
        "[api] token_file or SYNCD_API_TOKEN, or listen on loopback or a unix socket",
    )


def _socket_host(sock: socket.socket) -> str | None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        host = sock.getsockname()[0]
        return str(host)
    return None


def _bind_unix(path: str) -> socket.socket:
    """A unix socket bound at ``path`` with mode 0600, not yet listening."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(mode):
            raise ConfigError(KEY, f"{path} exists and is not a socket")
        if _in_use(path):
            raise ConfigError(KEY, f"{path} is in use by another process")
        os.unlink(path)  # left behind by a process that did not stop cleanly
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        # Nobody can connect before listen(), which the site calls: no window where the
        # socket is reachable with the umask's mode.
        os.chmod(path, UNIX_SOCKET_MODE)
    except OSError as exc:
        sock.close()
        raise ConfigError(KEY, f"cannot bind {path}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    return sock


def _in_use(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


class _UnixSocketSite(web.SockSite):
    """A site on a unix socket this module bound; removes the socket file when stopped."""

    __slots__ = ("_path",)

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, path: str) -> None:
        super().__init__(runner, sock)
        self._path = path

    async def stop(self) -> None:
        """Stop serving and remove the socket file."""
        await super().stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)


def _sock_site(sock: socket.socket) -> _SiteFactory:
    return lambda runner: web.SockSite(runner, sock)


async def _serve(app: web.Application, *make_sites: _SiteFactory) -> web.AppRunner:
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        for make_site in make_sites:
            await make_site(runner).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(KEY, f"cannot listen: {exc.strerror or exc}") from exc
    except BaseException:
        await runner.cleanup()
        raise
    return runner
