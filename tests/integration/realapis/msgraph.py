"""A local server following Microsoft Graph's documented paging of ``GET /v1.0/users``.

Usage::

    async with GraphServer(records=237) as api:
        url = f"{api.url}/v1.0/users?$top=100"  # Authorization: Bearer <api.token>
        # then GET each "@odata.nextLink" exactly as given, until there is none

Written from these pages:

- https://learn.microsoft.com/en-us/graph/paging — server-side paging: the
  ``@odata.nextLink`` is a URL to the next page, carrying a ``$skiptoken`` and all the other
  query parameters of the original request; send it as it is (never extract or rebuild the
  token); no ``@odata.nextLink`` on the last page; ``GET /users`` supports ``$top`` but not
  ``$skip``; APIs differ in what they do with a ``$top`` above their maximum.
- https://learn.microsoft.com/en-us/graph/api/user-list (read through the pages below and
  its quotes in answers there) — ``GET /users`` with
  ``Authorization: Bearer {token}``, ``$select``, its default properties
  (``businessPhones``, ``displayName``, ``givenName``, ``jobTitle``, ``mail``,
  ``mobilePhone``, ``officeLocation``, ``preferredLanguage``, ``surname``,
  ``userPrincipalName``, ``id``); default and maximum page sizes of 100 and 999 users, as
  https://graph.microsoft.io/en-us/docs/concepts/paging states and
  https://learn.microsoft.com/en-us/answers/questions/120381 confirms.
- https://learn.microsoft.com/en-us/graph/delta-query-users and
  https://learn.microsoft.com/en-us/graph/delta-query-overview — ``GET /users/delta``:
  pages linked by ``@odata.nextLink`` (``$skiptoken``), the last page carrying
  ``@odata.deltaLink`` (``$deltatoken``), which later answers only what changed; removed
  users as ``{"id", "@removed": {"reason": "changed"}}``; query parameters of the first
  request carried by both links.
- https://learn.microsoft.com/en-us/answers/questions/307905/paging-in-microsoft-graph-api —
  Graph's error shape, ``{"error": {"code", "message", "innerError": {"date",
  "request-id", "client-request-id"}}}``.

Behaviour reported rather than written on those pages, kept as Graph answers it:
``$top`` outside 1..999 on ``/users`` is a 400 ``Request_UnsupportedQuery`` ("Invalid page
size specified: '1000'. Must be between 1 and 999 inclusive.", see
https://learn.microsoft.com/en-us/answers/questions/1129204), not clamped; a skip token this
server did not issue is answered like an expired one, 400 ``Directory_ExpiredPageToken``
(https://learn.microsoft.com/en-us/answers/questions/2337800); a missing token is a 401
``InvalidAuthenticationToken`` ("Access token is empty."). The page size of a nextLink is
the one its first request set, whatever ``$top`` the follow-up carries.

Left out: ``$filter``, ``$orderby``, ``$search``, ``$count``, ``$expand`` (answered 400
``Request_UnsupportedQuery`` saying so), ``ConsistencyLevel``, ``/me/messages``,
throttling (429), paging backwards. Delta pages hold ``delta_page_size`` users.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.integration.loopback import LoopbackServer

__all__ = ["GraphServer", "RecordedRequest", "user_id"]

BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
DEFAULT_PROPERTIES = (
    "businessPhones",
    "displayName",
    "givenName",
    "jobTitle",
    "mail",
    "mobilePhone",
    "officeLocation",
    "preferredLanguage",
    "surname",
    "userPrincipalName",
    "id",
)
PROPERTIES = (*DEFAULT_PROPERTIES, "accountEnabled", "createdDateTime")
_GIVEN = ("Adele", "Alex", "Diego", "Grady", "Isaiah", "Johanna", "Lee", "Megan", "Nestor")
_SURNAMES = ("Vance", "Wilber", "Siciliani", "Archie", "Langer", "Lorenz", "Gu", "Bowen")
_UNMODELLED = ("$filter", "$orderby", "$search", "$count", "$expand", "$format")
_CONTENT_TYPE = (
    "application/json;odata.metadata=minimal;odata.streaming=true;IEEE754Compatible=false;"
    "charset=utf-8"
)


def user_id(index: int) -> str:
    """The object id (a GUID) of generated user ``index``."""
    digest = hashlib.sha256(f"graph-user-{index}".encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received; ``path_qs`` is the path and query as sent."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None
    path_qs: str = ""


@dataclass(frozen=True)
class _Token:
    kind: str  # "list" or "delta"
    offset: int
    top: int
    select: str | None
    since: int  # delta: changes after this version...
    upto: int  # ...up to this one
    param: str = "$skiptoken"  # the query parameter that carries it


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class GraphServer(LoopbackServer):
    """``GET /v1.0/users`` and ``GET /v1.0/users/delta`` of one tenant (see the module doc).

    ``records`` users are generated. :meth:`add`, :meth:`update` and :meth:`remove` change
    the directory between requests; delta links see those changes.
    """

    def __init__(
        self,
        records: int = 0,
        *,
        token: str = "fixture-access-token",
        delta_page_size: int = 100,
    ) -> None:
        self.token = token
        self.delta_page_size = delta_page_size
        self.requests: list[RecordedRequest] = []
        self.next_links: list[str] = []  # every @odata.nextLink / deltaLink handed out
        self._users: list[dict[str, Any]] = []  # creation order, removed ones included
        self._versions: dict[str, int] = {}  # id -> version of its last change
        self._removed: set[str] = set()
        self._version = 0
        self._tokens: dict[str, _Token] = {}
        self._request_ids = itertools.count(1)
        self.add(records)

    # --- lifecycle --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1.0/users", self._list)
        app.router.add_get("/v1.0/users/delta", self._delta)

    #: Base URL, e.g. ``http://127.0.0.1:41234`` (Graph's is https://graph.microsoft.com).
    url: str

    # --- content ----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every user listed now, in listing order, with every modelled property; copies."""
        return [json.loads(json.dumps(u)) for u in self._users if u["id"] not in self._removed]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Create ``count`` users."""
        made = []
        for _ in range(count):
            index = len(self._users)
            given = _GIVEN[index % len(_GIVEN)]
            surname = _SURNAMES[(index // len(_GIVEN)) % len(_SURNAMES)]
            address = f"{given.lower()}.{surname.lower()}{index}@contoso.example"
            user: dict[str, Any] = {
                "businessPhones": [],
                "displayName": f"{given} {surname}",
                "givenName": given,
                "jobTitle": None,
                "mail": address,
                "mobilePhone": None,
                "officeLocation": None,
                "preferredLanguage": "en-US",
                "surname": surname,
                "userPrincipalName": address,
                "id": user_id(index),
                "accountEnabled": True,
                "createdDateTime": (BASE_TIME + timedelta(minutes=index)).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                ),
            }
            self._users.append(user)
            self._touch(user["id"])
            made.append(dict(user))
        return made

    def update(self, user: str, **properties: Any) -> dict[str, Any]:
        """Change properties of user ``user`` (its id)."""
        found = self._find(user)
        unknown = set(properties) - set(PROPERTIES) | ({"id"} & set(properties))
        if unknown:
            raise KeyError(f"not modelled or not writable: {sorted(unknown)}")
        found.update(properties)
        self._touch(user)
        return dict(found)

    def remove(self, user: str) -> None:
        """Delete user ``user``: no longer listed; delta links report it ``@removed``."""
        self._find(user)
        self._removed.add(user)
        self._touch(user)

    def _find(self, user: str) -> dict[str, Any]:
        for u in self._users:
            if u["id"] == user and user not in self._removed:
                return u
        raise KeyError(user)

    def _touch(self, user: str) -> None:
        self._version += 1
        self._versions[user] = self._version

    # --- handlers ---------------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.StreamResponse:
        return self._answer(request, "list")

    async def _delta(self, request: web.Request) -> web.StreamResponse:
        return self._answer(request, "delta")

    def _answer(self, request: web.Request, kind: str) -> web.StreamResponse:
        self.requests.append(
            RecordedRequest(
                request.method,
                request.path,
                dict(request.query),
                dict(request.headers),
                None,
                request.raw_path,
            )
        )
        request_id = str(uuid.UUID(int=next(self._request_ids)))
        client_id = request.headers.get("client-request-id", request_id)
        headers = {
            "Content-Type": _CONTENT_TYPE,
            "OData-Version": "4.0",
            "request-id": request_id,
            "client-request-id": client_id,
        }
        try:
            self._authenticate(request.headers.get("Authorization", ""))
            body = self._page(request, kind)
        except _Refused as refused:
            error = {
                "error": {
                    "code": refused.code,
                    "message": refused.message,
                    "innerError": {
                        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
                        "request-id": request_id,
                        "client-request-id": client_id,
                    },
                }
            }
            return web.Response(text=json.dumps(error), status=refused.status, headers=headers)
        return web.Response(text=json.dumps(body), headers=headers)

    def _authenticate(self, header: str) -> None:
        scheme, _, token = header.partition(" ")
        if not token.strip():
            raise _Refused(401, "InvalidAuthenticationToken", "Access token is empty.")
        if scheme.lower() != "bearer" or token.strip() != self.token:
            raise _Refused(401, "InvalidAuthenticationToken", "Access token validation failure.")

    def _page(self, request: web.Request, kind: str) -> dict[str, Any]:
        query = request.query
        for option in _UNMODELLED:
            if option in query:
                raise _Refused(
                    400,
                    "Request_UnsupportedQuery",
                    f"This fixture does not model the {option} query option.",
                )
        if "$skip" in query:
            raise _Refused(400, "Request_BadRequest", "'$skip' is not supported by the service.")
        token = self._token(query, kind)
        select = token.select
        properties = _properties(select)
        if kind == "list":
            listed = [u for u in self._users if u["id"] not in self._removed]
            chunk = listed[token.offset : token.offset + token.top]
            values = [{p: _copy(u.get(p)) for p in properties} for u in chunk]
            more = token.offset + token.top < len(listed)
        else:
            changed = [
                u
                for u in self._users
                if token.since < self._versions[u["id"]] <= token.upto
                and (token.since > 0 or u["id"] not in self._removed)
            ]
            chunk = changed[token.offset : token.offset + token.top]
            values = [
                {"id": u["id"], "@removed": {"reason": "changed"}}
                if u["id"] in self._removed
                else {p: _copy(u.get(p)) for p in properties}
                for u in chunk
            ]
            more = token.offset + token.top < len(changed)
        context = f"{self.url}/v1.0/$metadata#users"
        if select:
            context += f"({select})"
        body: dict[str, Any] = {"@odata.context": context}
        carried = [(k, v) for k, v in query.items() if k not in ("$skiptoken", "$deltatoken")]
        if more:
            following = _Token(
                kind, token.offset + token.top, token.top, select, token.since, token.upto
            )
            link = self._link(request.path, carried, following)
            body["@odata.nextLink"] = link
        elif kind == "delta":
            fresh = _Token("delta", 0, token.top, select, token.upto, token.upto, "$deltatoken")
            body["@odata.deltaLink"] = self._link(request.path, carried, fresh)
        body["value"] = values
        return body

    def _token(self, query: Mapping[str, str], kind: str) -> _Token:
        for name in ("$skiptoken", "$deltatoken"):
            if name in query:
                token = self._tokens.get(query[name])
                if token is None or token.kind != kind or token.param != name:
                    raise _Refused(
                        400,
                        "Directory_ExpiredPageToken",
                        "The specified page token value has expired and can no longer be"
                        " included in your request.",
                    )
                if name == "$deltatoken":
                    # A delta round starts now: what changed since the link was issued.
                    return _Token("delta", 0, token.top, token.select, token.since, self._version)
                return token
        select = query.get("$select")
        _properties(select)  # refuse unknown properties on the first request
        if kind == "delta":
            return _Token("delta", 0, self.delta_page_size, select, 0, self._version)
        raw = query.get("$top", "100")
        try:
            top = int(raw)
        except ValueError:
            top = 0
        if not 1 <= top <= 999:
            raise _Refused(
                400,
                "Request_UnsupportedQuery",
                f"Invalid page size specified: '{raw}'. Must be between 1 and 999 inclusive.",
            )
        return _Token("list", 0, top, select, 0, 0)

    def _link(self, path: str, carried: list[tuple[str, str]], token: _Token) -> str:
        key = hashlib.sha256(repr((id(self), token)).encode()).hexdigest().upper()
        value = "RFNwdAIAAQAAA" + key[:48]
        self._tokens[value] = token
        pairs = [*carried, (token.param, value)]
        query = "&".join(f"{quote(k, safe='$')}={quote(v, safe='$,()')}" for k, v in pairs)
        link = f"{self.url}{path}?{query}"
        self.next_links.append(link)
        return link


def _properties(select: str | None) -> tuple[str, ...]:
    if not select:
        return DEFAULT_PROPERTIES
    names = tuple(p.strip() for p in select.split(",") if p.strip())
    for name in names:
        if name not in PROPERTIES:
            raise _Refused(
                400,
                "Request_BadRequest",
                f"Could not find a property named '{name}' on type 'microsoft.graph.user'.",
            )
    return names if "id" in names else (*names, "id")


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value
