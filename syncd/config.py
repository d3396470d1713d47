"""Daemon configuration: a TOML file, overridden by ``SYNCD_<SECTION>_<KEY>`` variables.

Every key is optional. Unknown sections and keys are errors, and every error names the
offending key (``workers.concurrency``) or environment variable
(``SYNCD_WORKERS_CONCURRENCY``), so a typo stops start-up instead of being ignored.

The ``[http]`` timeouts are the one exception to environment overrides: the HTTP transport
reads ``SYNCD_HTTP_TIMEOUT_READ`` / ``SYNCD_HTTP_TIMEOUT_CONNECT`` itself at run time, where
a bad value logs a warning and falls back instead of stopping the daemon.
(``SYNCD_HTTP_BLOCK_PRIVATE_ADDRESSES`` is an ordinary override.) The per-host budgets,
``[http.hosts."HOST"]`` tables, are read from the file only.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yarl import URL

from syncd.errors import ConfigError

# TcpAddress, UnixAddress, is_loopback and parse_listen are re-exported: their home is
# syncd.listen, shared with the API server.
from syncd.listen import (
    LISTEN_SHAPE,
    TcpAddress,
    UnixAddress,
    check_exposure,
    explain_listen_error,
    is_loopback,
    parse_listen,
)
from syncd.logs import mask_url_passwords
from syncd.models import DEFAULT_PAGINATOR, PaginatorSettings

__all__ = [
    "ApiConfig",
    "Config",
    "DaemonConfig",
    "HostBudget",
    "HttpConfig",
    "LogConfig",
    "MetricsConfig",
    "QueueConfig",
    "SchedulerConfig",
    "StoreConfig",
    "SyncConfig",
    "TcpAddress",
    "UnixAddress",
    "WorkersConfig",
    "env_var",
    "host_key",
    "is_loopback",
    "parse_listen",
]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("auto", "json", "console")


@dataclass(frozen=True)
class StoreConfig:
    """``[store]``: the state store URL and PostgreSQL pool settings."""

    url: str = "sqlite:///var/syncd.db"
    statement_cache_size: int | None = None
    pool_min_size: int = 1
    pool_max_size: int = 10


@dataclass(frozen=True)
class QueueConfig:
    """``[queue]``: the work queue URL and the Redis key prefix."""

    url: str = "memory://"
    prefix: str = "syncd"


@dataclass(frozen=True)
class ApiConfig:
    """``[api]``: where the control API listens and the bearer token it requires."""

    listen: str = "127.0.0.1:8765"
    token: str | None = field(default=None, repr=False)
    max_body_bytes: int = 1_048_576
    # A `: ping` comment on an idle `GET /events` stream this often, so proxies keep it open.
    events_heartbeat_seconds: float = 15.0
    # With a token: `/readyz` answers without it too (for a load balancer's probes);
    # `/healthz` always does.
    public_health: bool = False

    @property
    def address(self) -> TcpAddress | UnixAddress:
        """``listen`` parsed (raises ``ValueError`` when malformed)."""
        return parse_listen(self.listen)


@dataclass(frozen=True)
class SchedulerConfig:
    """``[scheduler]``: tick period and the age after which a running sync is a stale lock."""

    tick_seconds: float = 5.0
    stale_lock_seconds: float = 3600.0


@dataclass(frozen=True)
class WorkersConfig:
    """``[workers]``: the indexing worker pool."""

    concurrency: int = 4
    index_timeout_seconds: float = 30.0
    lease_seconds: float = 300.0
    batch_size: int = 100


@dataclass(frozen=True)
class DocumentsConfig:
    """``[documents]``: how long a ``deleted`` document (a tombstone) is kept before the
    workers' sweeper purges it (days, 0 or more; fractions allowed)."""

    deleted_retention_days: float = 7.0


@dataclass(frozen=True)
class HostBudget:
    """``[http.hosts."HOST"]``: one request budget shared by every connector (and every
    instance, when the queue is Redis) for requests to HOST: a token bucket refilled with
    ``rate`` tokens per second holding at most ``burst`` tokens, and at most ``concurrency``
    requests in flight (``None``: no limit)."""

    rate: float
    burst: int
    concurrency: int | None = None


@dataclass(frozen=True)
class HttpConfig:
    """``[http]``: default source request timeouts (seconds), the SSRF guard
    (``block_private_addresses`` refuses sources, webhooks and redirect targets on loopback,
    private, link-local, unique-local, multicast/reserved or cloud metadata addresses), and
    the per-host budgets ``hosts``, keyed by :func:`host_key` (``"api.example.com"`` for every
    port of that host, ``"api.example.com:8443"`` for that port only)."""

    timeout_read: float = 30.0
    timeout_connect: float = 5.0
    block_private_addresses: bool = False
    hosts: Mapping[str, HostBudget] = field(default_factory=dict)


@dataclass(frozen=True)
class LogConfig:
    """``[log]``: level (debug|info|warning|error), format (auto|json|console), and
    ``access``: one structured ``api.access`` line per API request, at debug level."""

    level: str = "info"
    format: str = "auto"
    access: bool = False


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: ``per_connector`` adds series labelled by connector (last successful
    sync), whose number grows with the connectors; off by default."""

    per_connector: bool = False


@dataclass(frozen=True)
class SyncConfig:
    """``[sync]``: defaults of a connector's paginator keys and the run heartbeat period.

    The built-in paginator defaults are :data:`syncd.models.DEFAULT_PAGINATOR`'s.
    """

    page_retries: int = DEFAULT_PAGINATOR.page_retries
    page_retry_backoff: float = DEFAULT_PAGINATOR.page_retry_backoff
    throttle_seconds: float = DEFAULT_PAGINATOR.throttle_seconds
    retry_on_status: tuple[int, ...] = DEFAULT_PAGINATOR.retry_on_status
    heartbeat_seconds: float = 1.0
    # Runs one instance executes at once; more wait their turn (due or queued), oldest first.
    max_concurrent_runs: int = 32

    @property
    def paginator(self) -> PaginatorSettings:
        """The four paginator keys: the defaults of a connector created without them."""
        return PaginatorSettings(
            page_retries=self.page_retries,
            page_retry_backoff=self.page_retry_backoff,
            throttle_seconds=self.throttle_seconds,
            retry_on_status=tuple(self.retry_on_status),
        )


@dataclass(frozen=True)
class DaemonConfig:
    """``[daemon]``: this instance's id (generated when absent) and the stop grace period."""

    instance_id: str | None = None
    grace_seconds: float = 10.0


@dataclass(frozen=True)
class Config:
    """The whole configuration. Build it with :meth:`load` or :meth:`from_mapping`."""

    store: StoreConfig = field(default_factory=StoreConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    documents: DocumentsConfig = field(default_factory=DocumentsConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    log: LogConfig = field(default_factory=LogConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    path: Path | None = None

    @classmethod
    def load(
        cls, path: str | Path | None = None, *, environ: Mapping[str, str] = os.environ
    ) -> Config:
        """Read ``path`` (else ``$SYNCD_CONFIG``; else built-in defaults) and apply the
        environment overrides. Raises :class:`ConfigError` naming the bad key."""
        from_env = False
        if path is None and environ.get("SYNCD_CONFIG"):
            path, from_env = environ["SYNCD_CONFIG"], True
        if path is None:
            return cls.from_mapping({}, environ=environ)
        file = Path(path)
        origin = " (from SYNCD_CONFIG)" if from_env else ""
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError(
                str(file), f"cannot read configuration file{origin}: {reason}"
            ) from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(str(file), f"configuration file is not UTF-8{origin}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(file), f"invalid TOML{origin}: {exc}") from exc
        return cls.from_mapping(data, environ=environ, path=file)

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        *,
        environ: Mapping[str, str] = os.environ,
        path: Path | None = None,
    ) -> Config:
        """Validate parsed TOML ``data``, apply the environment overrides and build the
        config. ``path`` is where ``data`` came from (relative ``token_file`` paths are
        resolved against its directory)."""
        return _Builder(data, environ, path).build()


# --- validation -----------------------------------------------------------------------


class _Invalid(Exception):
    """A value failed a check; ``expected`` completes "expected ..."."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


_Check = Callable[[Any], Any]


@dataclass(frozen=True)
class _Key:
    check: _Check  # a TOML value -> the validated Python value (raises _Invalid)
    from_text: Callable[[str], Any]  # environment text -> a TOML-like value
    secret: bool = False  # never echo the value in an error


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_key(minimum: int, maximum: int | None = None) -> _Key:
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

    return _Key(check, from_text)


def _number_key(minimum: float, *, strict: bool, maximum: float | None = None) -> _Key:
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

    return _Key(check, from_text)


def _text_key(expected: str, test: Callable[[str], bool], *, secret: bool = False) -> _Key:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not test(value):
            raise _Invalid(expected)
        return value

    return _Key(check, lambda text: text, secret=secret)


def _choice_key(choices: tuple[str, ...]) -> _Key:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise _Invalid("one of " + ", ".join(choices))
        return value.lower()

    return _Key(check, lambda text: text.strip())


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
        raise _Invalid(LISTEN_SHAPE)
    try:
        parse_listen(value)
    except ValueError as exc:
        raise _Invalid(explain_listen_error(exc)) from None
    return value


def _store_url_ok(url: str) -> bool:
    if url.startswith("sqlite:///"):
        return len(url) > len("sqlite:///")
    return url.startswith(("postgresql://", "postgres://"))


def _queue_url_ok(url: str) -> bool:
    return url == "memory://" or url.startswith(("redis://", "rediss://", "unix://"))


def _token_ok(token: str) -> bool:
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
            raise ConfigError(name, f"expected a table with rate, got {_shown(table)}")
        for unknown in sorted(set(table) - set(_HOST_BUDGET_KEYS)):
            known = ", ".join(_HOST_BUDGET_KEYS)
            raise ConfigError(f"{name}.{unknown}", f"unknown key (expected one of: {known})")
        if "rate" not in table:
            raise ConfigError(f"{name}.rate", "missing: a budget needs a rate (requests/s)")
        rate = _validate(f"{name}.rate", _RATE, table["rate"])
        burst = max(1, math.ceil(rate))
        if "burst" in table:
            burst = _validate(f"{name}.burst", _COUNT, table["burst"])
        concurrency = None
        if "concurrency" in table:
            concurrency = _validate(f"{name}.concurrency", _COUNT, table["concurrency"])
        budgets[key] = HostBudget(rate, burst, concurrency)
    return budgets


_TOKEN = _text_key(
    "a non-empty token of printable characters without spaces", _token_ok, secret=True
)
_NON_EMPTY = _text_key("a non-empty string", lambda s: bool(s.strip()))

_SCHEMA: dict[str, dict[str, _Key]] = {
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
        "listen": _Key(_listen_check, lambda text: text),
        "token": _TOKEN,
        "token_file": _NON_EMPTY,
        "max_body_bytes": _int_key(1),
        "events_heartbeat_seconds": _number_key(0, strict=True, maximum=3600),
        "public_health": _Key(_bool_check, _bool_from_text),
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
    },
    "documents": {"deleted_retention_days": _number_key(0, strict=False)},
    "http": {
        "timeout_read": _number_key(0, strict=True),
        "timeout_connect": _number_key(0, strict=True),
        "block_private_addresses": _Key(_bool_check, _bool_from_text),
        "hosts": _Key(_host_budgets, lambda text: text),
    },
    "log": {
        "level": _choice_key(LOG_LEVELS),
        "format": _choice_key(LOG_FORMATS),
        "access": _Key(_bool_check, _bool_from_text),
    },
    "metrics": {"per_connector": _Key(_bool_check, _bool_from_text)},
    "sync": {
        "page_retries": _int_key(0, 20),
        "page_retry_backoff": _number_key(0, strict=False, maximum=3600),
        "throttle_seconds": _number_key(0, strict=False, maximum=3600),
        "retry_on_status": _Key(_status_list_check, _status_list_from_text),
        "heartbeat_seconds": _number_key(0, strict=True),
        "max_concurrent_runs": _int_key(1),
    },
    "daemon": {"instance_id": _NON_EMPTY, "grace_seconds": _number_key(0, strict=False)},
}

# The transport resolves the timeouts itself, with warning-and-fallback semantics
# (DESIGN.md §6); a table of host budgets has no one-variable form.
_NO_ENV_OVERRIDE = frozenset(
    {("http", "timeout_read"), ("http", "timeout_connect"), ("http", "hosts")}
)


def env_var(section: str, key: str) -> str:
    """The environment variable that overrides ``[section] key``."""
    return f"SYNCD_{section.upper()}_{key.upper()}"


def _shown(value: object) -> str:
    # Echo the rejected value, minus any URL password it carries.
    return mask_url_passwords(repr(value))


class _Builder:
    """One validation pass: file values, then environment overrides, then cross-key rules."""

    def __init__(self, data: Mapping[str, Any], environ: Mapping[str, str], path: Path | None):
        self.data = data
        self.environ = environ
        self.path = path
        self.values: dict[str, dict[str, Any]] = {s: {} for s in _SCHEMA}
        self.origin: dict[tuple[str, str], str] = {}  # (section, key) -> name in errors
        self.env_token: dict[str, Any] = {}

    def build(self) -> Config:
        self._read_file()
        self._read_environ()
        token = self._resolve_token()
        self._check_pool()
        api = dict(self.values["api"])
        api.pop("token_file", None)
        api["token"] = token
        if token is None:
            listen = api.get("listen", ApiConfig.listen)
            key = self.origin.get(("api", "listen"), "api.listen")
            check_exposure(parse_listen(listen), None, key=key)
        v = self.values
        return Config(
            store=StoreConfig(**v["store"]),
            queue=QueueConfig(**v["queue"]),
            api=ApiConfig(**api),
            scheduler=SchedulerConfig(**v["scheduler"]),
            workers=WorkersConfig(**v["workers"]),
            documents=DocumentsConfig(**v["documents"]),
            http=HttpConfig(**v["http"]),
            log=LogConfig(**v["log"]),
            metrics=MetricsConfig(**v["metrics"]),
            sync=SyncConfig(**v["sync"]),
            daemon=DaemonConfig(**v["daemon"]),
            path=self.path,
        )

    def _read_file(self) -> None:
        if not isinstance(self.data, Mapping):
            raise ConfigError("<root>", "expected a table of sections")
        for section, table in self.data.items():
            schema = _SCHEMA.get(section)
            if schema is None:
                known = ", ".join(sorted(_SCHEMA))
                raise ConfigError(section, f"unknown section (expected one of: {known})")
            if not isinstance(table, Mapping):
                raise ConfigError(section, f"expected a table [{section}], got {_shown(table)}")
            for key, raw in table.items():
                name = f"{section}.{key}"
                spec = schema.get(key)
                if spec is None:
                    known = ", ".join(schema)
                    raise ConfigError(name, f"unknown key (expected one of: {known})")
                self.values[section][key] = _validate(name, spec, raw)
                self.origin[(section, key)] = name

    def _read_environ(self) -> None:
        for section, schema in _SCHEMA.items():
            for key, spec in schema.items():
                if (section, key) in _NO_ENV_OVERRIDE:
                    continue
                var = env_var(section, key)
                text = self.environ.get(var)
                if text is None:
                    continue
                value = _validate(var, spec, spec.from_text(text), shown=text)
                if (section, key) in (("api", "token"), ("api", "token_file")):
                    self.env_token[key] = value  # resolved as a pair in _resolve_token
                    continue
                self.values[section][key] = value
                self.origin[(section, key)] = var

    def _resolve_token(self) -> str | None:
        api = self.values["api"]
        if "token" in api and "token_file" in api:
            raise ConfigError("api.token_file", "cannot be combined with api.token")
        if "token" in self.env_token and "token_file" in self.env_token:
            raise ConfigError("SYNCD_API_TOKEN_FILE", "cannot be combined with SYNCD_API_TOKEN")
        if self.env_token:
            # The environment overrides the file's token, whichever form either one uses.
            if "token" in self.env_token:
                return str(self.env_token["token"])
            return _read_token_file("SYNCD_API_TOKEN_FILE", Path(self.env_token["token_file"]))
        if "token_file" in api:
            file = Path(api["token_file"]).expanduser()
            if not file.is_absolute() and self.path is not None:
                file = self.path.parent / file  # relative to the config file, not the cwd
            return _read_token_file("api.token_file", file)
        token = api.get("token")
        return None if token is None else str(token)

    def _check_pool(self) -> None:
        store = self.values["store"]
        low = store.get("pool_min_size", StoreConfig.pool_min_size)
        high = store.get("pool_max_size", StoreConfig.pool_max_size)
        if low > high:
            key = "pool_min_size" if ("store", "pool_min_size") in self.origin else "pool_max_size"
            raise ConfigError(
                self.origin[("store", key)],
                f"store.pool_min_size ({low}) must not exceed store.pool_max_size ({high})",
            )


def _validate(name: str, spec: _Key, value: Any, *, shown: object | None = None) -> Any:
    try:
        return spec.check(value)
    except _Invalid as exc:
        if spec.secret:
            raise ConfigError(name, f"expected {exc.expected}") from None
        got = _shown(value if shown is None else shown)
        raise ConfigError(name, f"expected {exc.expected}, got {got}") from None


def _read_token_file(name: str, file: Path) -> str:
    try:
        token = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(name, f"cannot read {str(file)!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(name, f"{str(file)!r} is not a UTF-8 text file") from exc
    if not token:
        raise ConfigError(name, f"{str(file)!r} is empty")
    if not _token_ok(token):
        raise ConfigError(name, f"{str(file)!r} must hold one token without spaces")
    return token
