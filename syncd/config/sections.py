"""The sections of the daemon configuration: one frozen dataclass per TOML table, each field
with its built-in default (:class:`syncd.config.Config` holds them all)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from syncd.config.listen import ApiAddress, parse_address
from syncd.models import DEFAULT_PAGINATOR, PaginatorSettings


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
    def address(self) -> ApiAddress:
        """``listen`` parsed (raises ``ValueError`` when malformed)."""
        return parse_address(self.listen)


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
    # A document whose indexing failed for a transient reason is tried this many times in
    # all, the waits doubling from retry_backoff_seconds (syncd.rules.documents).
    max_attempts: int = 5
    retry_backoff_seconds: float = 10.0


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
    port of that host, ``"api.example.com:8443"`` for that port only), and
    ``max_rate_limit_wait_seconds``: the furthest rate-limit reset a source request waits for
    (further away, the request fails naming the reset time)."""

    timeout_read: float = 30.0
    timeout_connect: float = 5.0
    block_private_addresses: bool = False
    max_rate_limit_wait_seconds: float = 900.0
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
    """``[sync]``: defaults of a connector's paginator keys, the run heartbeat period, and how
    long a store or queue outage is waited out.

    The built-in paginator defaults are :data:`syncd.models.DEFAULT_PAGINATOR`'s.
    """

    page_retries: int = DEFAULT_PAGINATOR.page_retries
    page_retry_backoff: float = DEFAULT_PAGINATOR.page_retry_backoff
    throttle_seconds: float = DEFAULT_PAGINATOR.throttle_seconds
    retry_on_status: tuple[int, ...] = DEFAULT_PAGINATOR.retry_on_status
    heartbeat_seconds: float = 1.0
    # Runs one instance executes at once; more wait their turn (due or queued), oldest first.
    max_concurrent_runs: int = 32
    # Continuous seconds a run (or a worker) waits for an unavailable store or queue before
    # it fails (issue 23).
    outage_seconds: float = 60.0

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
