"""Configuration loading: TOML file, environment overrides, token sources, and that every
error names the key (or variable) at fault."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from syncd.config import (
    ApiConfig,
    Config,
    DaemonConfig,
    HostBudget,
    QueueConfig,
    StoreConfig,
    SyncConfig,
    TcpAddress,
    UnixAddress,
    WorkersConfig,
    env_var,
    is_loopback,
    parse_address,
)
from syncd.errors import ConfigError
from syncd.models import DEFAULT_PAGINATOR, PaginatorSettings

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "syncd.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(data: dict[str, Any], environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        Config.from_mapping(data, environ=environ or {})
    return info.value


# --- defaults and the file ------------------------------------------------------------


def test_defaults_without_a_file() -> None:
    config = Config.load(environ={})
    assert config == Config()
    assert config.store.url == "sqlite:///var/syncd.db"
    assert config.queue == QueueConfig(url="memory://", prefix="syncd")
    assert config.api == ApiConfig(listen="127.0.0.1:8765", token=None, max_body_bytes=1_048_576)
    assert config.workers == WorkersConfig(4, 30.0, 300.0, 100)
    assert config.sync.retry_on_status == (502, 503, 504)
    assert config.path is None


def test_full_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [store]
        url = "postgresql://syncd@db.internal/syncd"
        statement_cache_size = 0
        pool_min_size = 2
        pool_max_size = 20
        [queue]
        url = "redis://127.0.0.1:6379/1"
        prefix = "tenant-a"
        [api]
        listen = "0.0.0.0:9000"
        token = "s3cret-token"
        max_body_bytes = 4096
        [scheduler]
        tick_seconds = 1
        stale_lock_seconds = 600.5
        [workers]
        concurrency = 16
        index_timeout_seconds = 5
        lease_seconds = 60
        batch_size = 10
        [http]
        timeout_read = 12.5
        timeout_connect = 2
        block_private_addresses = true
        [log]
        level = "DEBUG"
        format = "json"
        [sync]
        page_retries = 0
        page_retry_backoff = 0
        throttle_seconds = 0.25
        retry_on_status = [429, 503]
        heartbeat_seconds = 0.5
        [daemon]
        instance_id = "node-1"
        grace_seconds = 0
        """,
    )
    config = Config.load(path, environ={})
    assert config.path == path
    assert config.store == StoreConfig("postgresql://syncd@db.internal/syncd", 0, 2, 20)
    assert config.queue == QueueConfig("redis://127.0.0.1:6379/1", "tenant-a")
    assert config.api == ApiConfig("0.0.0.0:9000", "s3cret-token", 4096)
    assert config.scheduler.tick_seconds == 1.0
    assert isinstance(config.scheduler.tick_seconds, float)
    assert config.scheduler.stale_lock_seconds == 600.5
    assert config.workers == WorkersConfig(16, 5.0, 60.0, 10)
    assert (config.http.timeout_read, config.http.timeout_connect) == (12.5, 2.0)
    assert config.http.block_private_addresses is True
    assert (config.log.level, config.log.format) == ("debug", "json")
    assert config.sync == SyncConfig(0, 0.0, 0.25, (429, 503), 0.5)
    assert config.daemon == DaemonConfig("node-1", 0.0)


def test_repository_config_is_the_embedded_default() -> None:
    config = Config.load(REPO / "config.toml", environ={})
    assert config.store.url == "sqlite:///var/syncd.db"
    assert config.queue.url == "memory://"
    assert config.api.listen == "127.0.0.1:8765"
    assert config == Config(path=REPO / "config.toml")


def test_repository_config_documents_real_keys_and_true_defaults(tmp_path: Path) -> None:
    # Uncomment every "# key = value" line: each must be a known key, and apart from the
    # documented examples, its value must be the built-in default.
    text = (REPO / "config.toml").read_text(encoding="utf-8")
    uncommented = re.sub(r"(?m)^# (\w+ = )", r"\1", text)
    assert uncommented.count("\n") == text.count("\n")
    config = Config.load(write(tmp_path, uncommented), environ={})
    assert config.store.statement_cache_size == 0
    assert config.api.token == "..."
    assert config.daemon.instance_id == "syncd-1"
    examples = {
        "store": StoreConfig(statement_cache_size=0),
        "api": ApiConfig(token="..."),
        "daemon": DaemonConfig(instance_id="syncd-1"),
    }
    for section, value in examples.items():
        assert getattr(config, section) == value
    for section in ("queue", "scheduler", "workers", "http", "sync", "log"):
        assert getattr(config, section) == getattr(Config(), section)


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, '[queue]\nprefix = "from-env-file"\n')
    config = Config.load(environ={"SYNCD_CONFIG": str(path)})
    assert config.queue.prefix == "from-env-file"
    assert config.path == path


def test_explicit_path_wins_over_syncd_config(tmp_path: Path) -> None:
    a = write(tmp_path, '[queue]\nprefix = "a"\n', "a.toml")
    b = write(tmp_path, '[queue]\nprefix = "b"\n', "b.toml")
    assert Config.load(a, environ={"SYNCD_CONFIG": str(b)}).queue.prefix == "a"


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        Config.load(missing, environ={})
    assert info.value.key == str(missing)
    assert "No such file or directory" in info.value.message


def test_missing_file_from_syncd_config_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        Config.load(environ={"SYNCD_CONFIG": str(missing)})
    assert info.value.key == str(missing)
    assert "SYNCD_CONFIG" in info.value.message


def test_invalid_toml_is_reported_with_position(tmp_path: Path) -> None:
    path = write(tmp_path, "[store]\nurl = \n")
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    assert info.value.key == str(path)
    assert info.value.message.startswith("invalid TOML")
    assert "line 2" in info.value.message


# --- every error names its key --------------------------------------------------------

BAD_VALUES: list[tuple[str, str, Any, str]] = [
    ("store", "url", "mysql://x", "postgresql:// URL, got 'mysql://x'"),
    ("store", "url", "sqlite:///", "expected a sqlite:///path or postgresql:// URL"),
    ("store", "url", 5, "got 5"),
    ("store", "statement_cache_size", -1, "expected an integer ≥ 0, got -1"),
    ("store", "pool_min_size", 1.5, "expected an integer ≥ 0, got 1.5"),
    ("store", "pool_max_size", 0, "expected an integer ≥ 1, got 0"),
    ("queue", "url", "amqp://x", "expected memory:// or a redis://, rediss:// or unix:// URL"),
    ("queue", "prefix", "", "expected a non-empty string, got ''"),
    ("api", "listen", "8765", "expected host:port, [ipv6]:port or unix:/path, got '8765'"),
    ("api", "listen", "127.0.0.1:99999", "port must be an integer 0-65535, got '99999'"),
    ("api", "listen", "127.0.0.1:http", "port must be an integer 0-65535"),
    ("api", "listen", "::1:8765", "must be written in brackets"),
    ("api", "listen", "[::1]8765", "expected host:port, [ipv6]:port or unix:/path"),
    ("api", "listen", "[nothost]:8765", "'nothost' is not an IPv6 address"),
    ("api", "listen", "unix:", "the socket path is empty"),
    ("api", "listen", "127.0.0.1:\u0668\u0660", "port must be an integer 0-65535"),
    ("api", "listen", "exa mple:80", "'exa mple' is not a host name or address"),
    ("api", "listen", ["127.0.0.1:8765"], "got ['127.0.0.1:8765']"),
    ("api", "max_body_bytes", 0, "expected an integer ≥ 1, got 0"),
    ("scheduler", "tick_seconds", 0, "expected a number > 0, got 0"),
    ("scheduler", "tick_seconds", "5", "expected a number > 0, got '5'"),
    ("scheduler", "stale_lock_seconds", float("inf"), "expected a number > 0, got inf"),
    ("scheduler", "stale_lock_seconds", float("nan"), "expected a number > 0, got nan"),
    ("workers", "concurrency", "four", "expected an integer ≥ 1, got 'four'"),
    ("workers", "concurrency", True, "expected an integer ≥ 1, got True"),
    ("workers", "concurrency", 0, "expected an integer ≥ 1, got 0"),
    ("workers", "index_timeout_seconds", -1, "expected a number > 0, got -1"),
    ("workers", "lease_seconds", False, "expected a number > 0, got False"),
    ("workers", "batch_size", 2.0, "expected an integer ≥ 1, got 2.0"),
    ("http", "timeout_read", 0, "expected a number > 0, got 0"),
    ("http", "timeout_connect", "5s", "expected a number > 0, got '5s'"),
    ("http", "block_private_addresses", "yes", "expected true or false, got 'yes'"),
    ("http", "block_private_addresses", 1, "expected true or false, got 1"),
    ("http", "max_rate_limit_wait_seconds", 0, "expected a number > 0 and ≤ 86400, got 0"),
    (
        "http",
        "max_rate_limit_wait_seconds",
        90000,
        "expected a number > 0 and ≤ 86400, got 90000",
    ),
    ("log", "level", "verbose", "expected one of debug, info, warning, error, got 'verbose'"),
    ("log", "format", "xml", "expected one of auto, json, console, got 'xml'"),
    ("sync", "page_retries", -1, "expected an integer from 0 to 20, got -1"),
    ("sync", "page_retries", 21, "expected an integer from 0 to 20, got 21"),
    ("sync", "page_retry_backoff", -0.5, "expected a number ≥ 0 and ≤ 3600, got -0.5"),
    ("sync", "throttle_seconds", "fast", "expected a number ≥ 0 and ≤ 3600, got 'fast'"),
    ("sync", "throttle_seconds", 1e12, "expected a number ≥ 0 and ≤ 3600, got 1000000000000.0"),
    ("scheduler", "tick_seconds", 10**400, "expected a number > 0, got 1000"),
    ("sync", "retry_on_status", [502, 600], "expected a list of HTTP status codes 400-599"),
    ("sync", "retry_on_status", 503, "expected a list of HTTP status codes 400-599, got 503"),
    ("sync", "retry_on_status", [True], "expected a list of HTTP status codes 400-599"),
    ("sync", "heartbeat_seconds", 0, "expected a number > 0, got 0"),
    ("sync", "max_concurrent_runs", 0, "expected an integer ≥ 1, got 0"),
    ("sync", "max_concurrent_runs", 1.5, "expected an integer ≥ 1, got 1.5"),
    ("sync", "max_concurrent_runs", True, "expected an integer ≥ 1, got True"),
    ("sync", "outage_seconds", 0, "expected a number > 0 and ≤ 86400, got 0"),
    ("sync", "outage_seconds", "1m", "expected a number > 0 and ≤ 86400, got '1m'"),
    ("sync", "outage_seconds", 1e6, "expected a number > 0 and ≤ 86400, got 1000000.0"),
    ("daemon", "instance_id", "  ", "expected a non-empty string, got '  '"),
    ("daemon", "grace_seconds", -1, "expected a number ≥ 0, got -1"),
]


@pytest.mark.parametrize(("section", "key", "value", "message"), BAD_VALUES)
def test_bad_file_value_names_its_key(section: str, key: str, value: Any, message: str) -> None:
    error = config_error({section: {key: value}})
    assert error.key == f"{section}.{key}"
    assert message in error.message
    assert str(error).startswith(f"{section}.{key}: expected")


def test_unknown_section() -> None:
    error = config_error({"stroe": {"url": "x"}})
    assert error.key == "stroe"
    assert error.message.startswith(
        "unknown section (expected one of: api, daemon, documents, http,"
    )


def test_unknown_key() -> None:
    error = config_error({"workers": {"concurency": 3}})
    assert error.key == "workers.concurency"
    assert error.message == (
        "unknown key (expected one of: concurrency, index_timeout_seconds, lease_seconds, "
        "batch_size, max_attempts, retry_backoff_seconds)"
    )


def test_section_must_be_a_table() -> None:
    error = config_error({"store": "sqlite:///x.db"})
    assert error.key == "store"
    assert error.message == "expected a table [store], got 'sqlite:///x.db'"


def test_error_from_a_real_file_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[workers]\nconcurrency = "four"\n')
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    assert str(info.value) == "workers.concurrency: expected an integer ≥ 1, got 'four'"


def test_pool_sizes_must_be_ordered() -> None:
    error = config_error({"store": {"pool_min_size": 5, "pool_max_size": 3}})
    assert error.key == "store.pool_min_size"
    assert "must not exceed store.pool_max_size (3)" in error.message
    error = config_error({"store": {"pool_max_size": 3}}, {"SYNCD_STORE_POOL_MIN_SIZE": "4"})
    assert error.key == "SYNCD_STORE_POOL_MIN_SIZE"


def test_rejected_url_does_not_echo_its_password() -> None:
    error = config_error({"store": {"url": "mysql://admin:hunter2@db/x"}})
    assert "hunter2" not in str(error)
    assert "mysql://admin:***@db/x" in error.message
    # A password holding "@" is masked whole (the log redaction's rule, syncd.observability.logs).
    error = config_error({"store": {"url": "mysql://admin:hun@ter2@db/x"}})
    assert "ter2" not in str(error)
    assert "mysql://admin:***@db/x" in error.message


def test_sqlite_and_postgres_urls_accepted() -> None:
    for url in ("sqlite:///var/syncd.db", "sqlite:////var/lib/syncd/syncd.db", "postgres://h/d"):
        assert Config.from_mapping({"store": {"url": url}}, environ={}).store.url == url
    for url in ("memory://", "redis://h:6379/0", "rediss://h", "unix:///run/redis.sock"):
        assert Config.from_mapping({"queue": {"url": url}}, environ={}).queue.url == url


# --- environment overrides ------------------------------------------------------------


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[store]\nurl = "sqlite:///file.db"\n[workers]\nconcurrency = 2\n')
    config = Config.load(
        path,
        environ={
            "SYNCD_STORE_URL": "postgresql://u@h/d",
            "SYNCD_QUEUE_URL": "redis://127.0.0.1:6379/0",
            "SYNCD_API_LISTEN": "unix:/run/syncd/syncd.sock",
            "SYNCD_WORKERS_CONCURRENCY": " 8 ",
            "SYNCD_SCHEDULER_TICK_SECONDS": "0.5",
            "SYNCD_LOG_LEVEL": "warning",
            "SYNCD_SYNC_RETRY_ON_STATUS": "429, 503",
            "SYNCD_DAEMON_INSTANCE_ID": "node-7",
            "SYNCD_STORE_STATEMENT_CACHE_SIZE": "0",
        },
    )
    assert config.store.url == "postgresql://u@h/d"
    assert config.store.statement_cache_size == 0
    assert config.queue.url == "redis://127.0.0.1:6379/0"
    assert config.api.listen == "unix:/run/syncd/syncd.sock"
    assert config.workers.concurrency == 8
    assert config.scheduler.tick_seconds == 0.5
    assert config.log.level == "warning"
    assert config.sync.retry_on_status == (429, 503)
    assert config.daemon.instance_id == "node-7"


def test_every_key_but_the_http_timeouts_has_an_environment_override() -> None:
    # A value that fails every check proves the variable was read.
    sections = {
        "store": ["url", "statement_cache_size", "pool_min_size", "pool_max_size"],
        "queue": ["url", "prefix"],
        "api": ["listen", "token", "token_file", "max_body_bytes", "events_heartbeat_seconds"],
        "scheduler": ["tick_seconds", "stale_lock_seconds"],
        "workers": ["concurrency", "index_timeout_seconds", "lease_seconds", "batch_size"],
        "log": ["level", "format"],
        "sync": [
            "page_retries",
            "page_retry_backoff",
            "throttle_seconds",
            "retry_on_status",
            "heartbeat_seconds",
            "max_concurrent_runs",
            "outage_seconds",
        ],
        "daemon": ["instance_id", "grace_seconds"],
        "http": ["block_private_addresses", "max_rate_limit_wait_seconds"],
    }
    for section, keys in sections.items():
        for key in keys:
            var = env_var(section, key)
            error = config_error({}, {var: "x" if key == "retry_on_status" else " "})
            assert error.key == var, var


def test_max_concurrent_runs_defaults_to_32_and_is_read_from_file_and_environment() -> None:
    assert Config().sync.max_concurrent_runs == 32
    config = Config.from_mapping({"sync": {"max_concurrent_runs": 1}}, environ={})
    assert config.sync.max_concurrent_runs == 1
    environ = {"SYNCD_SYNC_MAX_CONCURRENT_RUNS": "500"}
    assert Config.from_mapping({}, environ=environ).sync.max_concurrent_runs == 500


def test_http_timeouts_are_not_read_from_the_environment() -> None:
    # The transport resolves these at run time with warning-and-fallback semantics.
    config = Config.from_mapping(
        {"http": {"timeout_read": 7}},
        environ={"SYNCD_HTTP_TIMEOUT_READ": "nonsense", "SYNCD_HTTP_TIMEOUT_CONNECT": "1"},
    )
    assert (config.http.timeout_read, config.http.timeout_connect) == (7.0, 5.0)


def test_max_rate_limit_wait_defaults_to_15_minutes_and_is_read_from_file_and_environment() -> None:
    assert Config().http.max_rate_limit_wait_seconds == 900.0
    config = Config.from_mapping({"http": {"max_rate_limit_wait_seconds": 3600}}, environ={})
    assert config.http.max_rate_limit_wait_seconds == 3600.0
    environ = {"SYNCD_HTTP_MAX_RATE_LIMIT_WAIT_SECONDS": "120"}
    config = Config.from_mapping({"http": {"max_rate_limit_wait_seconds": 3600}}, environ=environ)
    assert config.http.max_rate_limit_wait_seconds == 120.0


def test_block_private_addresses_is_off_by_default_and_read_from_the_environment() -> None:
    assert Config().http.block_private_addresses is False
    for text, expected in [("true", True), (" 1 ", True), ("on", True), ("False", False)]:
        config = Config.from_mapping(
            {"http": {"block_private_addresses": not expected}},
            environ={"SYNCD_HTTP_BLOCK_PRIVATE_ADDRESSES": text},
        )
        assert config.http.block_private_addresses is expected, text


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("SYNCD_HTTP_BLOCK_PRIVATE_ADDRESSES", "maybe", "expected true or false, got 'maybe'"),
        ("SYNCD_WORKERS_CONCURRENCY", "four", "expected an integer ≥ 1, got 'four'"),
        ("SYNCD_WORKERS_CONCURRENCY", "0", "expected an integer ≥ 1, got '0'"),
        ("SYNCD_WORKERS_CONCURRENCY", "2.5", "expected an integer ≥ 1, got '2.5'"),
        ("SYNCD_SCHEDULER_TICK_SECONDS", "nan", "expected a number > 0, got 'nan'"),
        ("SYNCD_SCHEDULER_TICK_SECONDS", "-inf", "expected a number > 0, got '-inf'"),
        ("SYNCD_STORE_URL", "mongodb://x", "got 'mongodb://x'"),
        ("SYNCD_API_LISTEN", "localhost", "expected host:port, [ipv6]:port or unix:/path"),
        ("SYNCD_LOG_FORMAT", "yaml", "expected one of auto, json, console, got 'yaml'"),
        ("SYNCD_SYNC_RETRY_ON_STATUS", "502,bad", "got '502,bad'"),
        ("SYNCD_SYNC_RETRY_ON_STATUS", "200", "expected a list of HTTP status codes 400-599"),
    ],
)
def test_bad_environment_value_names_the_variable(var: str, value: str, message: str) -> None:
    error = config_error({}, {var: value})
    assert error.key == var
    assert message in error.message


def test_empty_retry_list_from_environment_means_none() -> None:
    config = Config.from_mapping({}, environ={"SYNCD_SYNC_RETRY_ON_STATUS": ""})
    assert config.sync.retry_on_status == ()


def test_unrelated_syncd_variables_are_ignored() -> None:
    environ = {"SYNCD_URL": "http://x", "SYNCD_TEST_POSTGRES_DSN": "x", "SYNCD_CONFIG": ""}
    assert Config.load(environ=environ) == Config()


# --- the token ------------------------------------------------------------------------


def test_token_inline_and_from_environment() -> None:
    assert Config.from_mapping({"api": {"token": "abc"}}, environ={}).api.token == "abc"
    config = Config.from_mapping({"api": {"token": "abc"}}, environ={"SYNCD_API_TOKEN": "xyz"})
    assert config.api.token == "xyz"


def test_token_is_not_in_the_repr() -> None:
    config = Config.from_mapping({"api": {"token": "do-not-print-me"}}, environ={})
    assert "do-not-print-me" not in repr(config)


def test_token_file_is_read_and_stripped(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  tok-123\n", encoding="utf-8")
    config = Config.from_mapping({"api": {"token_file": str(tmp_path / "token")}}, environ={})
    assert config.api.token == "tok-123"


def test_relative_token_file_is_relative_to_the_config_file(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "token").write_text("tok-rel\n", encoding="utf-8")
    path = write(etc, '[api]\ntoken_file = "token"\n')
    assert Config.load(path, environ={}).api.token == "tok-rel"


def test_missing_token_file_names_the_key(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    error = config_error({"api": {"token_file": str(missing)}})
    assert error.key == "api.token_file"
    assert error.message == f"cannot read {str(missing)!r}: No such file or directory"


@pytest.mark.parametrize(
    ("content", "message"), [("\n  \n", "is empty"), ("two words", "one token without spaces")]
)
def test_unusable_token_file(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "token").write_text(content, encoding="utf-8")
    error = config_error({"api": {"token_file": str(tmp_path / "token")}})
    assert error.key == "api.token_file"
    assert message in error.message


def test_token_and_token_file_are_exclusive(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t", encoding="utf-8")
    error = config_error({"api": {"token": "a", "token_file": str(tmp_path / "token")}})
    assert error.key == "api.token_file"
    assert error.message == "cannot be combined with api.token"
    error = config_error(
        {}, {"SYNCD_API_TOKEN": "a", "SYNCD_API_TOKEN_FILE": str(tmp_path / "token")}
    )
    assert error.key == "SYNCD_API_TOKEN_FILE"


def test_environment_token_replaces_the_files_token_file(tmp_path: Path) -> None:
    # The environment wins whichever form the file used; the file's token_file is not read.
    data = {"api": {"token_file": str(tmp_path / "unreadable")}}
    assert Config.from_mapping(data, environ={"SYNCD_API_TOKEN": "env"}).api.token == "env"
    (tmp_path / "envtoken").write_text("from-file\n", encoding="utf-8")
    config = Config.from_mapping(
        {"api": {"token": "inline"}}, environ={"SYNCD_API_TOKEN_FILE": str(tmp_path / "envtoken")}
    )
    assert config.api.token == "from-file"


def test_missing_token_file_from_environment_names_the_variable(tmp_path: Path) -> None:
    error = config_error({}, {"SYNCD_API_TOKEN_FILE": str(tmp_path / "absent")})
    assert error.key == "SYNCD_API_TOKEN_FILE"


@pytest.mark.parametrize("token", ["", "has space", "new\nline"])
def test_bad_tokens_are_rejected_without_being_echoed(token: str) -> None:
    error = config_error({"api": {"token": token}})
    assert error.key == "api.token"
    assert error.message == "expected a non-empty token of printable characters without spaces"
    error = config_error({}, {"SYNCD_API_TOKEN": token})
    assert error.key == "SYNCD_API_TOKEN"


# --- listen ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "address"),
    [
        ("127.0.0.1:8765", TcpAddress("127.0.0.1", 8765)),
        ("localhost:0", TcpAddress("localhost", 0)),
        ("[::1]:65535", TcpAddress("::1", 65535)),
        ("unix:/run/syncd/syncd.sock", UnixAddress("/run/syncd/syncd.sock")),
        ("unix:relative.sock", UnixAddress("relative.sock")),
    ],
)
def test_parse_address(listen: str, address: TcpAddress | UnixAddress) -> None:
    assert parse_address(listen) == address
    assert ApiConfig(listen=listen).address == address
    assert is_loopback(address)
    assert Config.from_mapping({"api": {"listen": listen}}, environ={}).api.listen == listen


@pytest.mark.parametrize("listen", ["0.0.0.0:8765", "[::]:8765", "192.0.2.10:80", "example:1"])
def test_non_loopback_listen_requires_a_token(listen: str) -> None:
    assert not is_loopback(parse_address(listen))
    error = config_error({"api": {"listen": listen}})
    assert error.key == "api.listen"
    assert "is not a loopback address or unix socket" in error.message
    assert "api.token" in error.message
    error = config_error({}, {"SYNCD_API_LISTEN": listen})
    assert error.key == "SYNCD_API_LISTEN"
    config = Config.from_mapping({"api": {"listen": listen, "token": "t"}}, environ={})
    assert config.api.token == "t"


def test_every_interface_needs_a_token() -> None:
    # ":port" is every interface, as the API server binds it (aiohttp's host=None).
    address = parse_address(":8765")
    assert address == TcpAddress("", 8765)
    assert address.every_interface
    assert not is_loopback(address)
    for error in (
        config_error({"api": {"listen": ":8765"}}),
        config_error({}, {"SYNCD_API_LISTEN": ":8765"}),
    ):
        assert "':8765' (every interface) is not a loopback address" in error.message
    config = Config.from_mapping({"api": {"listen": ":8765", "token": "t"}}, environ={})
    assert config.api.address == TcpAddress("", 8765)


def test_listen_names_are_re_exported_from_their_home() -> None:
    from syncd import config
    from syncd.config import listen

    for name in ("TcpAddress", "UnixAddress", "is_loopback", "parse_address"):
        assert getattr(config, name) is getattr(listen, name)


# --- paginator defaults -----------------------------------------------------------------


def test_sync_defaults_are_the_paginator_defaults() -> None:
    assert (
        SyncConfig().paginator
        == DEFAULT_PAGINATOR
        == PaginatorSettings(3, 2.0, 0.0, (502, 503, 504))
    )
    config = Config.from_mapping(
        {"sync": {"page_retries": 0, "throttle_seconds": 1.5, "retry_on_status": [429]}},
        environ={"SYNCD_SYNC_PAGE_RETRY_BACKOFF": "0.5"},
    )
    assert config.sync.paginator == PaginatorSettings(0, 0.5, 1.5, (429,))


# --- [http.hosts."HOST"]: per-host budgets ---------------------------------------------


def test_host_budgets_from_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [http.hosts."API.Example.com"]
        rate = 2.5
        [http.hosts."api.example.com:8443"]
        rate = 10
        burst = 3
        concurrency = 2
        [http.hosts."[::1]:8080"]
        rate = 0.5
        [http.hosts."bücher.de"]
        rate = 1
        """,
    )
    hosts = Config.load(path, environ={}).http.hosts
    assert hosts == {
        # burst defaults to max(1, ceil(rate)); keys are lowercase, IDNA and IPv6 canonical.
        "api.example.com": HostBudget(2.5, 3, None),
        "api.example.com:8443": HostBudget(10.0, 3, 2),
        "[::1]:8080": HostBudget(0.5, 1, None),
        "xn--bcher-kva.de": HostBudget(1.0, 1, None),
    }
    assert Config().http.hosts == {}


def test_the_documented_host_budget_example_is_valid() -> None:
    text = (REPO / "config.toml").read_text(encoding="utf-8")
    example = re.findall(r"(?m)^#   (\[http\.hosts\..*\]|\w+ = .*)$", text)
    assert example[0] == '[http.hosts."api.example.com"]'
    config = Config.from_mapping(tomllib.loads("\n".join(example)), environ={})
    assert config.http.hosts == {"api.example.com": HostBudget(10.0, 20, 4)}


BAD_HOSTS: list[tuple[Any, str, str]] = [
    ({"api.example.com": {"rate": 0}}, 'http.hosts."api.example.com".rate', "a number > 0, got 0"),
    ({"h": {"rate": float("inf")}}, 'http.hosts."h".rate', "expected a number > 0, got inf"),
    ({"h": {"rate": "5/s"}}, 'http.hosts."h".rate', "expected a number > 0, got '5/s'"),
    ({"h": {"burst": 2}}, 'http.hosts."h".rate', "missing: a budget needs a rate"),
    ({"h": {"rate": 1, "burst": 0}}, 'http.hosts."h".burst', "expected an integer ≥ 1, got 0"),
    ({"h": {"rate": 1, "burst": 1.5}}, 'http.hosts."h".burst', "expected an integer ≥ 1"),
    ({"h": {"rate": 1, "concurrency": 0}}, 'http.hosts."h".concurrency', "an integer ≥ 1, got 0"),
    ({"h": {"rate": 1, "ratio": 1}}, 'http.hosts."h".ratio', "unknown key (expected one of: rate,"),
    ({"h": 5}, 'http.hosts."h"', "expected a table with rate, got 5"),
    ({"https://h/": {"rate": 1}}, 'http.hosts."https://h/"', "expected a host name or IP address"),
    ({"h:99999": {"rate": 1}}, 'http.hosts."h:99999"', 'optionally with ":port"'),
    ({"h:": {"rate": 1}}, 'http.hosts."h:"', "expected a host name"),
    ({"": {"rate": 1}}, 'http.hosts.""', "expected a host name"),
    ({"H": {"rate": 1}, "h": {"rate": 2}}, 'http.hosts."h"', "the same host as another key (h)"),
    (5, "http.hosts", 'expected a table of [http.hosts."HOST"] tables, got 5'),
]


@pytest.mark.parametrize(("hosts", "key", "message"), BAD_HOSTS)
def test_bad_host_budget_names_its_key(hosts: Any, key: str, message: str) -> None:
    error = config_error({"http": {"hosts": hosts}})
    assert error.key == key
    assert message in error.message


def test_host_budgets_are_not_read_from_the_environment() -> None:
    config = Config.from_mapping({}, environ={"SYNCD_HTTP_HOSTS": "nonsense"})
    assert config.http.hosts == {}
