"""A local server following Jira Cloud's documented issue search (REST API v3).

Usage::

    async with JiraServer(records=237) as api:
        url = f"{api.url}/rest/api/3/search"  # HTTP Basic: api.email, api.api_token
        # ?jql=project = PROJ AND updated >= "2024/01/01 10:00" ORDER BY updated ASC

Written from Atlassian's reference pages:

- https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issue-search/ (read
  through its generated models, e.g.
  https://mrrefactoring.github.io/jira.js/interfaces/Version3Models.SearchResults.html) —
  ``GET`` (and ``POST``, same parameters in a JSON body) ``/rest/api/3/search`` with
  ``jql``, ``startAt`` (0-based), ``maxResults`` (default 50), ``fields``; answers
  ``{"expand", "startAt", "maxResults", "total", "issues"}``; 400 when the JQL is invalid.
- https://confluence.atlassian.com/display/JIRAKB/Run+JQL+search+query+using+Jira+Cloud+REST+API
  and https://docs.adaptavist.com/sr4jc/latest/release-notes/breaking-changes/atlassian-rest-api-search-endpoints-deprecation
  — the replacement ``GET /rest/api/3/search/jql``: ``nextPageToken`` instead of
  ``startAt``, ``isLast``, only issue ids unless ``fields`` asks for more; it refuses
  unbounded JQL.
- https://confluence.atlassian.com/jirakb/changing-maxresults-parameter-for-jira-rest-api-779160706.html
  — a ``maxResults`` above the endpoint's limit is overridden; the limit is the
  ``maxResults`` of the answer. Here the limit is ``max_results`` (50) whatever is asked.
- https://support.atlassian.com/jira/kb/how-to-handle-http-400-bad-request-errors-on-jira-search-rest-api-endpoint
  — invalid JQL is a 400 whose body is ``{"errorMessages": [...], "errors": {}}``; a
  project the caller cannot see is "The value 'X' does not exist for the field 'project'."
- https://confluence.atlassian.com/spaces/JIRA052/pages/314448708/__JQL+Date+Time+Formats
  — date literals ``"yyyy/MM/dd HH:mm"``, ``"yyyy-MM-dd HH:mm"``, ``"yyyy/MM/dd"``,
  ``"yyyy-MM-dd"``: to the minute, in the user's time zone (UTC here).
- https://developer.atlassian.com/cloud/jira/platform/jira-rest-api-basic-authentication —
  Basic auth with the account email and an API token; without logging in one accesses
  Jira anonymously (here the anonymous user cannot browse the project).
- https://developer.atlassian.com/changelog/#CHANGE-2046 — ``/rest/api/3/search`` is
  removed from Jira Cloud; ``search_removed=True`` answers it with that 410.

JQL: only ``[project = KEY] [AND updated|created <op> "date"]... [ORDER BY field
[ASC|DESC], ...]`` is parsed (``<op>``: ``>=``, ``>``, ``<=``, ``<``, ``=``; order fields
``updated``, ``created``, ``key``, ``id``); anything else is answered as Jira answers JQL
it cannot parse. Without ``ORDER BY`` issues come in key order (Jira does not document a
default). Left out: other JQL, ``expand``, ``properties``, changelogs, the approximate
count endpoint, ``reconcileIssues`` and the eventual consistency of ``/search/jql`` (here
it sees every change at once; a ``nextPageToken`` continues only the JQL that issued it),
rate limiting.

Tests can make requests fail (:meth:`JiraServer.fail_next`, a stand-in for an outage):
answered with Jira's ``{"errorMessages", "errors"}`` shape.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from tests.integration.loopback import LoopbackServer
from tests.integration.realapis.faults import Faults

__all__ = ["JiraServer", "JqlError", "RecordedRequest", "parse_jql"]

BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
_REMOVED = (
    "The requested API has been removed. Please migrate to the /rest/api/3/search/jql API."
    " A full migration guideline is available at"
    " https://developer.atlassian.com/changelog/#CHANGE-2046"
)
_TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<op>>=|<=|!=|=|>|<|~)"""
    r"""|(?P<punct>[(),])|(?P<word>[^\s=<>!~(),"']+))"""
)
_DATE_FORMATS = ("%Y/%m/%d %H:%M", "%Y-%m-%d %H:%M", "%Y/%m/%d", "%Y-%m-%d")
_ORDER_FIELDS = ("updated", "created", "key", "id")
_WORD_OPS = {"in", "not", "is", "was", "changed"}


def jira_time(moment: datetime) -> str:
    """Jira's timestamp form, e.g. ``2024-01-01T00:05:17.000+0000``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}+0000"
    )


class JqlError(ValueError):
    """JQL this fixture cannot run; ``str()`` is the Jira-style error message."""


@dataclass(frozen=True)
class Query:
    """A parsed JQL query."""

    project: str | None
    conditions: tuple[tuple[str, str, datetime], ...]  # (field, operator, instant)
    order: tuple[tuple[str, bool], ...]  # (field, descending)


def parse_jql(jql: str) -> Query:
    """Parse the JQL subset described in the module doc (raises :class:`JqlError`)."""
    tokens: list[tuple[str, str]] = []
    position = 0
    text = jql.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise JqlError(
                f"Error in the JQL Query: The character '{text[position]}' is a"
                f" reserved JQL character. (line 1, character {position + 1})"
            )
        kind = match.lastgroup or "word"
        tokens.append((kind, match.group(kind)))
        position = match.end()
    at = 0

    def peek(offset: int = 0) -> tuple[str, str] | None:
        return tokens[at + offset] if at + offset < len(tokens) else None

    def unexpected(what: str) -> JqlError:
        seen = peek()
        got = "the end of the query" if seen is None else f"'{seen[1]}'"
        return JqlError(f"Error in the JQL Query: Expecting {what} but got {got}.")

    project: str | None = None
    conditions: list[tuple[str, str, datetime]] = []
    order: list[tuple[str, bool]] = []
    clause_expected = bool(tokens) and not _is_word(peek(), "order")
    while clause_expected:
        name = peek()
        if name is None or name[0] not in ("word", "string"):
            raise unexpected("a field name")
        field_name = _unquote(name[1]).lower()
        at += 1
        operator = peek()
        if operator is not None and operator[0] == "word" and operator[1].lower() in _WORD_OPS:
            raise JqlError(
                f"Error in the JQL Query: the operator '{operator[1]}' is JQL this fixture does"
                " not parse."
            )
        if operator is None or operator[0] != "op":
            raise unexpected("an operator")
        at += 1
        value = peek()
        if value is None or value[0] not in ("word", "string"):
            raise unexpected("a value")
        at += 1
        literal = _unquote(value[1])
        if field_name == "project":
            if operator[1] != "=":
                raise JqlError(
                    f"Error in the JQL Query: this fixture supports only"
                    f" 'project = KEY', not 'project {operator[1]}'."
                )
            project = literal
        elif field_name in ("updated", "created"):
            if operator[1] not in (">=", ">", "<=", "<", "="):
                raise JqlError(
                    f"The operator '{operator[1]}' is not supported by the '{field_name}' field."
                )
            conditions.append((field_name, operator[1], _jql_date(literal, field_name)))
        else:
            # Real Jira knows many more fields; answering "does not exist" would mislead.
            raise JqlError(
                f"Error in the JQL Query: clauses on '{field_name}' are JQL this fixture does"
                " not parse (it reads project, updated and created)."
            )
        if _is_word(peek(), "and"):
            at += 1
            continue
        clause_expected = False
    if _is_word(peek(), "or") or _is_word(peek(), "not") or peek() == ("punct", "("):
        raise JqlError(
            f"Error in the JQL Query: '{(peek() or ('', ''))[1]}' is JQL this fixture does not"
            " parse (it reads AND-ed clauses only)."
        )
    if peek() is not None:
        if not (_is_word(peek(), "order") and _is_word(peek(1), "by")):
            raise unexpected("either 'OR' or 'AND'" if conditions or project else "a clause")
        at += 2
        while True:
            name = peek()
            if name is None or name[0] not in ("word", "string"):
                raise unexpected("a field name")
            order_field = _unquote(name[1]).lower()
            if order_field not in _ORDER_FIELDS:
                raise JqlError(
                    f"Error in the JQL Query: this fixture sorts by {', '.join(_ORDER_FIELDS)}"
                    f" only, not '{order_field}'."
                )
            at += 1
            descending = False
            if _is_word(peek(), "asc") or _is_word(peek(), "desc"):
                descending = (peek() or ("", ""))[1].lower() == "desc"
                at += 1
            order.append((order_field, descending))
            if peek() == ("punct", ","):
                at += 1
                continue
            break
        if peek() is not None:
            raise unexpected("',' or the end of the query")
    return Query(project, tuple(conditions), tuple(order))


def _is_word(token: tuple[str, str] | None, word: str) -> bool:
    return token is not None and token[0] == "word" and token[1].lower() == word


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def _jql_date(literal: str, field_name: str) -> datetime:
    if re.fullmatch(r"[-+]?\d+[wdhm]?(\s+[-+]?\d+[wdhm])*", literal.strip()):
        raise JqlError(
            f"Error in the JQL Query: the relative date '{literal}' is JQL this fixture does"
            " not evaluate."
        )
    for pattern in _DATE_FORMATS:
        try:
            return datetime.strptime(literal, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise JqlError(
        f"Date value '{literal}' for field '{field_name}' is invalid. Valid formats include:"
        " 'yyyy/MM/dd HH:mm', 'yyyy-MM-dd HH:mm', 'yyyy/MM/dd', 'yyyy-MM-dd', or a period"
        " format e.g. '-5d', '4w 2d'."
    )


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (``body``: the decoded JSON of a POST)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


class _Refused(Exception):
    def __init__(self, status: int, *messages: str) -> None:
        super().__init__(*messages)
        self.status, self.messages = status, list(messages)


class JiraServer(LoopbackServer):
    """One Jira Cloud site with one project (see the module doc).

    ``records`` issues ``KEY-1``... are generated: issue ``i`` (0-based) created ``i``
    minutes after 2024-01-01 plus a few seconds, updated when created. :meth:`add` and
    :meth:`update` change them between requests (updates move ``updated`` forward).
    """

    def __init__(
        self,
        records: int = 0,
        *,
        project: str = "PROJ",
        email: str = "user@example.com",
        api_token: str = "fixture-api-token",
        max_results: int = 50,
        search_removed: bool = False,
    ) -> None:
        self.project = project
        self.email = email
        self.api_token = api_token
        self.max_results = max_results
        self.search_removed = search_removed
        self.requests: list[RecordedRequest] = []
        self._issues: list[dict[str, Any]] = []
        self._clock = BASE_TIME - timedelta(minutes=1)
        self._tokens: dict[str, tuple[str, int]] = {}  # nextPageToken -> (jql, offset)
        self._faults = Faults()
        self.add(records)

    # --- lifecycle --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/rest/api/3/search", self._search)
        app.router.add_post("/rest/api/3/search", self._search)
        app.router.add_get("/rest/api/3/search/jql", self._search_jql)

    def basic_auth(self) -> str:
        """The ``Authorization`` header value for :attr:`email` and :attr:`api_token`."""
        pair = f"{self.email}:{self.api_token}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    # --- content ----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every issue, in key order, with every field; copies."""
        return [self._shown(i, None) for i in self._issues]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Create ``count`` issues, each a minute (and a few seconds) after the last."""
        made = []
        for _ in range(count):
            number = len(self._issues) + 1
            moment = BASE_TIME + timedelta(minutes=number - 1, seconds=(number * 7) % 60)
            if moment <= self._clock:  # created after the latest update, not in the past
                moment = self._clock + timedelta(minutes=1, seconds=7)
            self._clock = moment
            issue_id = str(10000 + number)
            made.append(
                {
                    "id": issue_id,
                    "key": f"{self.project}-{number}",
                    "fields": {
                        "summary": f"Issue {number}",
                        "status": {"name": "To Do", "statusCategory": {"key": "new"}},
                        "issuetype": {"name": "Task"},
                        "project": {"key": self.project, "name": "Project"},
                        "created": self._clock,
                        "updated": self._clock,
                    },
                }
            )
            self._issues.append(made[-1])
        return [self._shown(i, None) for i in made]

    def update(self, key: str, **fields: Any) -> dict[str, Any]:
        """Change fields of issue ``key``; ``updated`` becomes a minute and a few seconds
        after the latest time so far."""
        issue = next((i for i in self._issues if i["key"] == key), None)
        if issue is None:
            raise KeyError(key)
        latest = max(i["fields"]["updated"] for i in self._issues)
        self._clock = max(self._clock, latest) + timedelta(minutes=1, seconds=13)
        issue["fields"].update(fields)
        issue["fields"]["updated"] = self._clock
        return self._shown(issue, None)

    def fail_next(self, status: int = 500, times: int = 1, *, after: int = 0) -> None:
        """A test hook, no part of the API: answer ``times`` requests with ``status`` and
        Jira's error shape, after serving the next ``after`` (see :mod:`.faults`)."""
        self._faults.arm(status, times, after=after)

    def _shown(self, issue: Mapping[str, Any], wanted: set[str] | None) -> dict[str, Any]:
        fields = {
            name: jira_time(value) if isinstance(value, datetime) else _copy(value)
            for name, value in issue["fields"].items()
            if wanted is None or name in wanted
        }
        shown: dict[str, Any] = {
            "expand": "operations,versionedRepresentations,editmeta,changelog,renderedFields",
            "id": issue["id"],
            "self": f"{self.url}/rest/api/3/issue/{issue['id']}",
            "key": issue["key"],
            "fields": fields,
        }
        return shown

    # --- handlers ---------------------------------------------------------------------

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body: Any = None
        if request.method == "POST":
            try:
                body = await request.json()
            except ValueError:
                body = None
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers), body
            )
        )
        if (status := self._faults.take()) is not None:
            raise _Refused(status, "Internal server error (scripted).")
        if request.method == "POST":
            return body if isinstance(body, dict) else {}
        return dict(request.query)

    async def _search(self, request: web.Request) -> web.StreamResponse:
        try:
            params = await self._record(request)
            if self.search_removed:
                raise _Refused(410, _REMOVED)
            anonymous = self._authenticate(request)
            start = _number(params.get("startAt", 0), "startAt")
            asked = _number(params.get("maxResults", 50), "maxResults")
            issues = self._matching(str(params.get("jql") or ""), anonymous, bounded=False)
        except _Refused as refused:
            return _error(refused)
        size = max(0, min(asked, self.max_results))
        wanted = _fields(params.get("fields"), default=None)
        page = issues[start : start + size] if start >= 0 else []
        return web.json_response(
            {
                "expand": "schema,names",
                "startAt": start,
                "maxResults": size,
                "total": len(issues),
                "issues": [self._shown(i, wanted) for i in page],
            }
        )

    async def _search_jql(self, request: web.Request) -> web.StreamResponse:
        try:
            params = await self._record(request)
            anonymous = self._authenticate(request)
            asked = _number(params.get("maxResults", 50), "maxResults")
            jql = str(params.get("jql") or "")
            issues = self._matching(jql, anonymous, bounded=True)
            token = params.get("nextPageToken")
            start = 0
            if token:
                # A token continues the query it came from, and only that one.
                issued = self._tokens.get(str(token))
                if issued is None or issued[0] != jql:
                    raise _Refused(400, f"The provided next page token is invalid: {token}")
                start = issued[1]
        except _Refused as refused:
            return _error(refused)
        wanted = _fields(params.get("fields"), default={"id"})
        # The endpoint pages widest when only id/key are asked for (up to 5000 issues).
        cap = 5000 if wanted is not None and wanted <= {"id", "key"} else self.max_results
        size = max(1, min(asked, cap))
        page = issues[start : start + size]
        answer: dict[str, Any] = {"issues": [self._slim(i, wanted) for i in page]}
        if start + size < len(issues):
            following = hashlib.sha256(f"{id(self)}:{jql}:{start + size}".encode()).hexdigest()
            self._tokens[following] = (jql, start + size)
            answer["nextPageToken"] = following
        answer["isLast"] = "nextPageToken" not in answer
        return web.json_response(answer)

    def _slim(self, issue: Mapping[str, Any], wanted: set[str] | None) -> dict[str, Any]:
        shown = self._shown(issue, None if wanted is None else wanted - {"id", "key"})
        if wanted is not None and wanted <= {"id", "key"}:
            return {name: shown[name] for name in ("id", "key") if name in wanted}
        return shown

    def _authenticate(self, request: web.Request) -> bool:
        """Whether the request is anonymous (no credentials); refuses bad ones."""
        header = request.headers.get("Authorization")
        if header is None:
            return True
        if header != self.basic_auth():
            raise _Refused(401, "Client must be authenticated to access this resource.")
        return False

    def _matching(self, jql: str, anonymous: bool, *, bounded: bool) -> list[dict[str, Any]]:
        try:
            query = parse_jql(jql)
        except JqlError as error:
            raise _Refused(400, str(error)) from None
        if query.project is not None and (anonymous or query.project != self.project):
            raise _Refused(
                400, f"The value '{query.project}' does not exist for the field 'project'."
            )
        if bounded and query.project is None and not query.conditions:
            raise _Refused(
                400,
                "Unbounded JQL queries are not allowed here. Please add a search restriction"
                " to your query.",
            )
        if anonymous:
            return []  # the anonymous user can browse no project
        found = [i for i in self._issues if _meets(i, query)]
        for name, descending in reversed(query.order):
            found.sort(key=_order_key(name), reverse=descending)
        return found


def _meets(issue: Mapping[str, Any], query: Query) -> bool:
    for name, operator, instant in query.conditions:
        value: datetime = issue["fields"][name]
        ok = {
            ">=": value >= instant,
            ">": value > instant,
            "<=": value <= instant,
            "<": value < instant,
            "=": value == instant,
        }[operator]
        if not ok:
            return False
    return True


def _order_key(name: str) -> Callable[[Mapping[str, Any]], Any]:
    if name in ("updated", "created"):
        return lambda issue: issue["fields"][name]
    return lambda issue: int(issue["id"])  # key order is number order in one project


def _number(raw: Any, name: str) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise _Refused(400, f"The '{name}' parameter must be an integer.") from None


def _fields(raw: Any, *, default: set[str] | None) -> set[str] | None:
    """The fields asked for (``None``: all of them)."""
    if raw is None or raw == "":
        return default
    names = raw if isinstance(raw, list) else str(raw).split(",")
    wanted = {str(n).strip() for n in names if str(n).strip()}
    if wanted & {"*all", "*navigable"}:
        return None
    return wanted


def _error(refused: _Refused) -> web.Response:
    return web.json_response(
        {"errorMessages": refused.messages, "errors": {}}, status=refused.status
    )


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
