"""The real-API fixtures crawled by plain aiohttp clients written from each API's docs (not
from syncd): every record is reachable, page sizes are clamped or refused as documented,
and the end-of-list and error signals behave as the docs say."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

import aiohttp

from tests.integration.realapis.elasticsearch import ElasticsearchServer
from tests.integration.realapis.graphql import GitHubGraphQLServer
from tests.integration.realapis.slack import SlackServer
from tests.integration.realapis.wordpress import WordPressServer
from tests.integration.realapis.zendesk import ZendeskServer

# --- GitHub GraphQL ----------------------------------------------------------------------

ISSUES_QUERY = """
query($owner: String!, $name: String!, $first: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    issues(first: $first, after: $after, orderBy: {field: UPDATED_AT, direction: ASC}) {
      pageInfo { hasNextPage endCursor }
      nodes { id number title updatedAt }
    }
  }
}
"""


async def _graphql(
    session: aiohttp.ClientSession,
    api: GitHubGraphQLServer,
    variables: dict[str, Any],
    *,
    query: str = ISSUES_QUERY,
    token: str | None = None,
) -> tuple[int, Any]:
    variables = {"owner": api.owner, "name": api.name, **variables}
    headers = {"Authorization": f"bearer {token or api.token}"}
    async with session.post(
        f"{api.url}/graphql", json={"query": query, "variables": variables}, headers=headers
    ) as response:
        return response.status, await response.json()


async def _crawl_issues(
    session: aiohttp.ClientSession, api: GitHubGraphQLServer, after: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """Every issue after ``after``, and the cursor to resume from (an empty last page has
    ``endCursor: null``, so the previous one is kept)."""
    nodes: list[dict[str, Any]] = []
    while True:
        status, body = await _graphql(session, api, {"first": 100, "after": after})
        assert status == 200 and "errors" not in body, body
        issues = body["data"]["repository"]["issues"]
        nodes += issues["nodes"]
        after = issues["pageInfo"]["endCursor"] or after
        if not issues["pageInfo"]["hasNextPage"]:
            return nodes, after


async def test_github_graphql_issues_are_all_reachable_and_errors_are_graphql_errors() -> None:
    async with GitHubGraphQLServer(records=237) as api, aiohttp.ClientSession() as session:
        nodes, cursor = await _crawl_issues(session, api)
        assert [n["number"] for n in nodes] == list(range(1, 238))
        assert len(api.requests) == 3  # 100 + 100 + 37

        # "The value of these arguments must be between 1 and 100": refused, not clamped,
        # as a GraphQL error on HTTP 200.
        status, body = await _graphql(session, api, {"first": 101})
        assert status == 200 and "data" not in body
        assert body["errors"][0]["type"] == "EXCESSIVE_PAGINATION"
        assert "exceeds the `first` limit of 100 records" in body["errors"][0]["message"]

        status, body = await _graphql(session, api, {"first": 10, "after": "bm90LWEtY3Vyc29y"})
        assert status == 200
        assert body["data"] == {"repository": {"issues": None}}
        assert body["errors"][0]["type"] == "INVALID_CURSOR_ARGUMENTS"

        # Issues updated later sort after the saved cursor under UPDATED_AT ASC.
        api.touch([7, 3])
        again, _ = await _crawl_issues(session, api, after=cursor)
        assert [n["number"] for n in again] == [7, 3]

        # The docs' own example passes `first` as a literal.
        literal = ISSUES_QUERY.replace("first: $first", "first: 5")
        status, body = await _graphql(session, api, {"after": None}, query=literal)
        assert len(body["data"]["repository"]["issues"]["nodes"]) == 5

        status, body = await _graphql(session, api, {"first": 1}, token="ghp_wrong")
        assert status == 401 and body["message"] == "Bad credentials"


# --- WordPress ---------------------------------------------------------------------------


async def test_wordpress_posts_follow_link_next_and_past_the_last_page_is_a_400() -> None:
    async with WordPressServer(records=237) as api, aiohttp.ClientSession() as session:
        query = {"per_page": 100, "orderby": "modified", "order": "asc"}
        url: str | None = f"{api.posts_url}?{urlencode(query)}"
        posts: list[dict[str, Any]] = []
        while url is not None:
            async with session.get(url) as response:
                assert response.status == 200
                assert response.headers["X-WP-Total"] == "237"
                assert response.headers["X-WP-TotalPages"] == "3"
                posts += await response.json()
                following = response.links.get("next")
                url = str(following["url"]) if following else None
        assert [p["id"] for p in posts] == [p["id"] for p in api.records]
        assert len(api.requests) == 3
        assert posts[0]["title"]["rendered"] and posts[0]["content"]["rendered"].startswith("<p>")

        # per_page is "an integer from 1 to 100": out of range is refused, not clamped.
        for per_page in (0, 101):
            async with session.get(api.posts_url, params={"per_page": per_page}) as response:
                body = await response.json()
                assert response.status == 400 and body["code"] == "rest_invalid_param"
                assert "per_page" in body["data"]["params"]

        async with session.get(api.posts_url, params={"per_page": 100, "page": 4}) as response:
            body = await response.json()
            assert response.status == 400
            assert body["code"] == "rest_post_invalid_page_number"
            assert body["data"] == {"status": 400}

        # Incremental: posts modified after the newest modification seen.
        newest = max(p["modified_gmt"] for p in posts)
        api.touch([posts[20]["id"], posts[10]["id"]])
        params = {"modified_after": newest, "orderby": "modified", "order": "asc"}
        async with session.get(api.posts_url, params=params) as response:
            changed = await response.json()
        assert [p["id"] for p in changed] == [posts[20]["id"], posts[10]["id"]]


# --- Zendesk -----------------------------------------------------------------------------


async def test_zendesk_export_ends_with_end_of_stream_and_an_after_url_to_resume() -> None:
    async with ZendeskServer(records=237, page_size=100) as api, aiohttp.ClientSession() as session:
        headers = {"Authorization": api.basic_auth}

        async def get(url: str) -> dict[str, Any]:
            async with session.get(url, headers=headers) as response:
                assert response.status == 200
                result: dict[str, Any] = await response.json()
                return result

        url = f"{api.export_url}?start_time=0"
        tickets: list[dict[str, Any]] = []
        while True:
            page = await get(url)
            tickets += page["tickets"]
            assert page["after_url"] and page["after_cursor"]  # set on every page, last too
            url = page["after_url"]
            if page["end_of_stream"]:
                break
        assert [t["id"] for t in tickets] == list(range(1, 238))
        assert len(api.requests) == 3

        # The saved after_url is where the next export starts: nothing new yet.
        saved = page["after_cursor"]
        idle = await get(page["after_url"])
        assert idle["tickets"] == [] and idle["end_of_stream"]
        assert idle["after_cursor"] == saved

        api.touch([9, 5])
        changed = await get(idle["after_url"])
        assert [t["id"] for t in changed["tickets"]] == [9, 5] and changed["end_of_stream"]

        async with session.get(url, headers={"Authorization": "Basic Ym9ndXM="}) as response:
            assert response.status == 401


async def test_zendesk_per_page_is_clamped_to_1000() -> None:
    async with ZendeskServer(records=1200, oauth_token="oauth-1") as api:
        async with aiohttp.ClientSession() as session:
            params = {"start_time": 0, "per_page": 5000}
            headers = {"Authorization": "Bearer oauth-1"}
            async with session.get(api.export_url, params=params, headers=headers) as response:
                page = await response.json()
        assert len(page["tickets"]) == 1000 and not page["end_of_stream"]
        assert "per_page=5000" in page["after_url"]


# --- Elasticsearch -----------------------------------------------------------------------


async def test_elasticsearch_search_after_reaches_every_document_and_checks_arity() -> None:
    async with ElasticsearchServer(records=237) as api, aiohttp.ClientSession() as session:
        headers = {"Authorization": api.api_key_header}

        async def search(body: dict[str, Any]) -> tuple[int, Any]:
            async with session.post(api.search_url, json=body, headers=headers) as response:
                assert response.headers["X-elastic-product"] == "Elasticsearch"
                return response.status, await response.json()

        request: dict[str, Any] = {
            "size": 100,
            "sort": [{"updated_at": "asc"}, {"id": "asc"}],
            "query": {"match_all": {}},
        }
        hits: list[dict[str, Any]] = []
        while True:
            status, body = await search(request)
            assert status == 200 and body["hits"]["total"] == {"value": 237, "relation": "eq"}
            if not body["hits"]["hits"]:  # an empty page is the end
                break
            hits += body["hits"]["hits"]
            request["search_after"] = hits[-1]["sort"]
        assert [h["_id"] for h in hits] == [d["id"] for d in api.records]
        assert len(api.requests) == 4
        assert isinstance(hits[0]["sort"][0], int)  # a date sorts as epoch milliseconds

        status, body = await search({**request, "search_after": hits[-1]["sort"][:1]})
        assert status == 400 and body["status"] == 400
        assert body["error"]["root_cause"][0] == {
            "type": "illegal_argument_exception",
            "reason": "search_after has 1 value(s) but sort has 2.",
        }

        status, body = await search({"size": 10_001})
        assert status == 400
        assert body["error"]["root_cause"][0]["reason"].startswith("Result window is too large")

        # Incremental: documents updated after the newest updated_at seen.
        since = hits[-1]["_source"]["updated_at"]
        api.touch(["TCK-000042", "TCK-000007"])
        del request["search_after"]
        status, body = await search({**request, "query": {"range": {"updated_at": {"gt": since}}}})
        assert [h["_id"] for h in body["hits"]["hits"]] == ["TCK-000042", "TCK-000007"]

        async with session.post(api.search_url, json={}) as response:
            body = await response.json()
            assert response.status == 401
            assert body["error"]["type"] == "security_exception"


# --- Slack -------------------------------------------------------------------------------


async def test_slack_history_pages_to_an_empty_cursor_and_errors_are_ok_false() -> None:
    async with SlackServer(records=237) as api, aiohttp.ClientSession() as session:

        async def call(params: dict[str, Any], token: str | None = None) -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with session.get(api.history_url, params=params, headers=headers) as response:
                assert response.status == 200  # failures included
                result: dict[str, Any] = await response.json()
                return result

        params: dict[str, Any] = {"channel": api.channel, "limit": 100}
        messages: list[dict[str, Any]] = []
        while True:
            page = await call(params, api.token)
            assert page["ok"]
            messages += page["messages"]
            cursor = page["response_metadata"]["next_cursor"]
            if not cursor:
                assert not page["has_more"]
                break
            params["cursor"] = cursor
        assert [m["ts"] for m in reversed(messages)] == [m["ts"] for m in api.records]
        assert len(api.requests) == 3

        wrong = {"channel": api.channel}
        assert (await call(wrong, "xoxb-wrong")) == {"ok": False, "error": "invalid_auth"}
        assert (await call(wrong))["error"] == "not_authed"
        assert (await call({**wrong, "cursor": "garbage"}, api.token))["error"] == "invalid_cursor"
        assert (await call({"channel": "C999"}, api.token))["error"] == "channel_not_found"

        # Incremental: messages after the newest ts seen; an edit keeps its ts.
        newest = messages[0]["ts"]
        api.edit(messages[5]["ts"], "edited text")
        added = api.add(3)
        page = await call({"channel": api.channel, "oldest": newest}, api.token)
        assert [m["ts"] for m in page["messages"]] == [m["ts"] for m in reversed(added)]


async def test_slack_limit_is_clamped_and_rate_limits_answer_429_with_retry_after() -> None:
    async with aiohttp.ClientSession() as session:
        async with SlackServer(records=1200) as api:
            headers = {"Authorization": f"Bearer {api.token}"}
            params: dict[str, str | int] = {"channel": api.channel, "limit": 5000}
            async with session.get(api.history_url, params=params, headers=headers) as response:
                page = await response.json()
            assert len(page["messages"]) == 999 and page["has_more"]

        async with SlackServer(records=10, rate_limit=2, rate_window=0.5) as api:
            headers = {"Authorization": f"Bearer {api.token}"}
            params = {"channel": api.channel}
            for _ in range(2):
                async with session.get(api.history_url, params=params, headers=headers) as r:
                    assert r.status == 200
            async with session.get(api.history_url, params=params, headers=headers) as r:
                assert r.status == 429 and (await r.json())["error"] == "ratelimited"
                retry_after = int(r.headers["Retry-After"])
            await asyncio.sleep(retry_after)
            async with session.get(api.history_url, params=params, headers=headers) as r:
                assert r.status == 200 and (await r.json())["ok"]
