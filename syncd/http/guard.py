"""The guard of ``http.block_private_addresses``: which addresses it refuses, the resolver
that refuses names resolving to them, and the check of IP literal hosts (which aiohttp does
not resolve). Used by :mod:`syncd.http.transport`, whose docstring describes the guard."""

from __future__ import annotations

import ipaddress
import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from syncd.errors import ClientConnectionError

__all__ = ["BlockedAddressError", "GuardedResolver", "blocked_address_kind", "check_literal"]


class BlockedAddressError(ClientConnectionError):
    """``http.block_private_addresses`` refused a connection to a non-public address.

    Never retried: the address will not become public by waiting.
    """


_METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def blocked_address_kind(address: str) -> str | None:
    """Why the guard refuses IP literal ``address`` (``"loopback"``, ``"private"``,
    ``"cloud metadata"`` …), or ``None`` for a public address. Something that is not an IP
    address is ``"unrecognised"``: what cannot be checked is refused."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "unrecognised"
    if isinstance(ip, ipaddress.IPv6Address):
        # An IPv4 address wrapped in IPv6 reaches that IPv4 address.
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _METADATA_ADDRESSES:
        return "cloud metadata"
    checks = (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("unique-local", ip in _UNIQUE_LOCAL),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        # Shared address space (100.64.0.0/10), documentation ranges and the like.
        ("non-public", not ip.is_global),
    )
    return next((kind for kind, hit in checks if hit), None)


def _refusal(host: str, address: str, kind: str) -> BlockedAddressError:
    article = "an" if kind[0] in "aeiou" else "a"
    what = (
        f"{host} is {article} {kind} address"
        if host.strip("[]") == address
        else f"{host} resolves to {article} {kind} address ({address})"
    )
    return BlockedAddressError(f"refused: {what}; http.block_private_addresses is set")


def _looks_like_ip(host: str) -> bool:
    # aiohttp's own test for "do not resolve this host": an IP literal to it, so ours too.
    return ":" in host or host.replace(".", "").isdigit()


class GuardedResolver(AbstractResolver):
    """Resolves through ``inner`` and refuses names with a non-public address among theirs
    (one private answer is enough: a rebinding name may hand out either)."""

    def __init__(self, inner: AbstractResolver) -> None:
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            kind = blocked_address_kind(result["host"])
            if kind is not None:
                raise _refusal(host, result["host"], kind)
        return results

    async def close(self) -> None:
        await self._inner.close()


def check_literal(target: str | URL) -> None:
    """Refuse an IP literal host the guard blocks (names are checked by the resolver)."""
    try:
        host = URL(target).raw_host
    except (TypeError, ValueError):
        return  # aiohttp reports the invalid URL
    if host and _looks_like_ip(host):
        kind = blocked_address_kind(host)
        if kind is not None:
            raise _refusal(host, host, kind)
