"""Field types shared by the connector models: each one validates with syncd's own message
and describes itself in JSON Schema, so the check and its description cannot drift apart.

Messages are stable (clients and tests match them): a check that pydantic would word
obscurely runs first, in a ``BeforeValidator``, and raises a ``syncd`` error with the final
text; the constraint that follows it (``ge``, ``le``, ``strict``) then feeds the JSON Schema.
Patterns that only describe (``json_schema_extra``) are not enforced by pydantic: the
validator before them is the check.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import Annotated, Any, NoReturn, TypeVar, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, WithJsonSchema, WrapValidator
from pydantic import ValidationError as PydanticError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ValidatorFunctionWrapHandler
from yarl import URL

from syncd import paths
from syncd.config.secrets import check_refs
from syncd.rules import cron
from syncd.schema.patterns import CRON_PATTERN, URL_PATTERN, compiled, time_zones

_M = TypeVar("_M")

MSG_NOT_OBJECT = "Must be a JSON object"
MSG_REQUIRED = "Field required"
MSG_UNKNOWN = "Unknown field"
MSG_STRING = "Must be a string"
MSG_URL = "Must be an http:// or https:// URL"
MSG_PATH = paths.MSG_PATH
MSG_NON_EMPTY = "Must be a non-empty string"

NAME_MAX_LENGTH = 200
PAGE_RETRIES_MAX = 20
RUN_RETRIES_MAX = 20
"""Automatic retries of a failed run (``retry_attempts``)."""
"""Retries per page. Each waits twice as long as the one before: more would wait for years."""
SECONDS_MAX = 3600
"""Upper bound of ``page_retry_backoff`` and ``throttle_seconds`` (one hour)."""
TIMEOUT_MAX = 3600
"""Upper bound of ``source.timeout.read`` / ``connect`` (seconds)."""
MAX_PAGES_MAX = 1_000_000_000
PRUNE_CONFIRMATIONS_MAX = 100
"""The most complete crawls in a row a connector may ask to miss a document before it goes."""
LIMIT_MAX = 1_000_000
START_MAX = 1_000_000_000
STATUS_MIN, STATUS_MAX = 400, 599
PORT_MIN, PORT_MAX = 1, 65535
HASH_FIELDS_MAX = 100
"""Paths in a connector's ``hash_fields``."""
MSG_HASH_FIELDS = "Must be null or a non-empty list of paths"

ERROR_TYPE = "syncd"
"""The pydantic error type of every message written here (final text, shown as is)."""

# JSON Schema patterns (ECMA-262, as JSON Schema validators read them). Describing only: the
# validators below are the check. Every string in the schema refuses NUL (no store holds it).
NO_NUL = "^[^\\u0000]*$"
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
HEADER_NAME_PATTERN = "^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$"
# A path (syncd.paths): dotted, not starting with "/", or a JSON Pointer (RFC 6901).
PATH_PATTERN = "^(?:[^./\\u0000][^.\\u0000]*(?:\\.[^.\\u0000]+)*|(?:/(?:[^~/\\u0000]|~[01])*)+)$"
# The blanks a name is stripped of: the ASCII ones, spelled out, because regular expression
# engines disagree about what "\\s" covers (Python's includes \x1c-\x1f and \x85, ECMA's
# does not), and the description must accept exactly what the server accepts.
NAME_BLANKS = " \t\n\v\f\r"
NAME_PATTERN = (
    "^[ \\t\\n\\v\\f\\r]*[^ \\t\\n\\v\\f\\r\\u0000]"
    "([^\\u0000]{0,198}[^ \\t\\n\\v\\f\\r\\u0000])?[ \\t\\n\\v\\f\\r]*$"
)


def ref_pattern(excluded: str = "") -> str:
    """A pattern of text whose every ``${kind:name}`` is ``${env:NAME}`` or
    ``${file:/path}`` with a non-blank name (what :func:`check_refs` accepts), without NUL
    or the ``excluded`` characters (regex class syntax, e.g. ``\\r\\n``)."""
    bad = "\\u0000" + excluded
    plain = f"[^${bad}]"
    not_a_ref = "\\$(?!\\{[A-Za-z_]+:[^}]*\\})"
    ref = f"\\$\\{{(env|file):[^}}{bad}]*[^}}\\s{bad}][^}}{bad}]*\\}}"
    return f"^({plain}|{not_a_ref}|{ref})*$"


# The port of an absolute URL's authority (after any userinfo; an IPv6 host is bracketed).
_PORT = re.compile(
    r"https?://(?:[^/?#@]*@)?(?:\[[^\]/?#]*\]|[^:/?#]*):([0-9]+)(?:[/?#]|$)", re.IGNORECASE
)


# --- errors ------------------------------------------------------------------------------


def syncd_error(message: str) -> PydanticCustomError:
    """A pydantic error carrying ``message`` as is (braces in it are not a template)."""
    return PydanticCustomError(ERROR_TYPE, "{message}", {"message": message})


def fail(message: str) -> NoReturn:
    """Refuse the value being validated with ``message``."""
    raise syncd_error(message)


def fail_at(problems: list[tuple[tuple[str | int, ...], str]], value: Any) -> NoReturn:
    """Refuse the value with one message per location inside it (all reported at once)."""
    raise PydanticError.from_exception_data(
        "syncd",
        [InitErrorDetails(type=syncd_error(msg), loc=loc, input=value) for loc, msg in problems],
    )


def validated_with(
    value: Any,
    handler: Callable[[Any], _M],
    problems: list[tuple[tuple[str | int, ...], str]],
) -> _M:
    """The model ``handler`` (a wrap validator's) builds from ``value``; its fields' own errors
    and ``problems`` (checks across fields) are reported together, all at once."""
    try:
        model = handler(value)
    except PydanticError as exc:
        if not problems:
            raise
        seen = {loc for loc, _ in problems}
        own = [(e["loc"], message_of(e)) for e in exc.errors() if e["loc"] not in seen]
        fail_at([*own, *problems], value)
    if problems:
        fail_at(problems, value)
    return model


_MESSAGES = {
    "missing": MSG_REQUIRED,
    "extra_forbidden": MSG_UNKNOWN,
    "model_type": MSG_NOT_OBJECT,
    "model_attributes_type": MSG_NOT_OBJECT,
    "dict_type": MSG_NOT_OBJECT,
    "string_type": MSG_STRING,
}


def message_of(error: ErrorDetails) -> str:
    """The message of one pydantic error: syncd's own text, a stable wording of pydantic's
    common errors, else pydantic's (a plugin model's own constraints)."""
    if error["type"] == "literal_error":
        return f"Must be {error.get('ctx', {}).get('expected', 'one of the allowed values')}"
    return (
        error["msg"] if error["type"] == ERROR_TYPE else _MESSAGES.get(error["type"], error["msg"])
    )


def path_of(loc: tuple[str | int, ...], prefix: str = "") -> str:
    """``loc`` as a dotted path under ``prefix`` (a dict key's own error names the key)."""
    parts = [str(p) for p in loc if p != "[key]"]
    return ".".join([prefix, *parts] if prefix else parts) or prefix or "body"


def field_errors(exc: PydanticError, prefix: str = "") -> dict[str, str]:
    """``{"dotted.path": message}`` of a pydantic error, the first message per path."""
    out: dict[str, str] = {}
    for error in exc.errors():
        out.setdefault(path_of(error["loc"], prefix), message_of(error))
    return out


# --- checks ------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (an int or a float, not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def int_between(low: int, high: int) -> Callable[[Any], Any]:
    """A check of an integer from ``low`` to ``high`` (an integral float taken as the int)."""

    def check(value: Any) -> Any:
        # 20.0 is the integer 20 in JSON (and in JSON Schema, whose "integer" admits it): a
        # JavaScript client cannot even tell them apart. Taken as the int.
        if isinstance(value, float) and value.is_integer() and low <= value <= high:
            return int(value)
        if not _is_int(value) or not low <= value <= high:
            fail(f"Must be an integer between {low} and {high}")
        return value

    return check


def _seconds(value: Any) -> Any:
    # Compared before any float(): a 400-digit integer does not fit a float; NaN fails both.
    if not is_number(value) or not 0 <= value <= SECONDS_MAX:
        fail(f"Must be a number of seconds between 0 and {SECONDS_MAX}")
    return value


def _timeout(value: Any) -> Any:
    if not is_number(value) or not 0 < value <= TIMEOUT_MAX:
        fail(f"Must be a number of seconds > 0 and <= {TIMEOUT_MAX}")
    return value


def ref_problem(value: str) -> str | None:
    """Why a ``${env:}``/``${file:}`` reference in ``value`` is malformed (``None``: none is)."""
    return check_refs(value) if "${" in value else None


def url_problem(value: Any) -> str | None:
    """Why ``value`` is not a URL the transport can request (``None`` when it is).

    Parsed with yarl, as the transport parses it: absolute ``http``/``https``, a host that
    encodes (IDNA: no empty label, none over 63 characters), a port from 1 to 65535.
    """
    if not isinstance(value, str):
        return MSG_URL
    # Checked first: yarl refuses a port over 65535 with the same error as any bad URL.
    port_text = match[1] if (match := _PORT.match(value)) else None
    if port_text is not None and (len(port_text) > 5 or not PORT_MIN <= int(port_text) <= PORT_MAX):
        return f"Port must be between {PORT_MIN} and {PORT_MAX}"
    try:
        url = URL(value)
        scheme, host, port = url.scheme, url.host, url.port
    except ValueError:  # port out of range or not a number, unclosed IPv6 bracket, bad IDNA
        return MSG_URL
    if scheme not in ("http", "https") or not host:
        return MSG_URL
    if port is None or not PORT_MIN <= port <= PORT_MAX:
        return f"Port must be between {PORT_MIN} and {PORT_MAX}"
    try:
        host.encode("idna")  # what the resolver does on every request
    except UnicodeError:
        return "Invalid host name"
    return None


def _url(value: Any) -> Any:
    if problem := url_problem(value):
        fail(problem)
    # Beyond yarl's rules, exactly what the JSON Schema says (an ASCII host, no empty port).
    if not compiled(URL_PATTERN).fullmatch(value):
        fail(MSG_URL)
    return value


def _path(value: Any) -> Any:
    if problem := paths.path_problem(value):
        fail(problem)
    return value


def _hash_fields(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not value:
        fail(MSG_HASH_FIELDS)
    if len(value) > HASH_FIELDS_MAX:
        fail(f"Must list at most {HASH_FIELDS_MAX} paths")
    # Each path checked here, not by the union below: its errors then name ``hash_fields.N``.
    problems: list[tuple[tuple[str | int, ...], str]] = [
        ((i,), MSG_PATH) for i, path in enumerate(value) if paths.path_problem(path)
    ]
    if problems:
        fail_at(problems, value)
    return list(value)


def _non_empty(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        fail(MSG_NON_EMPTY)
    return value


def _header_name(value: Any) -> Any:
    if not isinstance(value, str) or not _HEADER_NAME.fullmatch(value):
        fail("Invalid header name")
    return value


def _headers(value: Any) -> Any:
    if not isinstance(value, Mapping):
        fail(MSG_NOT_OBJECT)
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for name, text in value.items():
        where = (str(name),)
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            problems.append((where, "Invalid header name"))
        elif not isinstance(text, str):
            problems.append((where, MSG_STRING))
        elif problem := ref_problem(text):
            problems.append((where, problem))
        elif "\n" in text or "\r" in text:
            problems.append((where, "Must not contain line breaks"))
    if problems:
        fail_at(problems, value)
    return dict(value)


def _params(value: Any) -> Any:
    if not isinstance(value, Mapping):
        fail(MSG_NOT_OBJECT)
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for name, param in value.items():
        where = (str(name),)
        if isinstance(param, float) and not math.isfinite(param):
            problems.append((where, "Must be a finite number"))
        elif not isinstance(param, str | int | float):  # bool is an int: sent as true/false
            problems.append((where, "Must be a string, number or boolean"))
        elif isinstance(param, str) and (problem := ref_problem(param)):
            problems.append((where, problem))
    if problems:
        fail_at(problems, value)
    return dict(value)


def _flag(value: Any) -> Any:
    if not isinstance(value, bool):
        fail("Must be true or false")
    return value


def _name(value: Any) -> Any:
    if not isinstance(value, str):
        fail(MSG_STRING)
    # Surrounding blanks would make two names that look identical differ.
    name = value.strip(NAME_BLANKS)
    if not name:
        fail("Must not be empty")
    if len(name) > NAME_MAX_LENGTH:
        fail(f"Must be at most {NAME_MAX_LENGTH} characters")
    return name


def _cron(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        fail("Must be a string or null")
    expression = " ".join(value.split())
    if not compiled(CRON_PATTERN).fullmatch(value) or not cron.is_valid(expression):
        fail("Must be a valid 5-field cron expression")
    return expression


def _timezone(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or value not in time_zones()):
        fail("Must be an IANA time zone name (e.g. Europe/Paris) or null")
    return value


def status_list(value: Any) -> Any:
    """The check of a list of HTTP statuses (each one checked by its own type)."""
    if not isinstance(value, list | tuple):
        fail("Must be a list of HTTP status codes")
    return list(value)


def absent(**kwargs: Any) -> Any:
    """A field that may be left out, and has no default of its own: the runtime's applies
    (the JSON Schema shows none, and the value cannot be null)."""
    return Field(None, **kwargs)


def pattern_of(pattern: str) -> Any:
    """The JSON Schema ``pattern`` of a string type, described only: its validator checks."""
    return Field(json_schema_extra={"pattern": pattern})


# --- types -------------------------------------------------------------------------------

PageRetries = Annotated[
    int, Field(strict=True, ge=0, le=PAGE_RETRIES_MAX), BeforeValidator(int_between(0, 20))
]
Seconds = Annotated[float, Field(ge=0, le=SECONDS_MAX), BeforeValidator(_seconds)]
RunRetries = Annotated[
    int,
    Field(strict=True, ge=0, le=RUN_RETRIES_MAX),
    BeforeValidator(int_between(0, RUN_RETRIES_MAX)),
]
PruneConfirmations = Annotated[
    int,
    Field(strict=True, ge=1, le=PRUNE_CONFIRMATIONS_MAX),
    BeforeValidator(int_between(1, PRUNE_CONFIRMATIONS_MAX)),
]
StatusCode = Annotated[
    int,
    Field(strict=True, ge=STATUS_MIN, le=STATUS_MAX),
    BeforeValidator(int_between(STATUS_MIN, STATUS_MAX)),
]
StatusCodes = Annotated[list[StatusCode], BeforeValidator(status_list)]
MaxPages = Annotated[
    int, Field(strict=True, ge=1, le=MAX_PAGES_MAX), BeforeValidator(int_between(1, MAX_PAGES_MAX))
]
Limit = Annotated[
    int, Field(strict=True, ge=1, le=LIMIT_MAX), BeforeValidator(int_between(1, LIMIT_MAX))
]
Start = Annotated[
    int, Field(strict=True, ge=0, le=START_MAX), BeforeValidator(int_between(0, START_MAX))
]
Flag = Annotated[bool, Field(strict=True), BeforeValidator(_flag)]
"""``true`` or ``false``, nothing else."""
TimeoutSeconds = Annotated[float, Field(gt=0, le=TIMEOUT_MAX), BeforeValidator(_timeout)]
Name = Annotated[str, BeforeValidator(_name), pattern_of(NAME_PATTERN)]
CronExpression = Annotated[
    str | None,
    BeforeValidator(_cron),
    WithJsonSchema({"anyOf": [{"type": "string", "pattern": CRON_PATTERN}, {"type": "null"}]}),
]


def _escape(text: str) -> str:
    """``text`` as a literal in a regular expression valid in both Python and ECMA-262 (which
    JSON Schema uses, and which refuses needless escapes such as ``\\-``)."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


TimeZoneName = Annotated[
    str | None,
    BeforeValidator(_timezone),
    # Exactly the known names, as one anchored alternation rather than an enum: client
    # generators turn an enum into identifiers, and `Etc/GMT+1` / `Etc/GMT-1` collide there.
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "string",
                    "pattern": "^(?:" + "|".join(_escape(z) for z in time_zones()) + ")$",
                    "examples": ["Europe/Berlin"],
                },
                {"type": "null"},
            ]
        }
    ),
]
HttpUrl = Annotated[str, BeforeValidator(_url), pattern_of(URL_PATTERN)]
FieldPath = Annotated[str, BeforeValidator(_path), pattern_of(PATH_PATTERN)]
NonEmptyText = Annotated[str, Field(min_length=1), BeforeValidator(_non_empty)]
HashFields = Annotated[
    Annotated[list[FieldPath], Field(min_length=1, max_length=HASH_FIELDS_MAX)] | None,
    BeforeValidator(_hash_fields),
]
"""A connector's ``hash_fields``: null, or 1 to 100 paths."""
HeaderName = Annotated[str, BeforeValidator(_header_name), pattern_of(HEADER_NAME_PATTERN)]
HeaderValue = Annotated[str, pattern_of(ref_pattern("\\r\\n"))]
Headers = Annotated[dict[HeaderName, HeaderValue], BeforeValidator(_headers)]
"""Request headers: token names (RFC 9110), one-line values that may hold references."""
RefText = Annotated[str, pattern_of(ref_pattern())]
ParamValue = RefText | bool | int | float
Params = Annotated[dict[str, ParamValue], BeforeValidator(_params)]
"""Query parameters: text (references allowed), numbers, booleans (sent as true/false)."""


# --- tagged unions ------------------------------------------------------------------------


def tagged_union(
    members: Mapping[str, Any],
    *,
    what: str,
    default: str | None = None,
    passthrough: Collection[str] = (),
    unknown: str = MSG_UNKNOWN,
) -> Any:
    """A union of objects told apart by their ``type`` key: ``members`` maps each type to
    its model. ``default`` is the type of an object without one (else ``type`` is
    required); a ``passthrough`` type accepts any object (its model only describes it).

    Errors name paths without pydantic's tag (``source.url``, not ``source.http.url``); an
    unknown type is ``"Unknown <what> type 'x'; known: a, b"`` at ``<path>.type``; an unknown
    key is ``unknown`` (``{type}`` is replaced by the type).
    """
    known = ", ".join(sorted(members)) or "none"

    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(value, Mapping):
            fail(MSG_NOT_OBJECT)
        name = value.get("type", default)
        if name is None and default is None:
            fail_at([(("type",), MSG_REQUIRED)], value)
        if not isinstance(name, str):
            fail_at([(("type",), MSG_STRING)], value)
        if name not in members:
            fail_at([(("type",), f"Unknown {what} type {name!r}; known: {known}")], value)
        data = dict(value)
        data.setdefault("type", name)
        if name in passthrough:
            return data
        try:
            return handler(data)
        except PydanticError as exc:
            raise _untagged(exc, name, unknown.replace("{type}", repr(name))) from None

    def tag(value: Any) -> str | None:
        return value.get("type", default) if isinstance(value, Mapping) else None

    choices = [Annotated[model, Tag(name)] for name, model in members.items()]
    if not choices:
        return Annotated[dict[str, Any], WrapValidator(check), WithJsonSchema({"not": {}})]
    if len(choices) == 1:
        return Annotated[choices[0], WrapValidator(check)]
    union: Any = Union[tuple(choices)]  # noqa: UP007 (built from a runtime list)
    return Annotated[union, Discriminator(tag), WrapValidator(check)]


def _untagged(exc: PydanticError, tag: str, unknown: str) -> PydanticError:
    """``exc`` with the union's tag dropped from each location, messages made final."""
    details: list[InitErrorDetails] = []
    for error in exc.errors():
        loc = error["loc"][1:] if error["loc"][:1] == (tag,) else error["loc"]
        unknown_here = error["type"] == "extra_forbidden" and len(loc) == 1
        message = unknown if unknown_here else message_of(error)
        details.append(InitErrorDetails(type=syncd_error(message), loc=loc, input=error["input"]))
    return PydanticError.from_exception_data("syncd", details)
