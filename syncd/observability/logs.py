"""Logging: structlog for syncd, stdlib logging (aiohttp, asyncpg) routed through it, and
redaction of secrets from every line.

Output is JSON lines when the stream is not a terminal (journald, files, pipes) and a readable
console rendering on a terminal. Every line passes through :class:`Redactor`, which masks
registered secrets, ``Bearer`` credentials, URL/DSN passwords, ``password=...`` style pairs
and the values of keys named like secrets — in the message, bound values, nested containers
and rendered tracebacks alike.

Values bound with :mod:`structlog.contextvars` (``connector_id``, ``run_id``) are merged into
every line, including lines logged by libraries through stdlib :mod:`logging`.

Database and queue driver loggers (:data:`DRIVER_LOGGERS`: aiosqlite, asyncpg, redis) are
capped at INFO whatever ``log.level`` says: at DEBUG they print every statement with its
parameters (connector sources and headers among them), which no redaction can be trusted to
catch. :func:`redact` is the same redaction as a plain function, for error texts that leave
the daemon through the API rather than the log.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TextIO
from urllib.parse import quote, quote_plus

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from syncd.errors import SyncdError

__all__ = [
    "DRIVER_LOGGERS",
    "MASK",
    "Redactor",
    "configure_logging",
    "describe_error",
    "mask_url_passwords",
    "redact",
    "register_secret",
    "set_level",
    "unregister_secret",
]

#: What a masked value is replaced with.
MASK = "***"

#: Registered secrets shorter than this are ignored: masking every occurrence of a two- or
#: three-character string would garble every line. Patterns and key names still apply.
MIN_SECRET_LENGTH = 4

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_FORMATS = ("auto", "json", "console")

#: Loggers of database and queue drivers, never allowed below INFO: at DEBUG they log SQL
#: and command parameters (aiosqlite prints each call with its arguments).
DRIVER_LOGGERS = ("aiosqlite", "asyncpg", "redis")
_DRIVER_FLOOR = logging.INFO
_HANDLER_NAME = "syncd"

# Keys whose values the processors themselves produce: never rewritten.
_STRUCTURAL_KEYS = frozenset({"level", "timestamp", "logger"})

# Names of keys whose values are secrets, wherever they appear (bound values, nested dicts,
# header mappings). `token_file` or `password_path` name where a secret is, not the secret.
_SENSITIVE_WORDS = (
    r"password|passwd|passphrase|secret|token|authorization|api[-_]?key|apikey"
    r"|access[-_]?key|private[-_]?key|credentials?|cookie"
)
_SENSITIVE_KEY = re.compile(rf"(?i)(?:{_SENSITIVE_WORDS})")
_NOT_SENSITIVE_KEY = re.compile(r"(?i)(?:_file|_path)$")

# Bounded repetitions everywhere below: log lines can be long, and unbounded nested
# quantifiers would make a pathological line cost quadratic time.
# The password of a URL's userinfo (scheme://user:PASSWORD@host). It may itself hold "@":
# like URL parsers, the userinfo ends at the last "@" before the path, query or fragment.
# No \b before the scheme: "_https://…" (a scheme glued to a word) is a URL too.
_URL_PASSWORD = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s/?#@:]{0,256}:)"
    r"(?P<password>[^\s/?#]{1,512})(?=@)"
)
_BEARER = re.compile(r"(?i)(?P<head>\bbearer\s+)[^\s,;'\"]+")
_BASIC = re.compile(r"(?P<head>\bBasic\s+)[A-Za-z0-9+/]{6,}={0,2}(?![\w+/=])")
_HEADER_LINE = re.compile(
    r"(?i)(?P<head>\b(?:proxy-)?authorization\s*:\s*|\b(?:x-)?api-key\s*:\s*"
    r"|\bx-auth-token\s*:\s*|\b(?:set-)?cookie\s*:\s*)(?P<value>[^\r\n]+)"
)
_KEY_NAME = rf"[\w.-]{{0,40}}(?:{_SENSITIVE_WORDS})[\w.-]{{0,40}}"
_VALUE = r"\"[^\"\r\n]{0,4096}\"|'[^'\r\n]{0,4096}'|[^\s&;,'\")\]}]{1,4096}"
_KEY_EQUALS = re.compile(rf"(?i)(?P<head>(?<![\w.-]){_KEY_NAME}\s*=\s*)(?P<value>{_VALUE})")
_QUOTED_KEY_COLON = re.compile(
    rf"(?i)(?P<head>(?P<q>[\"']){_KEY_NAME}(?P=q)\s*:\s*)(?P<value>{_VALUE}|b'[^'\r\n]{{0,4096}}')"
)

# Every credential pattern above needs one of these: a URL password ``@``, a header line or
# quoted key ``:``, a key ``=``, the space after ``Bearer``/``Basic``.
_CREDENTIAL_HINT = re.compile(r"[:=@\s]")


def _mask_group(match: re.Match[str]) -> str:
    return match.group("head") + MASK


def mask_url_passwords(text: str) -> str:
    """``text`` with the password of every URL in it masked (``scheme://user:***@host``).

    The one URL-password rule: the log redaction, config error messages and the display
    of connector configs all use it.
    """
    return _URL_PASSWORD.sub(_mask_group, text)


def _mask_quoted_value(match: re.Match[str]) -> str:
    value = match.group("value")
    quote_char = value[-1] if value[-1] in "\"'" and len(value) > 1 else ""
    return match.group("head") + (f"{quote_char}{MASK}{quote_char}" if quote_char else MASK)


def _forms(value: str) -> set[str]:
    # A secret also shows up percent-encoded in URLs and escaped in JSON or reprs.
    # quote() keeps "/" like path and query encoders do; the others encode everything.
    forms = {value, quote(value), quote(value, safe=""), quote_plus(value)}
    forms.update((json.dumps(value)[1:-1], repr(value)[1:-1]))
    return {f for f in forms if len(f) >= MIN_SECRET_LENGTH}


class _SecretRegistry:
    """The process-wide set of secret values, compiled into one alternation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = {}
        self.pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        if len(value.strip()) < MIN_SECRET_LENGTH:
            return
        with self._lock:
            count = self._values.get(value, 0)
            self._values[value] = count + 1
            # Sources register their secrets on every run: recompile only for new values.
            if count == 0:
                self._compile()

    def remove(self, value: str) -> None:
        with self._lock:
            count = self._values.get(value, 0)
            if count > 1:
                self._values[value] = count - 1
            elif count == 1:
                del self._values[value]
                self._compile()

    def _compile(self) -> None:
        forms = set().union(*(_forms(v) for v in self._values)) if self._values else set()
        if not forms:
            self.pattern = None
            return
        # Longest first so that a secret containing another is masked whole.
        alternatives = sorted(forms, key=lambda f: (-len(f), f))
        self.pattern = re.compile("|".join(re.escape(f) for f in alternatives))


_registry = _SecretRegistry()


def register_secret(value: str) -> None:
    """Mask ``value`` (and its URL-encoded and escaped forms) wherever it appears in a log line.

    Call it for every secret syncd handles: the API token, resolved header values, DSN
    passwords. Values shorter than :data:`MIN_SECRET_LENGTH` are ignored. Registrations are
    counted; :func:`unregister_secret` undoes one.
    """
    _registry.add(value)


def unregister_secret(value: str) -> None:
    """Undo one :func:`register_secret` of ``value`` (e.g. when a connector is deleted)."""
    _registry.remove(value)


def redact(text: str) -> str:
    """``text`` with every registered secret and recognisable credential masked.

    The redaction every log line gets (registered secrets in all their encoded forms,
    ``Bearer``/``Basic`` credentials, URL passwords, ``password=...`` pairs): pass error texts
    through it before they are stored or returned (``last_error``, a run's or a document's
    error).
    """
    return _DEFAULT_REDACTOR.redact(text)


def describe_error(
    exc: BaseException, *, plain: tuple[type[BaseException], ...] = (SyncdError,)
) -> str:
    """An error as shown outside the process, redacted: never a secret.

    Errors of the ``plain`` types (syncd's own, by default: stored on a run and its
    connector, answered by a preview) by their message, which says what failed; any other
    with its type's name in front, which a bare message (a ``KeyError``'s ``'id'``) lacks.
    ``plain=()`` names every error's type (a side task's failure in the log and
    ``/readyz``). A message-less error shows its type's name in place of the message (alone
    with ``plain=()``)."""
    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, plain):
        return redact(text or name)
    if not text and not plain:
        return redact(name)
    return redact(f"{name}: {text or name}")


class Redactor:
    """A structlog processor that masks secrets in every string of the event dict.

    It also renders ``exc_info`` into an ``exception`` string first, so that tracebacks are
    redacted like everything else; put it after the processors that add data and before the
    renderer. ``secrets`` are masked in addition to the registered ones (unless
    ``use_registry`` is false).
    """

    def __init__(self, secrets: Iterable[str] = (), *, use_registry: bool = True) -> None:
        self._use_registry = use_registry
        forms = {f for s in secrets if len(s.strip()) >= MIN_SECRET_LENGTH for f in _forms(s)}
        own = sorted(forms, key=lambda f: (-len(f), f))
        self._own = re.compile("|".join(re.escape(f) for f in own)) if own else None

    def redact(self, text: str) -> str:
        """Mask secrets and credentials in one string."""
        if self._own is not None:
            text = self._own.sub(MASK, text)
        pattern = _registry.pattern if self._use_registry else None
        if pattern is not None:
            text = pattern.sub(MASK, text)
        if not _CREDENTIAL_HINT.search(text):
            # Most strings of a line (an event name, a method, a path, an id) cannot hold a
            # credential of the patterns below: skip their six scans.
            return text
        text = mask_url_passwords(text)
        text = _BEARER.sub(_mask_group, text)
        text = _BASIC.sub(_mask_group, text)
        text = _HEADER_LINE.sub(_mask_group, text)
        text = _KEY_EQUALS.sub(_mask_quoted_value, text)
        return _QUOTED_KEY_COLON.sub(_mask_quoted_value, text)

    def redact_value(self, value: object, *, depth: int = 0) -> object:
        """Mask secrets in ``value``: strings, containers (recursively) and reprs of others.

        Mapping keys named like secrets (``token``, ``Authorization``, ``api_key`` …) have
        their values replaced whole. Objects whose ``repr`` would reveal a secret become
        the redacted ``repr`` string; others are left as they are.
        """
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.redact(value)
        if depth < 8:
            if isinstance(value, Mapping):
                return {k: self._redact_item(k, v, depth + 1) for k, v in value.items()}
            if isinstance(value, list | tuple | set | frozenset):
                items = [self.redact_value(v, depth=depth + 1) for v in value]
                return items if isinstance(value, list | set | frozenset) else tuple(items)
        if isinstance(value, bytes | bytearray):
            text = bytes(value).decode("utf-8", "replace")
            redacted = self.redact(text)
            return redacted if redacted != text else value
        text = repr(value)
        redacted = self.redact(text)
        return redacted if redacted != text else value

    def _redact_item(self, key: object, value: object, depth: int) -> object:
        # None and booleans ("token=None", "has_token=True") reveal nothing worth hiding.
        if isinstance(key, str) and _is_sensitive_key(key) and not isinstance(value, bool | None):
            return MASK
        return self.redact_value(value, depth=depth)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        exc_info = event_dict.pop("exc_info", None)
        rendered = _render_exc_info(exc_info)
        if rendered is not None:
            event_dict["exception"] = rendered
        out: EventDict = {}
        for key, value in event_dict.items():
            if key in _STRUCTURAL_KEYS:
                out[key] = value
            elif key == "event":
                out[key] = self.redact_value(value)
            else:
                out[key] = self._redact_item(key, value, 0)
        return out


# Holds no secrets of its own: it reads the registry at each call.
_DEFAULT_REDACTOR = Redactor()


class _ForeignRedactor:
    """Redacts records that come from stdlib loggers; syncd's own were redacted already."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if event_dict.get("_from_structlog"):
            return event_dict
        # The formatter's bookkeeping keys must survive for remove_processors_meta.
        meta = {k: event_dict.pop(k) for k in ("_record", "_from_structlog") if k in event_dict}
        return {**self._redactor(logger, method_name, event_dict), **meta}


def _is_sensitive_key(key: str) -> bool:
    return bool(_SENSITIVE_KEY.search(key)) and not _NOT_SENSITIVE_KEY.search(key)


_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _render_exc_info(exc_info: object) -> str | None:
    """The traceback text for structlog's ``exc_info`` (True, an exception, or a tuple)."""
    info: _ExcInfo | tuple[None, None, None]
    if exc_info is None or exc_info is False:
        return None
    if isinstance(exc_info, BaseException):
        info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif isinstance(exc_info, tuple) and len(exc_info) == 3:
        info = exc_info
    else:
        info = sys.exc_info()
    if info[0] is None or info[1] is None:
        return None
    return "".join(traceback.format_exception(info[1])).rstrip("\n")


_LEADING_KEYS = ("timestamp", "level", "logger", "event")


def _leading_keys_first(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Put the fixed fields first so that JSON lines read well in ``journalctl -o cat``."""
    ordered = {k: event_dict[k] for k in _LEADING_KEYS if k in event_dict}
    ordered.update((k, v) for k, v in event_dict.items() if k not in ordered)
    return ordered


# syslog priorities by logging method, for journald's "<N>" line prefix.
_JOURNAL_PRIORITIES = {
    "debug": 7,
    "info": 6,
    "warning": 4,
    "warn": 4,
    "error": 3,
    "exception": 3,
    "critical": 2,
    "fatal": 2,
}


def _journal_priority(_: WrappedLogger, method_name: str, rendered: object) -> str:
    # Runs after the renderer, so `rendered` is the finished line.
    return f"<{_JOURNAL_PRIORITIES.get(method_name, 6)}>{rendered}"


def _is_journal(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether ``stream`` is the journal stream systemd connected (``$JOURNAL_STREAM``)."""
    expected = environ.get("JOURNAL_STREAM", "")
    if not expected:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


def _parse_level(level: str) -> int:
    try:
        return _LEVELS[level.strip().lower()]
    except KeyError:
        raise ValueError(
            f"unknown log level {level!r}; expected one of {', '.join(_LEVELS)}"
        ) from None


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def set_level(level: str) -> None:
    """Change the level of every syncd and library logger (used on SIGHUP); driver loggers
    stay at INFO or above (:data:`DRIVER_LOGGERS`)."""
    _apply_level(_parse_level(level))


def _apply_level(numeric_level: int) -> None:
    logging.getLogger().setLevel(numeric_level)
    # An explicit level on the driver loggers: the root's DEBUG must not reach them. Set
    # whatever the level, so that a later reload from debug to warning lowers them too.
    for name in DRIVER_LOGGERS:
        logging.getLogger(name).setLevel(max(numeric_level, _DRIVER_FLOOR))


def configure_logging(
    level: str = "info",
    fmt: str = "auto",
    *,
    stream: TextIO | None = None,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """Set up structlog and stdlib logging to write redacted lines to ``stream`` (stderr).

    ``fmt`` is ``"json"`` (one JSON object per line), ``"console"`` (readable, coloured on a
    terminal) or ``"auto"``: console on a terminal, JSON otherwise (journald captures the
    service's stderr). Calling it again replaces the previous configuration, so SIGHUP can
    reload the level (:func:`set_level` does only that). Handlers installed by others on
    the root logger are left alone.

    When ``stream`` is the journal (``$JOURNAL_STREAM`` names it), each line starts with a
    ``<N>`` syslog priority, which journald strips and stores, so ``journalctl -p err``
    filters by level.

    The driver loggers (:data:`DRIVER_LOGGERS`) never go below INFO, even at ``"debug"``:
    their debug lines carry SQL parameters (connector configurations, header values).
    """
    numeric_level = _parse_level(level)
    if fmt not in _FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {', '.join(_FORMATS)}")
    out = stream if stream is not None else sys.stderr
    tty = _is_tty(out)
    renderers: list[Processor]
    if fmt == "json" or (fmt == "auto" and not tty):
        renderers = [_leading_keys_first, structlog.processors.JSONRenderer()]
    else:
        renderers = [structlog.dev.ConsoleRenderer(colors=tty)]
    if _is_journal(out, environ):
        renderers.append(_journal_priority)

    redactor = Redactor()
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    # Shared by syncd's own loggers and by records from libraries' stdlib loggers.
    common: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        timestamper,
    ]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *common,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            # Redact before the record reaches logging, so that every handler (not only
            # ours) gets the masked event.
            redactor,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Loggers created at import time, before this runs, must pick up the configuration.
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=common,
        processors=[
            _ForeignRedactor(redactor),
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *renderers,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    _apply_level(numeric_level)
