"""Daemon configuration: :class:`Config`, read from a TOML file and ``SYNCD_*`` variables.

:mod:`~syncd.config.loader` builds :class:`Config`; the sections' dataclasses are in
:mod:`~syncd.config.sections`, the keys' checks in :mod:`~syncd.config.keys`, and the API's
address parsed from ``api.listen`` (shared with the API server) in :mod:`~syncd.config.listen`.
"""

from __future__ import annotations

from syncd.config.keys import env_var, host_key
from syncd.config.listen import TcpAddress, UnixAddress, is_loopback, parse_address
from syncd.config.loader import Config
from syncd.config.sections import (
    ApiConfig,
    DaemonConfig,
    HostBudget,
    HttpConfig,
    LogConfig,
    MetricsConfig,
    QueueConfig,
    SchedulerConfig,
    StoreConfig,
    SyncConfig,
    WorkersConfig,
)

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
    "parse_address",
]
