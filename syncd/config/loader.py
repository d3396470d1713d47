"""Daemon configuration: a TOML file, overridden by ``SYNCD_<SECTION>_<KEY>`` variables.

Every key is optional. Unknown sections and keys are errors, and every error names the
offending key (``workers.concurrency``) or environment variable
(``SYNCD_WORKERS_CONCURRENCY``), so a typo stops start-up instead of being ignored.

The ``[http]`` timeouts are the one exception to environment overrides: the HTTP transport
reads ``SYNCD_HTTP_TIMEOUT_READ`` / ``SYNCD_HTTP_TIMEOUT_CONNECT`` itself at run time, where
a bad value logs a warning and falls back instead of stopping the daemon.
(``SYNCD_HTTP_BLOCK_PRIVATE_ADDRESSES`` is an ordinary override.) The per-host budgets,
``[http.hosts."HOST"]`` tables, are read from the file only.

This module reads the file and the environment and builds :class:`Config`; the sections'
dataclasses live in :mod:`syncd.config.sections`, the keys' checks in :mod:`syncd.config.keys`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncd.config.keys import (
    NO_ENV_OVERRIDE,
    SCHEMA,
    check_value,
    env_var,
    shown_value,
    token_ok,
)
from syncd.config.listen import check_exposure, parse_address
from syncd.config.sections import (
    ApiConfig,
    DaemonConfig,
    DocumentsConfig,
    HttpConfig,
    LogConfig,
    MetricsConfig,
    QueueConfig,
    SchedulerConfig,
    StoreConfig,
    SyncConfig,
    WorkersConfig,
)
from syncd.errors import ConfigError

__all__ = ["Config"]


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


class _Builder:
    """One validation pass: file values, then environment overrides, then cross-key rules."""

    def __init__(self, data: Mapping[str, Any], environ: Mapping[str, str], path: Path | None):
        self.data = data
        self.environ = environ
        self.path = path
        self.values: dict[str, dict[str, Any]] = {s: {} for s in SCHEMA}
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
            check_exposure(parse_address(listen), None, key=key)
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
            schema = SCHEMA.get(section)
            if schema is None:
                known = ", ".join(sorted(SCHEMA))
                raise ConfigError(section, f"unknown section (expected one of: {known})")
            if not isinstance(table, Mapping):
                raise ConfigError(
                    section, f"expected a table [{section}], got {shown_value(table)}"
                )
            for key, raw in table.items():
                name = f"{section}.{key}"
                spec = schema.get(key)
                if spec is None:
                    known = ", ".join(schema)
                    raise ConfigError(name, f"unknown key (expected one of: {known})")
                self.values[section][key] = check_value(name, spec, raw)
                self.origin[(section, key)] = name

    def _read_environ(self) -> None:
        for section, schema in SCHEMA.items():
            for key, spec in schema.items():
                if (section, key) in NO_ENV_OVERRIDE:
                    continue
                var = env_var(section, key)
                text = self.environ.get(var)
                if text is None:
                    continue
                value = check_value(var, spec, spec.from_text(text), shown=text)
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


def _read_token_file(name: str, file: Path) -> str:
    try:
        token = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(name, f"cannot read {str(file)!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(name, f"{str(file)!r} is not a UTF-8 text file") from exc
    if not token:
        raise ConfigError(name, f"{str(file)!r} is empty")
    if not token_ok(token):
        raise ConfigError(name, f"{str(file)!r} must hold one token without spaces")
    return token
