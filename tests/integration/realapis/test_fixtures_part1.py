"""The fixture servers themselves, crawled by plain aiohttp clients written from each API's
documentation (not from syncd): every record is reachable, page sizes are capped or
refused as documented, and the end and error signals are the documented ones."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import aiohttp
import pytest

from tests.integration.realapis.github_rest import GitHubServer
from tests.integration.realapis.jira import JiraServer
from tests.integration.realapis.msgraph import GraphServer
from tests.integration.realapis.notion import NotionServer
from tests.integration.realapis.stripe import StripeServer

COUNT = 237


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get_json(
    http: aiohttp.ClientSession, url: str, **kwargs: Any
) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with http.get(url, **kwargs) as response:
        return response.status, await response.json(content_type=None), response


def links(header: str | None) -> dict[str, str]:
    """RFC 8288 ``Link`` header → ``{rel: url}``."""
    return {rel: url for url, rel in re.findall(r'<([^>]*)>\s*;\s*rel="([^"]*)"', header or "")}


# --- Stripe -----------------------------------------------------------------------------


async def test_stripe_pages_newest_first_until_has_more_is_false(
    http: aiohttp.ClientSession,
) -> None:
    async with StripeServer(records=COUNT) as api:
        auth = {"Authorization": f"Bearer {api.api_key}"}
        seen: list[dict[str, Any]] = []
        sizes: list[int] = []
        params: dict[str, str] = {"limit": "100"}
        while True:
            status, body, _ = await get_json(
                http, f"{api.url}/v1/customers", params=params, headers=auth
            )
            assert status == 200
            assert (body["object"], body["url"]) == ("list", "/v1/customers")
            seen += body["data"]
            sizes.append(len(body["data"]))
            if not body["has_more"]:
                break
            params["starting_after"] = body["data"][-1]["id"]
        assert sizes == [100, 100, 37]
        assert [c["id"] for c in seen] == [c["id"] for c in api.records]
        created = [c["created"] for c in seen]
        assert created == sorted(created, reverse=True)  # reverse chronological
        assert all(re.fullmatch(r"cus_[0-9A-Za-z]{14}", c["id"]) for c in seen)

        # The default page is 10; HTTP Basic with the key as user name works too.
        basic = "Basic " + base64.b64encode(f"{api.api_key}:".encode()).decode()
        status, body, _ = await get_json(
            http, f"{api.url}/v1/customers", headers={"Authorization": basic}
        )
        assert status == 200 and len(body["data"]) == 10 and body["has_more"] is True


async def test_stripe_refuses_what_the_contract_rules_out(http: aiohttp.ClientSession) -> None:
    async with StripeServer(records=30) as api:
        url, auth = f"{api.url}/v1/customers", {"Authorization": f"Bearer {api.api_key}"}
        for limit in ("101", "0"):
            status, body, _ = await get_json(http, url, params={"limit": limit}, headers=auth)
            assert status == 400
            assert body["error"]["type"] == "invalid_request_error"
            assert body["error"]["param"] == "limit"
        status, body, _ = await get_json(
            http, url, params={"starting_after": "cus_00000000000000"}, headers=auth
        )
        assert status == 400
        assert (body["error"]["code"], body["error"]["param"]) == (
            "resource_missing",
            "starting_after",
        )
        first = api.records[0]["id"]
        both = {"starting_after": first, "ending_before": first}
        status, body, _ = await get_json(http, url, params=both, headers=auth)
        assert status == 400
        status, body, _ = await get_json(http, url, params={"cursor": "x"}, headers=auth)
        assert status == 400 and "unknown parameter" in body["error"]["message"]
        status, body, _ = await get_json(http, url)
        assert status == 401 and "did not provide an API key" in body["error"]["message"]
        status, body, _ = await get_json(http, url, headers={"Authorization": "Bearer sk_test_x"})
        assert status == 401


async def test_stripe_ending_before_and_created_filter(http: aiohttp.ClientSession) -> None:
    async with StripeServer(records=30) as api:
        url, auth = f"{api.url}/v1/customers", {"Authorization": f"Bearer {api.api_key}"}
        records = api.records
        status, body, _ = await get_json(
            http, url, params={"ending_before": records[10]["id"], "limit": "5"}, headers=auth
        )
        assert [c["id"] for c in body["data"]] == [c["id"] for c in records[5:10]]
        assert body["has_more"] is True  # five newer ones remain before those
        newest = records[0]["created"]
        made = api.add(3)
        status, body, _ = await get_json(
            http, url, params={"created[gt]": str(newest)}, headers=auth
        )
        assert status == 200
        assert [c["id"] for c in body["data"]] == [c["id"] for c in reversed(made)]
        assert body["has_more"] is False


# --- Notion -----------------------------------------------------------------------------


def notion_headers(api: NotionServer, version: str | None = "2022-06-28") -> dict[str, str]:
    headers = {"Authorization": f"Bearer {api.token}"}
    if version is not None:
        headers["Notion-Version"] = version
    return headers


async def notion_query(
    http: aiohttp.ClientSession, api: NotionServer, body: Any, **headers: str
) -> tuple[int, Any]:
    sent = {**notion_headers(api), **headers}
    async with http.post(api.query_url, json=body, headers=sent) as response:
        return response.status, await response.json()


async def test_notion_cursor_pages_until_has_more_is_false(http: aiohttp.ClientSession) -> None:
    async with NotionServer(records=COUNT) as api:
        seen: list[dict[str, Any]] = []
        sizes: list[int] = []
        body: dict[str, Any] = {"page_size": 100}
        while True:
            status, answer = await notion_query(http, api, body)
            assert status == 200
            assert (answer["object"], answer["type"]) == ("list", "page_or_database")
            seen += answer["results"]
            sizes.append(len(answer["results"]))
            if not answer["has_more"]:
                assert answer["next_cursor"] is None
                break
            body["start_cursor"] = answer["next_cursor"]
        assert sizes == [100, 100, 37]
        assert [p["id"] for p in seen] == [p["id"] for p in api.records]
        assert all(uuid.UUID(p["id"]).version == 4 for p in seen)
        # No page_size: the documented default of 100.
        status, answer = await notion_query(http, api, {})
        assert status == 200 and len(answer["results"]) == 100


async def test_notion_documented_errors(http: aiohttp.ClientSession) -> None:
    async with NotionServer(records=5) as api:
        async with http.post(
            api.query_url, json={}, headers=notion_headers(api, version=None)
        ) as response:
            assert response.status == 400
            assert (await response.json())["code"] == "missing_version"
        status, answer = await notion_query(http, api, {}, Authorization="Bearer wrong")
        assert (status, answer["code"]) == (401, "unauthorized")
        for body in (
            {"page_size": 101},
            {"start_cursor": "not-a-cursor"},
            {"start_cursor": str(uuid.uuid4())},
            {"cursor": "x"},
        ):
            status, answer = await notion_query(http, api, body)
            assert (status, answer["object"], answer["code"]) == (
                400,
                "error",
                "validation_error",
            ), body
        async with http.post(
            f"{api.url}/v1/databases/{uuid.uuid4()}/query", json={}, headers=notion_headers(api)
        ) as response:
            assert response.status == 404
            assert (await response.json())["code"] == "object_not_found"
        async with http.post(
            api.query_url, data=b"{not json", headers=notion_headers(api)
        ) as response:
            assert response.status == 400
            assert (await response.json())["code"] == "invalid_json"


async def test_notion_last_edited_time_filter_for_increments(http: aiohttp.ClientSession) -> None:
    async with NotionServer(records=20) as api:
        since = max(p["last_edited_time"] for p in api.records)
        edited = [api.edit(api.records[5]["id"]), api.edit(api.records[9]["id"])]
        body = {
            "filter": {"timestamp": "last_edited_time", "last_edited_time": {"on_or_after": since}},
            "sorts": [{"timestamp": "last_edited_time", "direction": "ascending"}],
        }
        status, answer = await notion_query(http, api, body)
        assert status == 200
        # on_or_after is inclusive: the page edited at `since` comes back too.
        assert [p["last_edited_time"] for p in answer["results"]] == [
            since,
            *(p["last_edited_time"] for p in edited),
        ]
        assert [p["id"] for p in answer["results"][1:]] == [p["id"] for p in edited]


# --- Jira -------------------------------------------------------------------------------


async def test_jira_answers_at_most_50_whatever_max_results_asks(
    http: aiohttp.ClientSession,
) -> None:
    async with JiraServer(records=COUNT) as api:
        auth = {"Authorization": api.basic_auth()}
        keys: list[str] = []
        sizes: list[int] = []
        start = 0
        while True:
            params = {"jql": "project = PROJ ORDER BY key ASC", "startAt": start, "maxResults": 100}
            status, body, _ = await get_json(
                http, f"{api.url}/rest/api/3/search", params=params, headers=auth
            )
            assert status == 200
            assert (body["startAt"], body["maxResults"], body["total"]) == (start, 50, COUNT)
            keys += [issue["key"] for issue in body["issues"]]
            sizes.append(len(body["issues"]))
            start += len(body["issues"])
            if start >= body["total"]:
                break
        assert sizes == [50, 50, 50, 50, 37]
        assert keys == [f"PROJ-{n}" for n in range(1, COUNT + 1)]


async def test_jira_jql_updated_since_to_the_minute(http: aiohttp.ClientSession) -> None:
    async with JiraServer(records=30) as api:
        auth = {"Authorization": api.basic_auth()}
        first = api.update("PROJ-3", summary="changed")
        api.update("PROJ-5")
        minute = datetime.strptime(first["fields"]["updated"], "%Y-%m-%dT%H:%M:%S.%f%z")
        jql = f'project = PROJ AND updated >= "{minute:%Y/%m/%d %H:%M}" ORDER BY updated ASC'
        status, body, _ = await get_json(
            http, f"{api.url}/rest/api/3/search", params={"jql": jql}, headers=auth
        )
        assert status == 200
        assert [i["key"] for i in body["issues"]] == ["PROJ-3", "PROJ-5"]
        assert body["issues"][0]["fields"]["summary"] == "changed"


async def test_jira_documented_errors(http: aiohttp.ClientSession) -> None:
    async with JiraServer(records=3) as api:
        url, auth = f"{api.url}/rest/api/3/search", {"Authorization": api.basic_auth()}
        for jql in ("project = PROJ OR project = X", "project = PROJ AND", "summary ~ x"):
            status, body, _ = await get_json(http, url, params={"jql": jql}, headers=auth)
            assert status == 400, jql
            assert body["errorMessages"] and body["errors"] == {}
        status, body, _ = await get_json(http, url, params={"jql": "project = NOPE"}, headers=auth)
        assert status == 400
        assert body["errorMessages"] == ["The value 'NOPE' does not exist for the field 'project'."]
        # Anonymous: the project is not visible.
        status, body, _ = await get_json(http, url, params={"jql": "project = PROJ"})
        assert status == 400
        wrong = "Basic " + base64.b64encode(b"user@example.com:wrong").decode()
        status, body, _ = await get_json(http, url, headers={"Authorization": wrong})
        assert status == 401
    async with JiraServer(records=3, search_removed=True) as api:
        status, body, _ = await get_json(
            http, f"{api.url}/rest/api/3/search", headers={"Authorization": api.basic_auth()}
        )
        assert status == 410 and "/rest/api/3/search/jql" in body["errorMessages"][0]


async def test_jira_search_jql_next_page_token(http: aiohttp.ClientSession) -> None:
    async with JiraServer(records=COUNT) as api:
        auth = {"Authorization": api.basic_auth()}
        url = f"{api.url}/rest/api/3/search/jql"
        ids: list[str] = []
        params: dict[str, Any] = {"jql": "project = PROJ ORDER BY key ASC", "maxResults": 100}
        while True:
            status, body, _ = await get_json(http, url, params=params, headers=auth)
            assert status == 200
            ids += [issue["id"] for issue in body["issues"]]
            assert all(set(issue) == {"id"} for issue in body["issues"])  # id only by default
            if body["isLast"]:
                assert "nextPageToken" not in body
                break
            params["nextPageToken"] = body["nextPageToken"]
        assert ids == [issue["id"] for issue in api.records]
        asked = {"jql": "project = PROJ", "maxResults": 100, "fields": "summary,updated"}
        status, body, _ = await get_json(http, url, params=asked, headers=auth)
        assert len(body["issues"]) == 50 and set(body["issues"][0]["fields"]) == {
            "summary",
            "updated",
        }
        status, body, _ = await get_json(http, url, params={"jql": ""}, headers=auth)
        assert status == 400  # unbounded JQL
        bad = {"jql": "project = PROJ", "nextPageToken": "forged"}
        status, body, _ = await get_json(http, url, params=bad, headers=auth)
        assert status == 400


# --- Microsoft Graph --------------------------------------------------------------------


async def test_graph_next_links_used_as_given(http: aiohttp.ClientSession) -> None:
    async with GraphServer(records=COUNT) as api:
        auth = {"Authorization": f"Bearer {api.token}"}
        url: str | None = f"{api.url}/v1.0/users?$top=100"
        seen: list[dict[str, Any]] = []
        sizes: list[int] = []
        while url is not None:
            status, body, _ = await get_json(http, url, headers=auth)
            assert status == 200
            assert body["@odata.context"].endswith("/v1.0/$metadata#users")
            seen += body["value"]
            sizes.append(len(body["value"]))
            url = body.get("@odata.nextLink")
            if url is not None:
                assert url.startswith(f"{api.url}/v1.0/users?") and "$skiptoken=" in url
                assert "$top=100" in url  # the original query options are carried
        assert sizes == [100, 100, 37]
        assert [u["id"] for u in seen] == [u["id"] for u in api.records]
        # Each follow-up asked for exactly the link handed out.
        assert [r.path_qs for r in api.requests[1:]] == [
            link.removeprefix(api.url) for link in api.next_links
        ]


async def test_graph_page_sizes_and_errors(http: aiohttp.ClientSession) -> None:
    async with GraphServer(records=COUNT) as api:
        users, auth = f"{api.url}/v1.0/users", {"Authorization": f"Bearer {api.token}"}
        status, body, _ = await get_json(http, users, headers=auth)
        assert len(body["value"]) == 100 and "@odata.nextLink" in body  # default 100
        status, body, _ = await get_json(http, f"{users}?$top=999", headers=auth)
        assert len(body["value"]) == COUNT and "@odata.nextLink" not in body
        status, body, _ = await get_json(http, f"{users}?$top=1000", headers=auth)
        assert (status, body["error"]["code"]) == (400, "Request_UnsupportedQuery")
        status, body, _ = await get_json(http, f"{users}?$skiptoken=forged", headers=auth)
        assert (status, body["error"]["code"]) == (400, "Directory_ExpiredPageToken")
        status, body, _ = await get_json(http, f"{users}?$skip=10", headers=auth)
        assert status == 400
        status, body, _ = await get_json(http, users)
        assert (status, body["error"]["code"]) == (401, "InvalidAuthenticationToken")
        assert set(body["error"]["innerError"]) >= {"date", "request-id", "client-request-id"}
        status, body, _ = await get_json(
            http, f"{users}?$select=displayName&$top=200", headers=auth
        )
        assert all(set(u) == {"displayName", "id"} for u in body["value"])
        assert "$select=displayName" in body["@odata.nextLink"]


async def test_graph_delta_link_reports_changes(http: aiohttp.ClientSession) -> None:
    async with GraphServer(records=COUNT, delta_page_size=100) as api:
        auth = {"Authorization": f"Bearer {api.token}"}
        url: str | None = f"{api.url}/v1.0/users/delta"
        initial: list[dict[str, Any]] = []
        delta_link = ""
        while url is not None:
            status, body, _ = await get_json(http, url, headers=auth)
            assert status == 200
            initial += body["value"]
            url = body.get("@odata.nextLink")
            if url is None:
                delta_link = body["@odata.deltaLink"]
            else:
                assert "@odata.deltaLink" not in body
        assert len(initial) == COUNT and "$deltatoken=" in delta_link
        records = api.records
        api.update(records[3]["id"], jobTitle="Engineer")
        api.remove(records[7]["id"])
        added = api.add(1)[0]
        status, body, _ = await get_json(http, delta_link, headers=auth)
        assert [u["id"] for u in body["value"]] == [records[3]["id"], records[7]["id"], added["id"]]
        assert body["value"][0]["jobTitle"] == "Engineer"
        assert body["value"][1]["@removed"] == {"reason": "changed"}
        status, body, _ = await get_json(http, body["@odata.deltaLink"], headers=auth)
        assert body["value"] == []


# --- GitHub -----------------------------------------------------------------------------


async def test_github_link_header_pages_and_per_page_cap(http: aiohttp.ClientSession) -> None:
    async with GitHubServer(records=COUNT) as api:
        auth = {"Authorization": f"Bearer {api.token}"}
        url: str | None = f"{api.issues_url}?state=all&sort=updated&direction=asc&per_page=100"
        numbers: list[int] = []
        rels: list[set[str]] = []
        while url is not None:
            status, body, response = await get_json(http, url, headers=auth)
            assert status == 200
            for name in ("limit", "remaining", "used", "reset", "resource"):
                assert f"x-ratelimit-{name}" in response.headers
            numbers += [issue["number"] for issue in body]
            found = links(response.headers.get("link"))
            rels.append(set(found))
            url = found.get("next")
        assert numbers == list(range(1, COUNT + 1))
        assert rels == [{"next", "last"}, {"prev", "next", "last", "first"}, {"prev", "first"}]
        status, body, response = await get_json(
            http, f"{api.issues_url}?state=all&per_page=500", headers=auth
        )
        assert len(body) == 100  # per_page is capped at 100
        status, body, response = await get_json(http, api.issues_url, headers=auth)
        assert len(body) == 30 and all(issue["state"] == "open" for issue in body)
        status, body, response = await get_json(
            http, api.issues_url, headers={"Authorization": "Bearer wrong"}
        )
        assert (status, body["message"]) == (401, "Bad credentials")


async def test_github_primary_rate_limit_403_with_reset(http: aiohttp.ClientSession) -> None:
    now = [1_700_000_000.0]
    async with GitHubServer(records=10, rate_limit=3, clock=lambda: now[0]) as api:
        auth = {"Authorization": f"Bearer {api.token}"}
        remaining = []
        for _ in range(3):
            status, _, response = await get_json(http, api.issues_url, headers=auth)
            assert status == 200
            remaining.append(response.headers["x-ratelimit-remaining"])
            now[0] += 10
        assert remaining == ["2", "1", "0"]
        status, body, response = await get_json(http, api.issues_url, headers=auth)
        assert status == 403
        assert "API rate limit exceeded" in body["message"]
        assert response.headers["x-ratelimit-remaining"] == "0"
        assert response.headers["x-ratelimit-limit"] == "3"
        assert response.headers["x-ratelimit-used"] == "3"
        assert response.headers["x-ratelimit-reset"] == str(1_700_000_000 + 3600)
        assert "retry-after" not in response.headers
        now[0] = 1_700_000_000 + 3600  # the reset time: a new window
        status, _, response = await get_json(http, api.issues_url, headers=auth)
        assert status == 200
        assert response.headers["x-ratelimit-remaining"] == "2"
        assert response.headers["x-ratelimit-reset"] == str(1_700_000_000 + 2 * 3600)


async def test_github_secondary_rate_limit(http: aiohttp.ClientSession) -> None:
    async with GitHubServer(records=10, clock=lambda: 1_700_000_000.0) as api:
        auth = {"Authorization": f"Bearer {api.token}"}
        api.secondary_limit(status=429, retry_after=30)
        api.secondary_limit(status=403, retry_after=None)
        status, body, response = await get_json(http, api.issues_url, headers=auth)
        assert (status, response.headers["retry-after"]) == (429, "30")
        assert "secondary rate limit" in body["message"]
        status, body, response = await get_json(http, api.issues_url, headers=auth)
        assert status == 403 and "retry-after" not in response.headers
        assert response.headers["x-ratelimit-remaining"] != "0"
        status, body, response = await get_json(http, api.issues_url, headers=auth)
        assert status == 200


async def test_github_since_for_increments(http: aiohttp.ClientSession) -> None:
    async with GitHubServer(records=40) as api:
        auth = {"Authorization": f"Bearer {api.token}"}
        changed = [api.update(7, title="seven"), api.close(12)]
        since = changed[0]["updated_at"]
        params = {"state": "all", "sort": "updated", "direction": "asc", "since": since}
        status, body, _ = await get_json(http, api.issues_url, params=params, headers=auth)
        assert [issue["number"] for issue in body] == [7, 12]
        assert body[1]["state"] == "closed"
        status, body, _ = await get_json(
            http, api.issues_url, params={**params, "since": "yesterday"}, headers=auth
        )
        assert status == 422
