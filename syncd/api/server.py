"""Serving the control API: TCP ``host:port``, ``unix:/path``, or a socket handed over by
systemd (socket activation).

The daemon owns signals and the event loop; the web layer is only an ``AppRunner`` that the
daemon cleans up on stop. The API refuses to listen beyond loopback without a token.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Callable, Sequence

from aiohttp import web

from syncd.config.listen import (
    LISTEN_KEY,
    ApiAddress,
    TcpAddress,
    UnixAddress,
    check_exposure,
    explain_address_error,
    parse_address,
)
from syncd.errors import ConfigError

__all__ = ["UNIX_SOCKET_MODE", "start_api"]

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

    ``listen`` is the ``api.listen`` text, parsed by :func:`syncd.config.listen.parse_address`:
    ``host:port`` (``[::1]:8765`` for IPv6, ``:8765`` for every interface; port 0 picks a free
    port, read it back from ``runner.addresses``) or ``unix:/path`` (a stale socket file is
    replaced; the socket is created with mode 0600). A pre-bound ``sock`` (socket activation) takes
    precedence over ``listen``; ``socks`` serves several (systemd may pass a TCP and a unix
    socket), one site each, on one runner. Without ``token``, only loopback addresses and
    unix sockets are accepted (:func:`syncd.config.listen.check_exposure`): anything else raises
    :class:`ConfigError` (``api.listen``).
    """
    passed = [*([sock] if sock is not None else []), *socks]
    if passed:
        for s in passed:
            check_exposure(_socket_address(s), token)
        return await _serve(app, *(_sock_site(s) for s in passed))
    address = _parse(listen)
    check_exposure(address, token)
    if isinstance(address, UnixAddress):
        path = address.path
        unix_sock = _bind_unix(path)
        try:
            return await _serve(app, lambda runner: _UnixSocketSite(runner, unix_sock, path))
        except BaseException:
            unix_sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
    # An empty host (":8765") is every interface: aiohttp binds them all for host=None.
    host = address.host or None
    return await _serve(app, lambda runner: web.TCPSite(runner, host, address.port))


def _parse(listen: str) -> ApiAddress:
    try:
        return parse_address(listen)
    except ValueError as exc:
        problem = f"expected {explain_address_error(exc)}, got {listen!r}"
        raise ConfigError(LISTEN_KEY, problem) from None


def _socket_address(sock: socket.socket) -> ApiAddress:
    """Where a socket handed over (systemd) is bound, as an address."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        host, port = sock.getsockname()[:2]
        return TcpAddress(str(host), int(port))
    # Any other family (AF_UNIX) is reachable only through this machine's file system.
    return UnixAddress(str(sock.getsockname()))


def _bind_unix(path: str) -> socket.socket:
    """A unix socket bound at ``path`` with mode 0600, not yet listening."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(mode):
            raise ConfigError(LISTEN_KEY, f"{path} exists and is not a socket")
        if _in_use(path):
            raise ConfigError(LISTEN_KEY, f"{path} is in use by another process")
        os.unlink(path)  # left behind by a process that did not stop cleanly
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        # Nobody can connect before listen(), which the site calls: no window where the
        # socket is reachable with the umask's mode.
        os.chmod(path, UNIX_SOCKET_MODE)
    except OSError as exc:
        sock.close()
        raise ConfigError(LISTEN_KEY, f"cannot bind {path}: {exc.strerror or exc}") from exc
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
    # No aiohttp access log (an Apache line per request): syncd.api.app logs structured
    # ``api.access`` lines instead when ``log.access`` asks for them.
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        for make_site in make_sites:
            await make_site(runner).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(LISTEN_KEY, f"cannot listen: {exc.strerror or exc}") from exc
    except BaseException:
        await runner.cleanup()
        raise
    return runner
