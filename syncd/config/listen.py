"""The control API's address (:data:`ApiAddress`): how the ``api.listen`` key is parsed into
one, and which addresses may be served without a token.

The one home of both rules: the configuration validates ``api.listen`` with them at load
time and the API server applies them again when it binds (it may be given an address text or
a socket that never went through the configuration), so the two cannot disagree.

- ``host:port``, ``[v6]:port`` or ``unix:/path``; port 0 picks a free port.
- ``:port`` (an empty host) means every interface, as aiohttp binds it (IPv4 and IPv6).
- Only loopback hosts and unix sockets are served without a token; every other address,
  every interface included, needs one (DESIGN.md §9).

Pure: no I/O, nothing above :mod:`syncd.errors` imported.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from syncd.errors import ConfigError

__all__ = [
    "ADDRESS_SHAPE",
    "LISTEN_KEY",
    "UNIX_PREFIX",
    "ApiAddress",
    "TcpAddress",
    "UnixAddress",
    "check_exposure",
    "explain_address_error",
    "format_address",
    "is_loopback",
    "is_loopback_host",
    "parse_address",
]

LISTEN_KEY = "api.listen"
"""The configuration key errors about the API's address are reported under."""

ADDRESS_SHAPE = "host:port, [ipv6]:port or unix:/path"
"""The accepted forms, as error messages spell them (``:port`` is a ``host:port``)."""

UNIX_PREFIX = "unix:"


@dataclass(frozen=True)
class TcpAddress:
    """A ``host:port`` address (``port`` 0 picks a free port; ``host`` empty means
    every interface)."""

    host: str
    port: int

    @property
    def every_interface(self) -> bool:
        """Whether this is ``:port``: bound on every interface (aiohttp's ``host=None``)."""
        return not self.host


@dataclass(frozen=True)
class UnixAddress:
    """A ``unix:/path`` address."""

    path: str


ApiAddress = TcpAddress | UnixAddress
"""Where the control API is served: the ``api.listen`` key, parsed."""


def parse_address(value: str) -> ApiAddress:
    """Parse ``host:port``, ``:port``, ``[v6]:port`` or ``unix:/path``; ``ValueError`` when
    malformed (the message says what is wrong)."""
    if value.startswith(UNIX_PREFIX):
        sock = value.removeprefix(UNIX_PREFIX)
        if not sock or "\0" in sock:
            raise ValueError(f"expected {ADDRESS_SHAPE}: the socket path is empty")
        return UnixAddress(sock)
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"expected {ADDRESS_SHAPE}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
        port_text = rest[1:]
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            raise ValueError(f"expected {ADDRESS_SHAPE}")
        if ":" in host:
            raise ValueError("an IPv6 address must be written in brackets: [::1]:8765")
        if any(ch.isspace() or ch in "/@[]" for ch in host):
            raise ValueError(f"{host!r} is not a host name or address")
    # ASCII digits only: str.isdigit() also accepts "²" and other scripts' digits.
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ValueError(f"port must be an integer 0-65535, got {port_text!r}")
    return TcpAddress(host, int(port_text))


def explain_address_error(error: ValueError) -> str:
    """What an address should look like, with the reason :func:`parse_address` gave
    in ``error``: the text after "expected" in an error message."""
    detail = str(error).removeprefix(f"expected {ADDRESS_SHAPE}").removeprefix(": ")
    return f"{ADDRESS_SHAPE} ({detail})" if detail else ADDRESS_SHAPE


def format_address(address: ApiAddress) -> str:
    """``address`` written back as :func:`parse_address` reads it."""
    if isinstance(address, UnixAddress):
        return f"{UNIX_PREFIX}{address.path}"
    host = f"[{address.host}]" if ":" in address.host else address.host
    return f"{host}:{address.port}"


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals. Any other name, and the empty host
    (every interface), counts as exposed: a name may resolve anywhere."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback(address: ApiAddress) -> bool:
    """Whether only this machine can reach ``address`` (a unix socket or a loopback host)."""
    return isinstance(address, UnixAddress) or is_loopback_host(address.host)


def check_exposure(address: ApiAddress, token: str | None, *, key: str = LISTEN_KEY) -> None:
    """Raise :class:`ConfigError` (under ``key``) when ``address`` is reachable from other
    machines and no ``token`` is set: the API refuses to listen there without one."""
    if token or is_loopback(address):
        return
    assert isinstance(address, TcpAddress)  # unix sockets are always "loopback"
    where = repr(format_address(address))
    if address.every_interface:
        where += " (every interface)"
    raise ConfigError(
        key,
        f"{where} is not a loopback address or unix socket: refusing to listen on it "
        "without an API token (set api.token, api.token_file or SYNCD_API_TOKEN)",
    )
