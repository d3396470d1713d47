"""A local server following GitHub's documented REST contract for listing repository
issues, with its primary and secondary rate limits.

Usage::

    now = [1_700_000_000.0]
    async with GitHubServer(records=237, rate_limit=10, clock=lambda: now[0]) as api:
        url = f"{api.url}/repos/{api.owner}/{api.repo}/issues?state=all&per_page=100"
        # Authorization: Bearer <api.token>; follow the Link header's rel="next"

Written from GitHub's reference pages:

- https://docs.github.com/en/rest/issues/issues#list-repository-issues — ``GET
  /repos/{owner}/{repo}/issues``: ``state`` (``open`` by default, ``closed``, ``all``),
  ``sort`` (``created`` by default, ``updated``, ``comments``), ``direction`` (``desc`` by
  default), ``since`` (ISO 8601; "updated after" it, "at or after" in the reference's
  earlier wording, inclusive here as GitHub answers), ``per_page`` (default 30, max 100),
  ``page`` (default 1).
- https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api —
  the ``link`` header (RFC 8288) with ``rel="prev"``, ``"next"``, ``"last"``, ``"first"``,
  omitted when everything fits on one page; its URLs are to be used as given (they name
  the repository by id: ``/repositories/{id}/issues``, which is served too).
- https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api —
  ``x-ratelimit-limit``, ``-remaining``, ``-used``, ``-reset`` (UTC epoch seconds),
  ``-resource`` on every answer; past the primary limit a 403 (or 429) with
  ``x-ratelimit-remaining: 0`` and no ``retry-after``, not to be retried before
  ``x-ratelimit-reset``; a secondary limit is a 403 or 429 whose message says so, with or
  without ``retry-after``; 60 requests an hour unauthenticated, 5,000 with a token
  (``Authorization: Bearer <token>`` or ``token <token>``; a bad one is a 401 ``Bad
  credentials``).

The rate-limit window starts at the first request counted in it and lasts ``window``
seconds; ``clock`` (Unix seconds) decides both, so tests move time themselves. Beyond the
docs, as GitHub is observed to answer: ``per_page`` above 100 is served as 100, a
``per_page`` below 1 or not a number as 30, an unknown ``sort`` / ``direction`` /
``state`` as its default; an unparseable ``since`` is a 422 ``Validation Failed``.

Left out: pull requests among the issues, other filters (``labels``, ``milestone``,
``assignee``, ``creator``, ``mentioned``, ``type``: answered 422 saying they are not
modelled), conditional requests (ETag / 304), media types, other endpoints.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.integration.loopback import LoopbackServer

__all__ = ["GitHubServer", "RecordedRequest"]

BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
RATE_LIMIT_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
ISSUES_DOCS = "https://docs.github.com/rest/issues/issues#list-repository-issues"
_UNMODELLED = ("milestone", "assignee", "type", "creator", "mentioned", "labels")


def github_time(moment: datetime) -> str:
    """GitHub's timestamp form, e.g. ``2024-01-01T00:05:00Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


@dataclass
class _Window:
    limit: int
    used: int = 0
    reset: int | None = None  # Unix seconds; None until the first request


@dataclass
class _Secondary:
    status: int
    remaining: int
    retry_after: int | None


class GitHubServer(LoopbackServer):
    """One repository's issues with GitHub's paging and rate limits (see the module doc).

    ``records`` issues #1... are generated: issue ``n`` created and updated ``n - 1``
    minutes after 2024-01-01, every fifth one closed, ``n % 7`` comments. :meth:`add`,
    :meth:`update` and :meth:`close` change them (moving ``updated_at`` forward).
    ``rate_limit`` is the budget of a token, ``anonymous_rate_limit`` that of requests
    without one (``token=None`` accepts any token as valid).
    """

    def __init__(
        self,
        records: int = 0,
        *,
        owner: str = "octo-org",
        repo: str = "octo-repo",
        repository_id: int = 1296269,
        token: str | None = "ghp_fixture",
        rate_limit: int = 5000,
        anonymous_rate_limit: int = 60,
        window: int = 3600,
        primary_status: int = 403,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.owner, self.repo, self.repository_id = owner, repo, repository_id
        self.token = token
        self.window = window
        self.primary_status = primary_status
        self.clock = clock
        self.requests: list[RecordedRequest] = []
        self._windows = {"token": _Window(rate_limit), "anonymous": _Window(anonymous_rate_limit)}
        self._secondary: list[_Secondary] = []
        self._issues: list[dict[str, Any]] = []
        self._clock = BASE_TIME - timedelta(minutes=1)
        self._request_ids = itertools.count(1)
        self.add(records)

    # --- lifecycle --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/repos/{owner}/{repo}/issues", self._list)
        app.router.add_get("/repositories/{repository_id}/issues", self._list)

    #: Base URL, standing for https://api.github.com, e.g. ``http://127.0.0.1:41234``.
    url: str

    @property
    def issues_url(self) -> str:
        """``{url}/repos/{owner}/{repo}/issues``."""
        return f"{self.url}/repos/{self.owner}/{self.repo}/issues"

    # --- rate limits ------------------------------------------------------------------

    @property
    def rate_limit(self) -> int:
        """The primary budget of authenticated requests per window."""
        return self._windows["token"].limit

    @rate_limit.setter
    def rate_limit(self, value: int) -> None:
        self._windows["token"].limit = value

    @property
    def used(self) -> int:
        """Authenticated requests counted in the current window."""
        return self._windows["token"].used

    @property
    def reset_at(self) -> int | None:
        """When the current authenticated window resets (Unix seconds), once it started."""
        return self._windows["token"].reset

    def secondary_limit(
        self, times: int = 1, *, status: int = 403, retry_after: int | None = 60
    ) -> None:
        """Answer the next ``times`` requests as a secondary rate limit: ``status`` (403 or
        429), ``retry-after`` when given (the docs allow it to be absent)."""
        self._secondary.append(_Secondary(status, times, retry_after))

    # --- content ----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every issue (open and closed), by number; copies."""
        return [self._shown(i) for i in self._issues]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Open ``count`` issues, each a minute after the latest time so far."""
        made = []
        for _ in range(count):
            number = len(self._issues) + 1
            moment = BASE_TIME + timedelta(minutes=number - 1)
            # Created after the latest change, never at the same second or in the past.
            self._clock = moment if moment > self._clock else self._clock + timedelta(minutes=1)
            closed = number % 5 == 0
            issue = {
                "number": number,
                "title": f"Issue {number}",
                "state": "closed" if closed else "open",
                "comments": number % 7,
                "body": f"Body of issue {number}.",
                "created_at": self._clock,
                "updated_at": self._clock,
                "closed_at": self._clock if closed else None,
            }
            self._issues.append(issue)
            made.append(self._shown(issue))
        return made

    def update(self, number: int, **fields: Any) -> dict[str, Any]:
        """Change fields (``title``, ``body``, ``comments``...) of issue ``number``;
        ``updated_at`` becomes a minute after the latest time so far."""
        issue = self._issues[number - 1]
        issue.update(fields)
        self._clock += timedelta(minutes=1)
        issue["updated_at"] = self._clock
        return self._shown(issue)

    def close(self, number: int) -> dict[str, Any]:
        """Close issue ``number`` (an update)."""
        self.update(number, state="closed")
        issue = self._issues[number - 1]
        issue["closed_at"] = issue["updated_at"]
        return self._shown(issue)

    def _shown(self, issue: Mapping[str, Any]) -> dict[str, Any]:
        number = int(issue["number"])
        node = base64.b64encode(f"0:{self.repository_id}:{number}".encode()).decode()
        api = f"{self.url}/repos/{self.owner}/{self.repo}/issues/{number}"
        return {
            "id": 1_900_000_000 + number,
            "node_id": "I_kwDO" + node.rstrip("="),
            "url": api,
            "html_url": f"https://github.com/{self.owner}/{self.repo}/issues/{number}",
            "number": number,
            "state": issue["state"],
            "title": issue["title"],
            "body": issue["body"],
            "user": {"login": "octocat", "id": 1, "type": "User"},
            "labels": [],
            "comments": issue["comments"],
            "created_at": github_time(issue["created_at"]),
            "updated_at": github_time(issue["updated_at"]),
            "closed_at": None if issue["closed_at"] is None else github_time(issue["closed_at"]),
        }

    # --- handler ----------------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers)
            )
        )
        request_id = f"F1C0:{next(self._request_ids):04X}:5A1B2C:6D3E4F:65A0B1C2"
        base = {
            "Content-Type": "application/json; charset=utf-8",
            "x-github-api-version-selected": "2022-11-28",
            "x-github-request-id": request_id,
        }
        who = self._who(request.headers.get("Authorization"))
        if who is None:
            return _json(
                {
                    "message": "Bad credentials",
                    "documentation_url": "https://docs.github.com/rest",
                    "status": "401",
                },
                401,
                base,
            )
        window = self._windows[who]
        now = self.clock()
        if window.reset is None or now >= window.reset:
            window.used, window.reset = 0, int(now) + self.window
        if window.used >= window.limit:
            # Primary limit: remaining 0 and the reset time, and deliberately no retry-after.
            subject = "user ID 1" if who == "token" else request.remote or "127.0.0.1"
            message = f"API rate limit exceeded for {subject}."
            if who == "anonymous":
                message += (
                    " (But here's the good news: Authenticated requests get a higher rate"
                    " limit. Check out the documentation for more details.)"
                )
            else:
                message += (
                    " If you reach out to GitHub Support for help, please include the request"
                    f" ID {request_id}."
                )
            body: dict[str, Any] = {
                "message": message,
                "documentation_url": RATE_LIMIT_DOCS,
                "status": str(self.primary_status),
            }
            return _json(body, self.primary_status, {**base, **_rate_headers(window)})
        if self._secondary:
            secondary = self._secondary[0]
            secondary.remaining -= 1
            if secondary.remaining <= 0:
                self._secondary.pop(0)
            headers = {**base, **_rate_headers(window)}
            if secondary.retry_after is not None:
                headers["retry-after"] = str(secondary.retry_after)
            message = (
                "You have exceeded a secondary rate limit. Please wait a few minutes before you"
                " try again. If you reach out to GitHub Support for help, please include the"
                f" request ID {request_id}."
            )
            docs = f"{RATE_LIMIT_DOCS}#about-secondary-rate-limits"
            body = {"message": message, "documentation_url": docs, "status": str(secondary.status)}
            return _json(body, secondary.status, headers)
        window.used += 1
        headers = {**base, **_rate_headers(window)}
        if not self._is_this_repo(request.match_info):
            body = {"message": "Not Found", "documentation_url": ISSUES_DOCS, "status": "404"}
            return _json(body, 404, headers)
        try:
            issues, page, per_page = self._select(request.query)
        except ValueError as invalid:
            body = {
                "message": "Validation Failed",
                "errors": [{"resource": "Issue", "field": str(invalid), "code": "invalid"}],
                "documentation_url": ISSUES_DOCS,
                "status": "422",
            }
            return _json(body, 422, headers)
        last = max(1, math.ceil(len(issues) / per_page))
        link = self._link(request.query, page, last)
        if link:
            headers["link"] = link
        chunk = issues[(page - 1) * per_page : page * per_page]
        return _json([self._shown(i) for i in chunk], 200, headers)

    def _who(self, header: str | None) -> str | None:
        """``"token"``, ``"anonymous"``, or ``None`` for bad credentials."""
        if not header:
            return "anonymous"
        scheme, _, credential = header.partition(" ")
        if scheme.lower() not in ("bearer", "token") or not credential.strip():
            return None
        if self.token is not None and credential.strip() != self.token:
            return None
        return "token"

    def _is_this_repo(self, match: Mapping[str, str]) -> bool:
        if "repository_id" in match:
            return match["repository_id"] == str(self.repository_id)
        # Owner and repository names are not case sensitive.
        return (match["owner"].lower(), match["repo"].lower()) == (
            self.owner.lower(),
            self.repo.lower(),
        )

    def _select(self, query: Mapping[str, str]) -> tuple[list[dict[str, Any]], int, int]:
        for name in _UNMODELLED:
            if name in query:
                raise ValueError(f"{name} (not modelled by this fixture)")
        state = query.get("state", "open")
        if state not in ("open", "closed", "all"):
            state = "open"
        sort = query.get("sort", "created")
        if sort not in ("created", "updated", "comments"):
            sort = "created"
        descending = query.get("direction", "desc") != "asc"
        found = [i for i in self._issues if state == "all" or i["state"] == state]
        if "since" in query:
            try:
                since = datetime.fromisoformat(query["since"])
            except ValueError:
                raise ValueError("since") from None
            if since.tzinfo is None:
                since = since.replace(tzinfo=UTC)
            found = [i for i in found if i["updated_at"] >= since]
        key = {"created": "created_at", "updated": "updated_at", "comments": "comments"}[sort]
        found.sort(key=lambda i: (i[key], i["number"]), reverse=descending)
        per_page = _integer(query.get("per_page"), 30)
        per_page = 30 if per_page < 1 else min(per_page, 100)
        page = max(1, _integer(query.get("page"), 1))
        return found, page, per_page

    def _link(self, query: Mapping[str, str], page: int, last: int) -> str:
        if last <= 1:
            return ""  # everything fits on one page: no link header

        def at(number: int, rel: str) -> str:
            params = {**query, "page": str(number)}
            where = f"{self.url}/repositories/{self.repository_id}/issues?{urlencode(params)}"
            return f'<{where}>; rel="{rel}"'

        links = []
        if page > 1:
            links.append(at(page - 1, "prev"))
        if page < last:
            links += [at(page + 1, "next"), at(last, "last")]
        if page > 1:
            links.append(at(1, "first"))
        return ", ".join(links)


def _rate_headers(window: _Window) -> dict[str, str]:
    return {
        "x-ratelimit-limit": str(window.limit),
        "x-ratelimit-remaining": str(max(0, window.limit - window.used)),
        "x-ratelimit-reset": str(window.reset),
        "x-ratelimit-used": str(min(window.used, window.limit)),
        "x-ratelimit-resource": "core",
    }


def _integer(raw: str | None, default: int) -> int:
    try:
        return default if raw is None else int(raw)
    except ValueError:
        return default


def _json(body: Any, status: int, headers: Mapping[str, str]) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, headers=dict(headers))
