"""HTTP timeouts and their precedence (DESIGN.md §6).

Precedence, per value: the connector's explicit ``timeout`` > the environment
(``SYNCD_HTTP_TIMEOUT_READ`` / ``SYNCD_HTTP_TIMEOUT_CONNECT``) > ``config.toml`` > built-in.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from syncd.errors import SourceError

ENV_READ = "SYNCD_HTTP_TIMEOUT_READ"
ENV_CONNECT = "SYNCD_HTTP_TIMEOUT_CONNECT"


@dataclass(frozen=True)
class Timeouts:
    """Read timeout (longest silence while waiting for response bytes) and connect timeout,
    in seconds."""

    read: float = 30.0
    connect: float = 5.0


def positive_number(value: Any) -> float | None:
    """``value`` as a float if it is a finite number > 0 (bools excluded), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        return None
    return number


def _from_env(environ: Mapping[str, str], name: str, fallback: float) -> float:
    raw = environ.get(name)
    if raw is None:
        return fallback
    try:
        number = positive_number(float(raw))
    except ValueError:
        number = None
    if number is None:
        # Looked up at call time so logging configured (or captured) later still applies.
        structlog.get_logger("syncd.http").warning(
            "http.invalid_timeout",
            variable=name,
            value=raw,
            expected="a finite number of seconds > 0",
            fallback=fallback,
        )
        return fallback
    return number


def resolve_timeouts(
    explicit: Mapping[str, Any] | None,
    *,
    config: Timeouts,
    environ: Mapping[str, str] = os.environ,
) -> Timeouts:
    """The effective timeouts for one connector.

    ``explicit`` is the connector's ``{"read": .., "connect": ..}`` (either key optional);
    ``config`` holds the values of ``config.toml`` (or the built-in defaults). An invalid
    environment value logs a ``invalid_http_timeout`` warning naming the variable and is
    ignored; an invalid explicit value raises :class:`SourceError` (validation should have
    refused it earlier).
    """
    read = _from_env(environ, ENV_READ, config.read)
    connect = _from_env(environ, ENV_CONNECT, config.connect)
    if explicit:
        for key in explicit:
            if key not in ("read", "connect"):
                raise SourceError(f"timeout: unknown key {key!r}")
        if "read" in explicit:
            read = _explicit(explicit["read"], "read")
        if "connect" in explicit:
            connect = _explicit(explicit["connect"], "connect")
    return Timeouts(read=read, connect=connect)


def _explicit(value: Any, key: str) -> float:
    number = positive_number(value)
    if number is None:
        raise SourceError(f"timeout.{key}: expected a finite number of seconds > 0")
    return number
