"""A local GitHub GraphQL API serving one repository's ``issues`` connection.

Written from GitHub's public documentation, not from what syncd does:

- https://docs.github.com/en/graphql/guides/forming-calls-with-graphql — one endpoint,
  ``POST /graphql`` with a JSON body ``{"query": ..., "variables": {...}}`` and
  ``Authorization: bearer <token>``.
- https://docs.github.com/en/graphql/guides/using-pagination-in-the-graphql-api — ``first``
  or ``last`` on every connection, "between 1 and 100"; ``pageInfo { endCursor startCursor
  hasNextPage hasPreviousPage }``; the next page is asked for with ``after: <endCursor>``.
- https://docs.github.com/en/graphql/overview/rate-limits-and-query-limits-for-the-graphql-api
  — "Values of first and last must be within 1-100" (a validation error, not a clamp).
- https://docs.github.com/en/graphql/reference/objects#repository and
  https://docs.github.com/en/graphql/reference/input-objects#issueorder — ``issues(first,
  after, last, before, orderBy: {field: CREATED_AT|UPDATED_AT|COMMENTS, direction:
  ASC|DESC}, filterBy: {since}, states)``.

Usage::

    async with GitHubGraphQLServer(records=237) as api:
        # POST f"{api.url}/graphql" with headers {"Authorization": f"bearer {api.token}"}
        ...
        api.touch([3, 7])  # issues 3 and 7 are updated: they sort last by UPDATED_AT

Behaviour (errors are GraphQL errors, answered with HTTP 200 as GitHub does):

- ``first``/``last`` over 100: ``{"errors": [{"type": "EXCESSIVE_PAGINATION", ...}]}`` and no
  ``data`` (the wording is GitHub's: "Requesting 101 records on the `issues` connection
  exceeds the `first` limit of 100 records.").
- Neither given: ``MISSING_PAGINATION_BOUNDARIES``.
- A cursor that is not one of ours, or one from another ``orderBy`` field:
  ``{"data": {"repository": {"issues": null}}, "errors": [{"type": "INVALID_CURSOR_ARGUMENTS",
  "message": "`xyz` does not appear to be a valid cursor.", ...}]}``.
- Another repository: ``{"data": {"repository": null}, "errors": [{"type": "NOT_FOUND"}]}``.
- Missing token: HTTP 401 ``{"message": "This endpoint requires you to be authenticated."}``;
  a wrong one: HTTP 401 ``{"message": "Bad credentials"}`` (not GraphQL-shaped, as on GitHub).
- Cursors are positions (sort value and issue number), not offsets: an issue updated after a
  crawl sorts after the saved ``endCursor`` under ``UPDATED_AT ASC``. On an empty page
  ``endCursor`` is ``null``.
- ``x-ratelimit-*`` headers count one point per query.

Limitations — there is no GraphQL parser: the ``issues(...)`` and ``repository(...)``
argument lists are read with a small value reader (``$variables`` are resolved from
``variables`` and the operation's defaults; literals are read too), and the query must
select ``issues`` with ``pageInfo { ... endCursor ... }`` (anything else is answered with a
fixture error). The selection set is not interpreted: every node carries all its fields,
both ``nodes`` and ``edges`` are returned, and aliases are not honoured. ``filterBy``
honours ``since`` only; ``labels`` and mutations are not modelled.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from tests.integration.loopback import LoopbackServer

__all__ = ["GitHubGraphQLServer", "RecordedRequest", "make_issues"]

_BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
MAX_PAGE = 100  # "Values of first and last must be within 1-100."
_ORDER_FIELDS = {"CREATED_AT": "createdAt", "UPDATED_AT": "updatedAt", "COMMENTS": "comments"}
_DOCS = "https://docs.github.com/graphql"


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_id(number: int) -> str:
    # Shaped like GitHub's current global node IDs ("I_kwDO..."): opaque, prefix by type.
    raw = b"\x93\x00\xce\x2a\x1f\x5e\x07\xce" + number.to_bytes(4, "big")
    return "I_kwDO" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def make_issues(
    count: int, *, start: int = 0, owner: str = "octo-org", name: str = "octo-repo"
) -> list[dict[str, Any]]:
    """``count`` issues numbered ``start + 1`` on; ``createdAt`` grows one minute per issue
    and ``updatedAt`` is 30 seconds after it, so both orders agree until :meth:`touch`."""
    issues = []
    for i in range(start, start + count):
        number = i + 1
        created = _BASE_TIME + timedelta(minutes=i)
        issues.append(
            {
                "id": _node_id(number),
                "number": number,
                "title": f"Issue {number}",
                "state": "CLOSED" if number % 4 == 0 else "OPEN",
                "url": f"https://github.com/{owner}/{name}/issues/{number}",
                "createdAt": _iso(created),
                "updatedAt": _iso(created + timedelta(seconds=30)),
                "comments": {"totalCount": number % 3},
            }
        )
    return issues


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (``body``: the parsed JSON, or ``None``)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


class _QueryError(Exception):
    """A GraphQL error to answer with HTTP 200."""

    def __init__(self, error: dict[str, Any], data: dict[str, Any] | None = None) -> None:
        super().__init__(error["message"])
        self.error = error
        self.data = data


# --- a small reader for GraphQL argument values ------------------------------------------

_TOKEN = re.compile(
    r'\s+|,|#[^\n]*|(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)'
    r"|(?P<name>\$?[A-Za-z_]\w*)|(?P<punct>[{}\[\]():])"
)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:  # a character GraphQL would reject; skip it rather than guess
            pos += 1
            continue
        if match.lastgroup is not None:  # whitespace, commas and comments are insignificant
            out.append(match.group())
        pos = match.end()
    return out


class _Reader:
    """Reads ``name: value`` argument lists; ``$var`` values come from ``variables``."""

    def __init__(self, tokens: list[str], variables: Mapping[str, Any]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.variables = variables

    def take(self) -> str:
        if self.pos >= len(self.tokens):
            raise ValueError("unexpected end of query")
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def arguments(self, close: str) -> dict[str, Any]:
        args: dict[str, Any] = {}
        while (token := self.take()) != close:
            if self.take() != ":":
                raise ValueError(f"expected ':' after {token}")
            args[token] = self.value()
        return args

    def value(self) -> Any:
        token = self.take()
        if token == "{":
            return self.arguments("}")
        if token == "[":
            items = []
            while self.tokens[self.pos] != "]":
                items.append(self.value())
            self.pos += 1
            return items
        if token.startswith("$"):
            return self.variables.get(token[1:])
        if token.startswith('"'):
            return json.loads(token)
        if token in ("true", "false"):
            return token == "true"
        if token == "null":
            return None
        if token[0] in "-0123456789":
            return float(token) if any(c in token for c in ".eE") else int(token)
        return token  # an enum value such as UPDATED_AT


def _field_arguments(
    query: str, name: str, variables: Mapping[str, Any], start: int
) -> tuple[dict[str, Any], dict[str, int], int] | None:
    """The arguments of the first ``name`` field at or after ``start`` in ``query``, its
    location and where its name ends; ``None`` when there is no such field."""
    match = re.compile(rf"\b{name}\b\s*(\()?").search(query, start)
    if match is None:
        return None
    line = query.count("\n", 0, match.start()) + 1
    column = match.start() - (query.rfind("\n", 0, match.start()) + 1) + 1
    location = {"line": line, "column": column}
    if match.group(1) is None:
        return {}, location, match.end()
    reader = _Reader(_tokens(query[match.end() :]), variables)
    return reader.arguments(")"), location, match.end()


def _variable_defaults(query: str) -> dict[str, Any]:
    """Default values from the operation's variable definitions (``$first: Int = 50``)."""
    header = re.match(r"\s*(?:query|subscription)\b[^({]*\(", query)
    if header is None:
        return {}
    tokens = _tokens(query[header.end() :])
    reader = _Reader(tokens, {})
    defaults: dict[str, Any] = {}
    while reader.pos < len(tokens) and tokens[reader.pos] != ")":
        variable = reader.take()
        if reader.take() != ":":
            raise ValueError(f"expected ':' after {variable}")
        depth = 0  # the type: a name, or a list type in brackets ("!" is not a token)
        while True:
            token = reader.take()
            depth += {"[": 1, "]": -1}.get(token, 0)
            if depth == 0:
                break
        following = tokens[reader.pos] if reader.pos < len(tokens) else ")"
        if following != ")" and not following.startswith("$"):
            defaults[variable.removeprefix("$")] = reader.value()
    return defaults


# --- the server --------------------------------------------------------------------------


class GitHubGraphQLServer(LoopbackServer):
    """GitHub's GraphQL endpoint for one repository's issues (see module doc)."""

    def __init__(
        self,
        records: int | Sequence[Mapping[str, Any]] = 0,
        *,
        owner: str = "octo-org",
        name: str = "octo-repo",
        token: str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ) -> None:
        self.owner = owner
        self.name = name
        self.token = token
        self.requests: list[RecordedRequest] = []
        self._records: list[dict[str, Any]] = []
        self.set_records(records)
        self._points_used = 0

    # --- lifecycle ---------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/graphql", self._graphql)

    #: Base URL, e.g. ``http://127.0.0.1:41234`` (the endpoint is ``{url}/graphql``).
    url: str

    # --- records -----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every issue served, in number order (copies)."""
        return [dict(r) for r in sorted(self._records, key=lambda r: int(r["number"]))]

    def set_records(self, records: int | Sequence[Mapping[str, Any]]) -> None:
        """Serve ``records`` from now on (an int generates that many with
        :func:`make_issues`)."""
        if isinstance(records, int):
            self._records = make_issues(records, owner=self.owner, name=self.name)
        else:
            self._records = [dict(r) for r in records]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Open ``count`` new issues, created and updated after every existing one."""
        start = max((int(r["number"]) for r in self._records), default=0)
        added = make_issues(count, start=start, owner=self.owner, name=self.name)
        latest = self._latest()
        for offset, issue in enumerate(added, start=1):
            moment = _iso(latest + timedelta(minutes=offset))
            issue["createdAt"] = issue["updatedAt"] = moment
        self._records.extend(added)
        return [dict(r) for r in added]

    def touch(self, numbers: Iterable[int]) -> list[dict[str, Any]]:
        """Update the issues ``numbers``: each gets an ``updatedAt`` one minute after the
        latest one served, in the order given."""
        wanted = list(numbers)
        by_number = {int(r["number"]): r for r in self._records}
        latest = self._latest()
        for offset, number in enumerate(wanted, start=1):
            issue = by_number[number]
            issue["updatedAt"] = _iso(latest + timedelta(minutes=offset))
            issue["title"] = f"{issue['title']} (edited)"
        return [dict(by_number[n]) for n in wanted]

    def _latest(self) -> datetime:
        stamps = [str(r["updatedAt"]) for r in self._records] + [
            str(r["createdAt"]) for r in self._records
        ]
        return datetime.fromisoformat(max(stamps, default=_iso(_BASE_TIME)))

    # --- handler -----------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": str(5000 - self._points_used),
            "x-ratelimit-used": str(self._points_used),
            "x-ratelimit-reset": "1893456000",
            "x-ratelimit-resource": "graphql",
        }

    async def _graphql(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers), body
            )
        )
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() not in ("bearer", "token") or not credential:
            return web.json_response(
                {
                    "message": "This endpoint requires you to be authenticated.",
                    "documentation_url": f"{_DOCS}/guides/forming-calls-with-graphql"
                    "#authenticating-with-graphql",
                },
                status=401,
            )
        if credential.strip() != self.token:
            return web.json_response(
                {"message": "Bad credentials", "documentation_url": _DOCS}, status=401
            )
        if raw and body is None:
            return web.json_response(
                {"message": "Problems parsing JSON", "documentation_url": _DOCS}, status=400
            )
        self._points_used += 1
        headers = self._headers()
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            error = {"message": "A query attribute must be specified and must be a string."}
            return web.json_response({"errors": [error]}, headers=headers)
        variables = body.get("variables") or {}
        if not isinstance(variables, dict):
            error = {"message": "Variables are invalid JSON."}
            return web.json_response({"errors": [error]}, headers=headers)
        try:
            issues = self._issues(body["query"], variables)
        except _QueryError as failed:
            answer: dict[str, Any] = {"errors": [failed.error]}
            if failed.data is not None:
                answer = {"data": failed.data, **answer}
            return web.json_response(answer, headers=headers)
        return web.json_response({"data": {"repository": {"issues": issues}}}, headers=headers)

    def _issues(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        if re.match(r"\s*mutation\b", query):
            raise _QueryError({"message": "This fixture answers queries only."})
        # Fields live inside the first "{": the operation name and variable definitions
        # before it may well be called "issues" too.
        selection = query.find("{")
        try:
            variables = {**_variable_defaults(query), **variables}
            repository = _field_arguments(query, "repository", variables, max(selection, 0))
            issues = None
            if repository is not None and selection >= 0:
                issues = _field_arguments(query, "issues", variables, repository[2])
        except (ValueError, IndexError) as exc:
            raise _QueryError({"message": f"Parse error: {exc}"}) from None
        if repository is None or issues is None or not re.search(r"\bpageInfo\b", query):
            raise _QueryError(
                {
                    "message": "This fixture answers only repository { issues(...) "
                    "{ pageInfo { endCursor ... } ... } } queries."
                }
            )
        if not re.search(r"\bendCursor\b", query):
            raise _QueryError({"message": "This fixture needs pageInfo { endCursor }."})
        repo_args, repo_location, _ = repository
        owner, name = repo_args.get("owner", self.owner), repo_args.get("name", self.name)
        if (str(owner).lower(), str(name).lower()) != (self.owner.lower(), self.name.lower()):
            raise _QueryError(
                {
                    "type": "NOT_FOUND",
                    "path": ["repository"],
                    "locations": [repo_location],
                    "message": f"Could not resolve to a Repository with the name '{owner}/{name}'.",
                },
                data={"repository": None},
            )
        args, location, _ = issues
        return self._connection(args, location)

    def _connection(self, args: Mapping[str, Any], location: dict[str, int]) -> dict[str, Any]:
        path = ["repository", "issues"]

        def error(message: str, kind: str | None = None, *, data: bool = False) -> _QueryError:
            found: dict[str, Any] = {"path": path, "locations": [location], "message": message}
            if kind is not None:
                found = {"type": kind, **found}
            return _QueryError(found, {"repository": {"issues": None}} if data else None)

        first: Any = args.get("first")
        last: Any = args.get("last")
        for arg, value in (("first", first), ("last", last)):
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise error(f"Argument '{arg}' on Field 'issues' has an invalid value.")
            if value > MAX_PAGE:
                raise error(
                    f"Requesting {value} records on the `issues` connection exceeds the "
                    f"`{arg}` limit of {MAX_PAGE} records.",
                    "EXCESSIVE_PAGINATION",
                )
        if first is None and last is None:
            raise error(
                "You must provide a `first` or `last` value to properly paginate the "
                "`issues` connection.",
                "MISSING_PAGINATION_BOUNDARIES",
            )
        if first is not None and last is not None:
            raise error(
                "Passing both `first` and `last` to paginate the `issues` connection is not "
                "supported."
            )

        order = args.get("orderBy") or {}
        order_field = str(order.get("field", "CREATED_AT")) if isinstance(order, dict) else ""
        direction = str(order.get("direction", "ASC")) if isinstance(order, dict) else ""
        if order_field not in _ORDER_FIELDS or direction not in ("ASC", "DESC"):
            raise error(f"Argument 'orderBy' on Field 'issues' has an invalid value ({order}).")
        attribute = _ORDER_FIELDS[order_field]

        def key(issue: Mapping[str, Any]) -> tuple[Any, int]:
            value = issue[attribute]
            sort_value = value["totalCount"] if isinstance(value, dict) else value
            return sort_value, int(issue["number"])

        rows = list(self._records)
        states = args.get("states")
        if states is not None:
            wanted = {states} if isinstance(states, str) else {str(s) for s in states}
            rows = [r for r in rows if r["state"] in wanted]
        filter_by = args.get("filterBy") or {}
        if isinstance(filter_by, dict) and filter_by.get("since") is not None:
            since = _parse_datetime(filter_by["since"])
            if since is None:
                raise error(f"Argument 'since' has an invalid value ({filter_by['since']}).")
            rows = [r for r in rows if _moment(r["updatedAt"]) >= since]
        descending = direction == "DESC"
        full = sorted(rows, key=key, reverse=descending)

        def bound(name: str) -> tuple[Any, int] | None:
            cursor = args.get(name)
            if cursor is None:
                return None
            decoded = _decode_cursor(cursor)
            if decoded is None or decoded[0] != order_field:
                raise error(
                    f"`{cursor}` does not appear to be a valid cursor.",
                    "INVALID_CURSOR_ARGUMENTS",
                    data=True,
                )
            return decoded[1], decoded[2]

        def beyond(row_key: tuple[Any, int], mark: tuple[Any, int]) -> bool:
            return row_key < mark if descending else row_key > mark

        after, before = bound("after"), bound("before")
        low = 0 if after is None else sum(1 for r in full if not beyond(key(r), after))
        high = len(full) if before is None else sum(1 for r in full if beyond(before, key(r)))
        high = max(high, low)
        if first is not None:
            start, end = low, min(high, low + int(first))
        else:
            start, end = max(low, high - int(last)), high
        page = full[start:end]
        cursors = [_encode_cursor(order_field, *key(r)) for r in page]
        return {
            "totalCount": len(full),
            "pageInfo": {
                "hasNextPage": end < len(full),
                "hasPreviousPage": start > 0,
                "startCursor": cursors[0] if cursors else None,
                "endCursor": cursors[-1] if cursors else None,
            },
            "nodes": [dict(r) for r in page],
            "edges": [{"cursor": c, "node": dict(r)} for c, r in zip(cursors, page, strict=True)],
        }


def _parse_datetime(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _moment(value: Any) -> datetime:
    parsed = _parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not an ISO 8601 date-time: {value!r}")
    return parsed


def _encode_cursor(order_field: str, value: Any, number: int) -> str:
    payload = "cursor:v2:" + json.dumps([order_field, value, number], separators=(",", ":"))
    return base64.b64encode(payload.encode()).decode()


def _decode_cursor(cursor: Any) -> tuple[str, Any, int] | None:
    if not isinstance(cursor, str):
        return None
    try:
        payload = base64.b64decode(cursor, validate=True).decode()
        if not payload.startswith("cursor:v2:"):
            return None
        order_field, value, number = json.loads(payload.removeprefix("cursor:v2:"))
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
        return None
    if order_field not in _ORDER_FIELDS or not isinstance(number, int):
        return None
    return str(order_field), value, number
