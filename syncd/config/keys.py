"""The configuration's keys: each one's check and environment spelling, the table of every
section's keys (:data:`SCHEMA`), and error messages that name the key and echo the value
(minus URL passwords, never a secret)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from yarl import URL

from syncd.config.listen import ADDRESS_SHAPE, explain_address_error, parse_address
from syncd.config.sections import HostBudget
from syncd.errors import ConfigError
from syncd.observability.logs import mask_url_passwords

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("auto", "json", "console")


class _Invalid(Exception):
    """A value failed a check; ``expected`` completes "expected ..."."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


_Check = Callable[[Any], Any]


@dataclass(frozen=True)
class Key:
    """How one key is checked, and read from its environment variable."""

    check: _Check  # a TOML value -> the validated Python value (raises _Invalid)
    from_text: Callable[[str], Any]  # environment text -> a TOML-like value
    secret: bool = False  # never echo the value in an error


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_key(minimum: int, maximum: int | None = None) -> Key:
    expected = (
        f"an integer ≥ {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    )

    def check(value: Any) -> int:
        if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
            raise _Invalid(expected)
        return int(value)

    def from_text(text: str) -> object:
        try:
            return int(text.strip())
        except ValueError:
            return text

    return Key(check, from_text)


def _number_key(minimum: float, *, strict: bool, maximum: float | None = None) -> Key:
    expected = f"a number {'>' if strict else '≥'} {minimum:g}"
    if maximum is not None:
        expected += f" and ≤ {maximum:g}"

    def check(value: Any) -> float:
        if not (_is_int(value) or isinstance(value, float)):
            raise _Invalid(expected)
        # Compared before any conversion: float() of a huge TOML integer overflows.
        if isinstance(value, float) and not math.isfinite(value):
            raise _Invalid(expected)
        if value < minimum or (strict and value == minimum):
            raise _Invalid(expected)
        if maximum is not None and value > maximum:
            raise _Invalid(expected)
        if _is_int(value) and value > 2**53:
            raise _Invalid(expected)
        return float(value)

    def from_text(text: str) -> object:
        try:
            return float(text.strip())
        except ValueError:
            return text

    return Key(check, from_text)


def _text_key(expected: str, test: Callable[[str], bool], *, secret: bool = False) -> Key:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not test(value):
            raise _Invalid(expected)
        return value

    return Key(check, lambda text: text, secret=secret)


def _choice_key(choices: tuple[str, ...]) -> Key:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise _Invalid("one of " + ", ".join(choices))
        return value.lower()

    return Key(check, lambda text: text.strip())


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _bool_check(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid("true or false")
    return value


def _bool_from_text(text: str) -> object:
    # Environment spellings of a boolean; anything else is echoed back as invalid.
    word = text.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else text


def _status_list_check(value: Any) -> tuple[int, ...]:
    expected = "a list of HTTP status codes 400-599"
    if not isinstance(value, list) or not all(_is_int(v) and 400 <= v <= 599 for v in value):
        raise _Invalid(expected)
    return tuple(value)


def _status_list_from_text(text: str) -> object:
    # "502,503,504" (an empty string means the empty list: retry on no status)
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return [int(p) for p in parts]
    except ValueError:
        return text


def _listen_check(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(ADDRESS_SHAPE)
    try:
        parse_address(value)
    except ValueError as exc:
        raise _Invalid(explain_address_error(exc)) from None
    return value


def _store_url_ok(url: str) -> bool:
    if url.startswith("sqlite:///"):
        return len(url) > len("sqlite:///")
    return url.startswith(("postgresql://", "postgres://"))


def _queue_url_ok(url: str) -> bool:
    return url == "memory://" or url.startswith(("redis://", "rediss://", "unix://"))


def token_ok(token: str) -> bool:
    """Whether ``token`` can be the API token."""
    # The token travels in an HTTP header: no whitespace or control characters.
    return bool(token) and all(33 <= ord(ch) <= 126 for ch in token)


_HOST_KEY_SHAPE = 'a host name or IP address, optionally with ":port" (e.g. "api.example.com")'
_HOST_BUDGET_KEYS = ("rate", "burst", "concurrency")
_RATE = _number_key(0, strict=True)
_COUNT = _int_key(1)


def host_key(text: str) -> str:
    """The canonical form of a ``[http.hosts."HOST"]`` key: the host lowercased (IDNA names
    in their ASCII form, IPv6 addresses in brackets), plus ``:port`` when one is given.
    ``ValueError`` when ``text`` is not a host with an optional port."""
    if not text or any(ch in text for ch in "/?#@\\") or any(ch.isspace() for ch in text):
        raise ValueError(text)
    url = URL(f"http://{text}")  # ValueError for a bad port or an unparsable host
    host = url.raw_host
    if not host or text.endswith(":"):
        raise ValueError(text)
    name = f"[{host.lower()}]" if ":" in host else host.lower()
    port = url.explicit_port
    if port is None:
        return name
    if not 0 < port < 65536:
        raise ValueError(text)
    return f"{name}:{port}"


def _host_budgets(value: Any) -> dict[str, HostBudget]:
    """``[http.hosts]``: a table of ``[http.hosts."HOST"]`` tables. Errors name the key
    inside (``http.hosts."api.example.com".rate``), so they are raised here directly."""
    if not isinstance(value, Mapping):
        raise _Invalid('a table of [http.hosts."HOST"] tables')
    budgets: dict[str, HostBudget] = {}
    for raw_host, table in value.items():
        name = f'http.hosts."{raw_host}"'
        try:
            key = host_key(raw_host)
        except ValueError:
            raise ConfigError(name, f"expected {_HOST_KEY_SHAPE}") from None
        if key in budgets:
            raise ConfigError(name, f"the same host as another key ({key})")
        if not isinstance(table, Mapping):
            raise ConfigError(name, f"expected a table with rate, got {shown_value(table)}")
        for unknown in sorted(set(table) - set(_HOST_BUDGET_KEYS)):
            known = ", ".join(_HOST_BUDGET_KEYS)
            raise ConfigError(f"{name}.{unknown}", f"unknown key (expected one of: {known})")
        if "rate" not in table:
            raise ConfigError(f"{name}.rate", "missing: a budget needs a rate (requests/s)")
        rate = check_value(f"{name}.rate", _RATE, table["rate"])
        burst = max(1, math.ceil(rate))
        if "burst" in table:
            burst = check_value(f"{name}.burst", _COUNT, table["burst"])
        concurrency = None
        if "concurrency" in table:
            concurrency = check_value(f"{name}.concurrency", _COUNT, table["concurrency"])
        budgets[key] = HostBudget(rate, burst, concurrency)
    return budgets


_TOKEN = _text_key(
    "a non-empty token of printable characters without spaces", token_ok, secret=True
)
_NON_EMPTY = _text_key("a non-empty string", lambda s: bool(s.strip()))

# Every section's keys, in the order errors list them.
SCHEMA: dict[str, dict[str, Key]] = {
    "store": {
        "url": _text_key("a sqlite:///path or postgresql:// URL", _store_url_ok),
        "statement_cache_size": _int_key(0),
        "pool_min_size": _int_key(0),
        "pool_max_size": _int_key(1),
    },
    "queue": {
        "url": _text_key("memory:// or a redis://, rediss:// or unix:// URL", _queue_url_ok),
        "prefix": _NON_EMPTY,
    },
    "api": {
        "listen": Key(_listen_check, lambda text: text),
        "token": _TOKEN,
        "token_file": _NON_EMPTY,
        "max_body_bytes": _int_key(1),
        "events_heartbeat_seconds": _number_key(0, strict=True, maximum=3600),
        "public_health": Key(_bool_check, _bool_from_text),
    },
    "scheduler": {
        "tick_seconds": _number_key(0, strict=True),
        "stale_lock_seconds": _number_key(0, strict=True),
    },
    "workers": {
        "concurrency": _int_key(1),
        "index_timeout_seconds": _number_key(0, strict=True),
        "lease_seconds": _number_key(0, strict=True),
        "batch_size": _int_key(1),
        "max_attempts": _int_key(1),
        "retry_backoff_seconds": _number_key(0, strict=False, maximum=3600),
    },
    "documents": {"deleted_retention_days": _number_key(0, strict=False)},
    "http": {
        "timeout_read": _number_key(0, strict=True),
        "timeout_connect": _number_key(0, strict=True),
        "block_private_addresses": Key(_bool_check, _bool_from_text),
        "max_rate_limit_wait_seconds": _number_key(0, strict=True, maximum=86400),
        "hosts": Key(_host_budgets, lambda text: text),
    },
    "log": {
        "level": _choice_key(LOG_LEVELS),
        "format": _choice_key(LOG_FORMATS),
        "access": Key(_bool_check, _bool_from_text),
    },
    "metrics": {"per_connector": Key(_bool_check, _bool_from_text)},
    "sync": {
        "page_retries": _int_key(0, 20),
        "page_retry_backoff": _number_key(0, strict=False, maximum=3600),
        "throttle_seconds": _number_key(0, strict=False, maximum=3600),
        "retry_on_status": Key(_status_list_check, _status_list_from_text),
        "heartbeat_seconds": _number_key(0, strict=True),
        "max_concurrent_runs": _int_key(1),
        "outage_seconds": _number_key(0, strict=True, maximum=86400),
    },
    "daemon": {"instance_id": _NON_EMPTY, "grace_seconds": _number_key(0, strict=False)},
}

# The transport resolves the timeouts itself, with warning-and-fallback semantics
# (DESIGN.md §6); a table of host budgets has no one-variable form.
NO_ENV_OVERRIDE = frozenset(
    {("http", "timeout_read"), ("http", "timeout_connect"), ("http", "hosts")}
)


def env_var(section: str, key: str) -> str:
    """The environment variable that overrides ``[section] key``."""
    return f"SYNCD_{section.upper()}_{key.upper()}"


def shown_value(value: object) -> str:
    """A rejected value as an error echoes it."""
    # Echo the rejected value, minus any URL password it carries.
    return mask_url_passwords(repr(value))


def check_value(name: str, spec: Key, value: Any, *, shown: object | None = None) -> Any:
    """``value`` checked by ``spec``; else :class:`ConfigError` naming ``name`` and echoing
    ``shown`` (the text as written, for an environment variable) or the value."""
    try:
        return spec.check(value)
    except _Invalid as exc:
        if spec.secret:
            raise ConfigError(name, f"expected {exc.expected}") from None
        got = shown_value(value if shown is None else shown)
        raise ConfigError(name, f"expected {exc.expected}, got {got}") from None
