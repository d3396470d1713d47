"""Logging configuration and redaction: canary secrets never reach the output."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict
from yarl import URL

from syncd.errors import SourceError
from syncd.observability import logs
from syncd.observability.logs import (
    DRIVER_LOGGERS,
    MASK,
    Redactor,
    configure_logging,
    describe_error,
    redact,
    register_secret,
    set_level,
    unregister_secret,
)

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$")


@pytest.fixture(autouse=True)
def logging_state() -> Iterator[None]:
    """Restore stdlib logging, structlog and the context after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    drivers = {name: logging.getLogger(name).level for name in DRIVER_LOGGERS}
    config = structlog.get_config()
    # Other tests (an HTTP source, the runner) register secrets process-wide: start from none.
    registered = dict(logs._registry._values)
    for value in registered:
        logs._registry._values.pop(value)
    logs._registry._compile()
    yield
    logs._registry._values.clear()
    logs._registry._values.update(registered)
    logs._registry._compile()
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, driver_level in drivers.items():
        logging.getLogger(name).setLevel(driver_level)
    structlog.configure(**config)
    structlog.contextvars.clear_contextvars()


@pytest.fixture
def secret() -> Iterator[str]:
    """A registered canary secret with characters that URL-encoding and JSON change."""
    value = f"canary/token+{uuid.uuid4().hex}"
    register_secret(value)
    yield value
    unregister_secret(value)


def lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


# --- output format --------------------------------------------------------------------


def test_json_lines_when_the_stream_is_not_a_terminal() -> None:
    buf = io.StringIO()
    configure_logging("info", "auto", stream=buf)
    structlog.contextvars.bind_contextvars(connector_id="c-1", run_id="r-1")
    structlog.get_logger("syncd.pipeline.engine").info("page fetched", pages=3, documents=[1, 2])
    [line] = lines(buf)
    assert ISO_UTC.match(line.pop("timestamp"))
    assert line == {
        "level": "info",
        "logger": "syncd.pipeline.engine",
        "event": "page fetched",
        "pages": 3,
        "documents": [1, 2],
        "connector_id": "c-1",
        "run_id": "r-1",
    }
    assert list(json.loads(buf.getvalue()))[:4] == ["timestamp", "level", "logger", "event"]


def test_library_records_share_the_format_and_the_context() -> None:
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    structlog.contextvars.bind_contextvars(connector_id="c-2")
    logging.getLogger("asyncpg.pool").warning("connection %s lost after %d s", "db", 5)
    [line] = lines(buf)
    del line["timestamp"]
    assert line == {
        "level": "warning",
        "logger": "asyncpg.pool",
        "event": "connection db lost after 5 s",
        "connector_id": "c-2",
    }


def test_console_output_on_a_terminal() -> None:
    master, replica = os.openpty()
    try:
        with open(replica, "w", closefd=False) as tty:
            configure_logging("info", "auto", stream=tty)
            structlog.get_logger("syncd.api").info("listening", port=8765)
        out = os.read(master, 65536).decode()
    finally:
        os.close(master)
        os.close(replica)
    assert "\x1b[" in out  # coloured
    assert "listening" in out
    assert "port" in out and "8765" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_console_format_can_be_forced_and_has_no_colours_off_a_terminal() -> None:
    buf = io.StringIO()
    configure_logging("info", "console", stream=buf)
    structlog.get_logger("syncd.api").info("listening", port=8765)
    out = buf.getvalue()
    assert "\x1b[" not in out
    assert re.search(r"\[info\s*\] listening\s+\[syncd\.api\] port=8765$", out.strip()), out


def test_json_format_can_be_forced_on_a_terminal() -> None:
    master, replica = os.openpty()
    try:
        with open(replica, "w", closefd=False) as tty:
            configure_logging("info", "json", stream=tty)
            structlog.get_logger("syncd").info("started")
        out = os.read(master, 65536).decode()
    finally:
        os.close(master)
        os.close(replica)
    assert json.loads(out)["event"] == "started"


def test_journal_lines_carry_a_syslog_priority(tmp_path: Path) -> None:
    with open(tmp_path / "journal", "w+") as journal:
        st = os.fstat(journal.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        configure_logging("debug", "auto", stream=journal, environ=env)
        log = structlog.get_logger("syncd")
        log.debug("d")
        log.info("i")
        log.warning("w")
        log.error("e")
        try:
            raise ValueError("x")
        except ValueError:
            log.exception("x")
        logging.getLogger("aiohttp.server").critical("c")
        journal.seek(0)
        out = journal.read().splitlines()
    assert [line[:3] for line in out] == ["<7>", "<6>", "<4>", "<3>", "<3>", "<2>"]
    assert [json.loads(line[3:])["event"] for line in out] == ["d", "i", "w", "e", "x", "c"]


def test_no_priority_prefix_on_another_stream(tmp_path: Path) -> None:
    with open(tmp_path / "file", "w+") as stream:
        configure_logging("info", "auto", stream=stream, environ={"JOURNAL_STREAM": "1:2"})
        structlog.get_logger("syncd").info("plain")
        stream.seek(0)
        assert json.loads(stream.read())["event"] == "plain"


def test_level_filtering_and_reload_at_run_time() -> None:
    buf = io.StringIO()
    configure_logging("warning", "json", stream=buf)
    log = structlog.get_logger("syncd.scheduler")  # created before the reload
    log.info("dropped")
    logging.getLogger("aiohttp.access").info("dropped too")
    log.warning("kept")
    set_level("debug")
    log.debug("now visible")
    configure_logging("error", "json", stream=buf)  # a second call replaces the handler
    log.warning("dropped again")
    log.error("once")
    assert [line["event"] for line in lines(buf)] == ["kept", "now visible", "once"]


def test_driver_loggers_never_log_below_info(secret: str) -> None:
    # aiosqlite logs every call with its SQL parameters at DEBUG (a connector's source,
    # literal header values included): those lines must not exist at all.
    buf = io.StringIO()
    header = f"canary-sql-{uuid.uuid4().hex}"
    configure_logging("debug", "json", stream=buf)
    logging.getLogger("aiosqlite").debug("executing %s", f"partial(execute, ('{header}',))")
    logging.getLogger("asyncpg.protocol").debug("bind %s", header)
    logging.getLogger("redis.asyncio.connection").debug("send %s", header)
    logging.getLogger("aiosqlite").info("kept")
    logging.getLogger("aiohttp.client").debug("library debug kept")
    structlog.get_logger("syncd.pipeline.engine").debug("syncd debug kept")
    set_level("debug")  # a reload does not lift the cap either
    logging.getLogger("aiosqlite").debug("returning %s", header)
    assert header not in buf.getvalue()
    assert [line["event"] for line in lines(buf)] == [
        "kept",
        "library debug kept",
        "syncd debug kept",
    ]
    configure_logging("warning", "json", stream=buf)  # above INFO, the level applies
    logging.getLogger("asyncpg").info("dropped")
    assert [line["event"] for line in lines(buf)][-1] == "syncd debug kept"


def test_redact_is_the_log_redaction_for_error_texts(secret: str) -> None:
    text = f"failed: {secret} at postgresql://u:pw-123@db/x with Authorization: Bearer abc.def"
    assert (
        redact(text) == f"failed: {MASK} at postgresql://u:{MASK}@db/x with Authorization: {MASK}"
    )
    assert redact("HTTP 500 from GET http://h/items") == "HTTP 500 from GET http://h/items"


def test_describe_error_is_every_error_text_shown_outside(secret: str) -> None:
    # Stored on a run, answered by a preview: syncd's own errors by their message.
    assert describe_error(SourceError(f"HTTP 500 {secret}")) == f"HTTP 500 {MASK}"
    assert describe_error(KeyError("id")) == "KeyError: 'id'"
    assert describe_error(RuntimeError()) == "RuntimeError: RuntimeError"
    # A side task's failure (log, /readyz): every type named.
    assert describe_error(SourceError("gone"), plain=()) == "SourceError: gone"
    assert describe_error(RuntimeError(), plain=()) == "RuntimeError"
    # /readyz's probes: a server's own refusal by its message.
    assert describe_error(ConnectionRefusedError("refused"), plain=(OSError,)) == "refused"


def test_configure_leaves_other_handlers_alone() -> None:
    other = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(other)
    configure_logging("info", "json", stream=io.StringIO())
    configure_logging("info", "json", stream=io.StringIO())
    root = logging.getLogger()
    assert other in root.handlers
    assert [h.get_name() for h in root.handlers].count("syncd") == 1


@pytest.mark.parametrize(("level", "fmt"), [("loud", "json"), ("info", "xml")])
def test_invalid_settings_are_rejected(level: str, fmt: str) -> None:
    with pytest.raises(ValueError, match="unknown log"):
        configure_logging(level, fmt, stream=io.StringIO())


# --- redaction: canaries --------------------------------------------------------------


class Connection:
    """An object whose repr reveals its DSN, as driver objects often do."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __repr__(self) -> str:
        return f"<Connection {self.dsn}>"


def fail_with(dsn: str, token: str) -> None:
    try:
        raise ConnectionError(f"could not reach {dsn}")
    except ConnectionError as exc:
        raise RuntimeError(f"sync failed; header was Bearer {token}") from exc


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_canaries_never_reach_the_output(secret: str, fmt: str) -> None:
    db_password = f"canary-db-{uuid.uuid4().hex}"
    bearer = f"canary-bearer-{uuid.uuid4().hex}"
    api_key = f"canary-key-{uuid.uuid4().hex}"
    dsn = f"postgresql://syncd:{db_password}@db.internal:5432/syncd"
    canaries = [secret, db_password, bearer, api_key]
    buf = io.StringIO()
    configure_logging("debug", fmt, stream=buf)
    structlog.contextvars.bind_contextvars(connector_id="c-1", session=f"token {secret}")
    log = structlog.get_logger("syncd.pipeline.engine").bind(store_url=dsn, api_token=secret)

    # In the message itself, also percent-encoded inside URLs.
    encoded = URL("http://src.local/items").with_query(key=secret, x=1)
    log.info(f"fetching {encoded} or http://src.local/items?key={quote_plus(secret)}")
    # In bound values, nested dicts, lists, tuples, header mappings and object reprs.
    log.info(
        "request",
        headers=CIMultiDict({"Authorization": f"Bearer {bearer}", "X-Api-Key": api_key}),
        source={"url": dsn, "params": {"password": db_password}, "list": [secret, (dsn,)]},
        connection=Connection(dsn),
        note=f"Authorization: Bearer {bearer}",
    )
    # In an exception, its chained cause and the rendered traceback.
    try:
        fail_with(dsn, bearer)
    except RuntimeError:
        log.exception("run failed", error=f"{secret} rejected")
    # Through stdlib logging, with %-arguments and exc_info.
    try:
        fail_with(dsn, bearer)
    except RuntimeError:
        logging.getLogger("aiohttp.client").error("GET %s failed", dsn, exc_info=True)

    out = buf.getvalue()
    for canary in canaries:
        assert canary not in out
    assert quote_plus(secret) not in out
    assert str(encoded).split("=")[1].split("&")[0] not in out
    # The lines are there, with the non-secret parts intact.
    assert out.count("postgresql://syncd:***@db.internal:5432/syncd") >= 6
    assert "Bearer ***" in out
    assert "could not reach" in out and "sync failed" in out
    assert "The above exception was the direct cause" in out
    if fmt == "json":
        records = lines(buf)
        assert [r["event"] for r in records] == [
            f"fetching http://src.local/items?key={MASK}&x=1 or http://src.local/items?key={MASK}",
            "request",
            "run failed",
            f"GET postgresql://syncd:{MASK}@db.internal:5432/syncd failed",
        ]
        request = records[1]
        assert request["headers"] == {"Authorization": MASK, "X-Api-Key": MASK}
        assert request["api_token"] == MASK
        assert request["source"] == {
            "url": f"postgresql://syncd:{MASK}@db.internal:5432/syncd",
            "params": {"password": MASK},
            "list": [MASK, [f"postgresql://syncd:{MASK}@db.internal:5432/syncd"]],
        }
        assert request["connection"] == (
            f"<Connection postgresql://syncd:{MASK}@db.internal:5432/syncd>"
        )
        assert request["session"] == f"token {MASK}"
        assert records[2]["error"] == f"{MASK} rejected"
        assert records[2]["exception"].startswith("Traceback (most recent call last):")
        assert records[3]["exception"].endswith(f"sync failed; header was Bearer {MASK}")


# --- redaction: rules -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        ("https://u@h/p and http://h:8080/users/@me", "https://u@h/p and http://h:8080/users/@me"),
        ("Authorization: Bearer abc.def-ghi", "Authorization: ***"),
        ("sent bearer abc.def", "sent bearer ***"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: ***"),
        ("header Basic dXNlcjpwYXNz=", "header Basic ***"),
        ("host=db password=hunter2 user=u", "host=db password=*** user=u"),
        ("host=db password='a b' user=u", "host=db password='***' user=u"),
        ("GET /items?access_token=abc&page=2", "GET /items?access_token=***&page=2"),
        ("SYNCD_API_TOKEN=abc", "SYNCD_API_TOKEN=***"),
        ("{'api_key': 'abc def', 'n': 1}", "{'api_key': '***', 'n': 1}"),
        ('{"client_secret": "abc", "n": 1}', '{"client_secret": "***", "n": 1}'),
        ("Cookie: session=abc; theme=dark", "Cookie: ***"),
        ("token expired after a Basic setup", "token expired after a Basic setup"),
        ("nothing to hide here", "nothing to hide here"),
    ],
)
def test_redaction_rules(text: str, expected: str) -> None:
    assert Redactor(use_registry=False).redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        ("see _https://u:pw@h/x", "see _https://u:***@h/x"),  # a scheme glued to a word
        ("https://u@h/p", "https://u@h/p"),
        ("two: a://u:x1@h b://v:y2@k", "two: a://u:***@h b://v:***@k"),
    ],
)
def test_one_url_password_rule_everywhere(text: str, expected: str) -> None:
    """The log redaction, the display of connector configs and config error messages mask
    URL passwords with the same rule (syncd.observability.logs.mask_url_passwords)."""
    from syncd.config.keys import shown_value
    from syncd.config.secrets import redact_url

    assert logs.mask_url_passwords(text) == expected
    assert Redactor(use_registry=False).redact(text) == expected
    assert redact_url(text) == expected
    assert shown_value(text) == repr(expected)


@pytest.mark.parametrize("url", ["http://u:hunter2@[::1/x?a=1", "http://u:hunter2@h:99999/x#f"])
def test_unparsable_urls_in_messages_do_not_show_their_password(url: str) -> None:
    # yarl refuses these; the transport's fallback still masks the password.
    from syncd.http.urls import describe_url, safe_url

    for shown in (safe_url(url), describe_url(url)):
        assert "hunter2" not in shown
        assert shown.startswith("http://u:***@")
        assert "?" not in shown and "#" not in shown


def test_sensitive_keys_are_masked_whatever_their_value() -> None:
    redactor = Redactor(use_registry=False)
    event = {
        "event": "configured",
        "token": "abc",
        "Authorization": "Bearer abc",
        "db_password": 12345,
        "credentials": {"user": "u", "pass": "p"},
        "token_file": "/etc/syncd/token",
        "has_token": True,
        "api_key": None,
        "level": "info",
        "timestamp": "2024-01-01T00:00:00Z",
    }
    assert redactor(None, "info", dict(event)) == {
        "event": "configured",
        "token": MASK,
        "Authorization": MASK,
        "db_password": MASK,
        "credentials": MASK,
        "token_file": "/etc/syncd/token",
        "has_token": True,
        "api_key": None,
        "level": "info",
        "timestamp": "2024-01-01T00:00:00Z",
    }


def test_redactor_with_its_own_secrets() -> None:
    redactor = Redactor(["own-secret-value"], use_registry=False)
    assert redactor.redact("a own-secret-value b") == f"a {MASK} b"
    assert redact("a own-secret-value b") == "a own-secret-value b"


def test_registered_secrets_in_all_their_forms(secret: str) -> None:
    encoded = secret.replace("/", "%2F").replace("+", "%2B")
    assert redact(f"x {secret} y {encoded} z") == f"x {MASK} y {MASK} z"


def test_escaped_forms_of_a_secret_are_masked() -> None:
    value = f'canary"quote\\back-{uuid.uuid4().hex}'
    register_secret(value)
    try:
        assert redact(json.dumps({"v": value})) == json.dumps({"v": MASK})
        assert redact(repr([value])) == repr([MASK])
    finally:
        unregister_secret(value)


def test_registration_is_counted_and_can_be_undone() -> None:
    value = f"canary-{uuid.uuid4().hex}"
    register_secret(value)
    register_secret(value)
    unregister_secret(value)
    assert redact(value) == MASK
    unregister_secret(value)
    assert redact(value) == value


def test_too_short_secrets_are_ignored() -> None:
    register_secret("ab1")
    try:
        assert redact("ab1 in 2024") == "ab1 in 2024"
    finally:
        unregister_secret("ab1")


def test_exc_info_is_rendered_and_redacted_by_the_processor() -> None:
    redactor = Redactor(["processor-canary"], use_registry=False)
    try:
        raise ValueError("bad processor-canary")
    except ValueError as exc:
        error = exc
    out = redactor(None, "error", {"event": "x", "exc_info": error})
    assert "exc_info" not in out
    assert out["exception"].startswith("Traceback (most recent call last):")
    assert out["exception"].endswith(f"ValueError: bad {MASK}")


def test_pathological_input_is_redacted_in_linear_time() -> None:
    text = ("a" * 50 + "-" + "password" + "." * 50) * 2_000 + "://" + "x:" * 20_000
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 2.0


_PIECES = st.sampled_from(
    [
        "bearer",
        "Bearer ",
        "Basic ",
        "QWxhZGRpbjpvcGVu",
        "token",
        "password",
        "x-api-key",
        "https://",
        "user",
        ":",
        "=",
        "@",
        " ",
        "\t",
        "\n",
        "'",
        '"',
        "/",
        "abc",
        "s3cr3t!",
    ]
)


@given(st.lists(_PIECES, max_size=12).map("".join))
def test_the_fast_path_masks_what_every_pattern_would(text: str) -> None:
    # The reference: every credential pattern on every string, as before the fast path.
    expected = logs.mask_url_passwords(text)
    expected = logs._BEARER.sub(logs._mask_group, expected)
    expected = logs._BASIC.sub(logs._mask_group, expected)
    expected = logs._HEADER_LINE.sub(logs._mask_group, expected)
    expected = logs._KEY_EQUALS.sub(logs._mask_quoted_value, expected)
    expected = logs._QUOTED_KEY_COLON.sub(logs._mask_quoted_value, expected)
    assert Redactor(use_registry=False).redact(text) == expected
