"""The connector files of ``docs/recipes/``, each run against the local server that follows
its API's documented contract: every file is valid (``syncd validate``, the editors' JSON
Schema), keeps its secrets in ``${env:}`` references, and, pointed at its server, crawls it
completely in a real daemon with the requests the docs describe. Incremental recipes send
their mark in the API's format and pick up what changed. A failed page resumes where it
failed for each new kind of cursor, on both backend pairs; GitHub's primary rate limit is
waited out; and the guards against a partial crawl hold."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest

from syncd.daemon import Daemon
from syncd.models import DocStatus, RunOutcome, WaitReason
from syncd.plugins import Registry
from syncd.schema import connector_file_schema
from tests.acceptance.conftest import base_environ
from tests.integration.conftest import DaemonFactory, embedded_config
from tests.integration.realapis.elasticsearch import ElasticsearchServer
from tests.integration.realapis.github_rest import GitHubServer
from tests.integration.realapis.graphql import GitHubGraphQLServer
from tests.integration.realapis.jira import JiraServer
from tests.integration.realapis.msgraph import GraphServer
from tests.integration.realapis.notion import NotionServer
from tests.integration.realapis.recipes import (
    NAMES,
    RECIPES,
    MicrosoftLogin,
    changed,
    doc_ids,
    env_names,
    payload,
    pointed,
    recipe,
    sync,
    use_env,
)
from tests.integration.realapis.slack import SlackServer
from tests.integration.realapis.stripe import StripeServer
from tests.integration.realapis.wordpress import WordPressServer
from tests.integration.realapis.zendesk import ZendeskServer

COUNT = 237
SUCCEEDED, FAILED = RunOutcome.SUCCEEDED, RunOutcome.FAILED
#: The keys of ``source.auth`` that describe it rather than hold a secret.
AUTH_SHAPE = {"type", "in", "name", "grant", "token_url", "scopes", "client_auth"}


# --- the files ---------------------------------------------------------------------------


def test_there_is_one_recipe_per_api() -> None:
    assert sorted(p.stem for p in RECIPES.glob("*.json")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
async def test_syncd_validate_accepts_the_recipe(name: str, tmp_path: Path) -> None:
    # Run where no config.toml is: the built-in defaults, as for someone trying the file.
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "syncd", "validate", str(RECIPES / f"{name}.json")),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=base_environ(),
        cwd=tmp_path,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert (proc.returncode, out.decode(), err.decode()) == (0, "valid\n", "")


def test_the_editors_schema_accepts_every_recipe_and_secrets_are_references() -> None:
    schema = connector_file_schema(Registry.builtin())
    for name in NAMES:
        body = recipe(name)
        jsonschema.validate(body, schema)
        source = body["source"]
        secrets = [v for k, v in source.get("auth", {}).items() if k not in AUTH_SHAPE]
        secrets += [v for k, v in (source.get("headers") or {}).items() if k == "Authorization"]
        if name != "wordpress":  # public posts: no credentials
            assert secrets, name
        assert all("${env:" in v for v in secrets), name
        assert source["url"].startswith("https://"), name


#: What a preview says of the last page of each recipe's crawl (docs/recipes.md, "How it
#: ends"), the pages before it continuing.
LAST_PAGE = {
    "stripe": "'has_more' is false",
    "notion": "'has_more' is false",
    "jira": "237 of 237 records (total 'total')",
    "msgraph": "no next URL at '/@odata.nextLink'",
    "github_rest": 'no Link rel="next"',
    "github_graphql": "'data.repository.issues.pageInfo.hasNextPage' is false",
    "wordpress": "page 3 of 3 (header X-WP-TotalPages)",
    "zendesk": "'end_of_stream' is true",
    "elasticsearch": "empty page",
    "slack": "'has_more' is false",
}


async def test_a_preview_of_each_recipe_warns_of_nothing_and_says_how_it_ends(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with contextlib.AsyncExitStack() as stack:

        async def serve(server: Any) -> Any:
            return await stack.enter_async_context(server)

        graph = await serve(GraphServer(records=COUNT))
        login = await serve(MicrosoftLogin(graph.token))
        stripe, notion = await serve(StripeServer(COUNT)), await serve(NotionServer(COUNT))
        jira = await serve(JiraServer(COUNT))
        rest = await serve(GitHubServer(COUNT, owner="octocat", repo="Hello-World"))
        graphql = await serve(GitHubGraphQLServer(COUNT, owner="octocat", name="Hello-World"))
        wordpress = await serve(WordPressServer(COUNT))
        zendesk = await serve(ZendeskServer(COUNT, page_size=100))
        search, slack = await serve(ElasticsearchServer(COUNT)), await serve(SlackServer(COUNT))
        servers = {
            "stripe": (stripe, {"STRIPE_SECRET_KEY": stripe.api_key}),
            "notion": (notion, {"NOTION_TOKEN": notion.token}),
            "jira": (jira, {"JIRA_EMAIL": jira.email, "JIRA_API_TOKEN": jira.api_token}),
            "msgraph": (
                graph,
                {
                    "AZURE_TENANT_ID": "contoso.onmicrosoft.com",
                    "AZURE_CLIENT_ID": login.client_id,
                    "AZURE_CLIENT_SECRET": login.client_secret,
                },
            ),
            "github_rest": (rest, {"GITHUB_TOKEN": str(rest.token)}),
            "github_graphql": (graphql, {"GITHUB_TOKEN": graphql.token}),
            "wordpress": (wordpress, {}),
            "zendesk": (
                zendesk,
                {"ZENDESK_EMAIL": zendesk.email, "ZENDESK_API_TOKEN": zendesk.api_token},
            ),
            "elasticsearch": (
                search,
                {"ELASTIC_API_KEY": search.api_key_header.removeprefix("ApiKey ")},
            ),
            "slack": (slack, {"SLACK_BOT_TOKEN": slack.token}),
        }
        assert servers.keys() == LAST_PAGE.keys() == set(NAMES)
        for name, (server, env) in servers.items():
            body = pointed(name, server.url, token_base=login.url if name == "msgraph" else None)
            use_env(monkeypatch, body, **env)
            shown = await daemon.preview({"connector": body, "pages": 10})
            assert shown.error is None, name
            assert sum(p.records for p in shown.pages) == COUNT, name
            assert [p.warnings for p in shown.pages] == [()] * len(shown.pages), name
            assert shown.pages[-1].reason == LAST_PAGE[name]
            assert all(p.next_cursor for p in shown.pages[:-1]), name
            assert shown.pages[-1].next_cursor is None, name


# --- each recipe, end to end -----------------------------------------------------------------


async def test_stripe_customers_page_by_the_last_id(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StripeServer(records=COUNT) as api:
        body = pointed("stripe", api.url)
        use_env(monkeypatch, body, STRIPE_SECRET_KEY=api.api_key)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 3)
        listed = api.records  # newest first, as Stripe lists them
        assert await doc_ids(daemon, c.id) == sorted(r["id"] for r in listed)
        assert [r.query for r in api.requests] == [
            {"limit": "100"},
            {"limit": "100", "starting_after": listed[99]["id"]},
            {"limit": "100", "starting_after": listed[199]["id"]},
        ]
        assert {r.headers["Authorization"] for r in api.requests} == {f"Bearer {api.api_key}"}


async def test_notion_query_pages_by_a_body_cursor_and_filters_by_last_edited_time(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with NotionServer(records=COUNT) as api:
        body = pointed("notion", api.url)
        assert body["source"]["url"] == api.query_url
        use_env(monkeypatch, body, NOTION_TOKEN=api.token)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 3)
        created = list(reversed(api.records))  # oldest created first: the recipe's sort
        assert await doc_ids(daemon, c.id) == sorted(p["id"] for p in created)
        assert {r.method for r in api.requests} == {"POST"}
        assert {r.headers["Notion-Version"] for r in api.requests} == {"2022-06-28"}
        assert [r.body.get("start_cursor") for r in api.requests] == [
            None,
            created[100]["id"],
            created[200]["id"],
        ]
        first = api.requests[0].body
        assert first["filter"]["last_edited_time"] == {"on_or_after": "2000-01-01T00:00:00.000Z"}

        # Two pages edited: the next crawl asks for what was edited at or after the mark.
        mark = max(p["last_edited_time"] for p in created)
        api.edit(created[3]["id"], title="Renamed")
        api.edit(created[150]["id"])
        api.requests.clear()
        again = await sync(daemon, c.id)
        assert (again.outcome, again.pages, again.documents_enqueued) == (SUCCEEDED, 1, 2)
        (request,) = api.requests
        assert request.body["filter"]["last_edited_time"] == {"on_or_after": mark}
        renamed = await payload(daemon, c.id, created[3]["id"])
        assert renamed["properties"]["Name"]["title"][0]["plain_text"] == "Renamed"


async def test_jira_search_pages_by_offset_to_the_total_and_sends_jql_dates(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with JiraServer(records=COUNT) as api:
        body = pointed("jira", api.url)
        use_env(monkeypatch, body, JIRA_EMAIL=api.email, JIRA_API_TOKEN=api.api_token)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 5)
        assert await doc_ids(daemon, c.id) == sorted(i["id"] for i in api.records)
        # Jira answers 50 whatever maxResults asks: the offset moves by what came back, and
        # each request after the first starts three early (the overlap that sees a shift).
        assert [(r.query["startAt"], r.query["maxResults"]) for r in api.requests] == [
            (str(offset), "100") for offset in (0, 47, 94, 141, 188)
        ]
        assert {r.query["jql"] for r in api.requests} == {"project = PROJ ORDER BY created ASC"}
        assert {r.headers["Authorization"] for r in api.requests} == {api.basic_auth()}

        # The mark goes into the JQL to the minute, 300 s (the lag) before the latest update.
        latest = max(i["fields"]["updated"] for i in api.records)
        moment = datetime.strptime(latest, "%Y-%m-%dT%H:%M:%S.%f%z") - timedelta(seconds=300)
        since = moment.strftime("%Y/%m/%d %H:%M")
        assert (latest, since) == ("2024-01-01T03:56:39.000+0000", "2024/01/01 03:51")
        api.update("PROJ-3", summary="Renamed")
        api.update("PROJ-120", summary="Renamed too")
        api.requests.clear()
        again = await sync(daemon, c.id)
        assert (again.outcome, again.pages, again.documents_enqueued) == (SUCCEEDED, 1, 2)
        assert [r.query["jql"] for r in api.requests] == [
            f'project = PROJ AND updated >= "{since}" ORDER BY created ASC'
        ]
        third = next(i for i in api.records if i["key"] == "PROJ-3")
        assert (await payload(daemon, c.id, third["id"]))["fields"]["summary"] == "Renamed"


async def test_jira_cloud_search_jql_variant_pages_by_next_page_token(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variant docs/recipes.md gives for Jira Cloud, where ``/rest/api/3/search`` is
    removed: ``/search/jql``, ``nextPageToken`` until ``isLast``."""
    async with JiraServer(records=COUNT, search_removed=True) as api:
        body = pointed("jira", api.url)
        use_env(monkeypatch, body, JIRA_EMAIL=api.email, JIRA_API_TOKEN=api.api_token)
        source = body["source"]
        cloud = changed(
            body,
            url=source["url"] + "/jql",
            params={**source["params"], "maxResults": 100},
            pagination={
                "type": "cursor",
                "cursor_param": "nextPageToken",
                "next_cursor": "nextPageToken",
                "done": "isLast",
            },
        )
        c = await daemon.create_connector(cloud)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 5)
        assert await doc_ids(daemon, c.id) == sorted(i["id"] for i in api.records)
        assert [r.path for r in api.requests] == ["/rest/api/3/search/jql"] * 5
        assert ["nextPageToken" in r.query for r in api.requests] == [False] + [True] * 4

        api.update("PROJ-9", summary="Renamed")
        api.requests.clear()
        again = await sync(daemon, c.id)
        assert (again.outcome, again.documents_enqueued) == (SUCCEEDED, 1)
        assert api.requests[0].query["jql"].startswith('project = PROJ AND updated >= "')
        # The removed endpoint answers 410, as Jira Cloud does.
        removed = await daemon.create_connector({**body, "name": "removed", "page_retries": 0})
        failed = await sync(daemon, removed.id)
        assert failed.outcome is FAILED and failed.error is not None and "410" in failed.error


async def test_microsoft_graph_users_follow_the_next_link_as_given(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with GraphServer(records=COUNT) as graph, MicrosoftLogin(graph.token) as login:
        body = pointed("msgraph", graph.url, token_base=login.url)
        use_env(
            monkeypatch,
            body,
            AZURE_TENANT_ID="contoso.onmicrosoft.com",
            AZURE_CLIENT_ID=login.client_id,
            AZURE_CLIENT_SECRET=login.client_secret,
        )
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 3)
        assert await doc_ids(daemon, c.id) == sorted(u["id"] for u in graph.records)
        first, *following = graph.requests
        assert first.query["$top"] == "100" and "$skiptoken" not in first.query
        assert [graph.url + r.path_qs for r in following] == graph.next_links
        assert [r["tenant"] for r in login.requests] == ["contoso.onmicrosoft.com"]
        assert login.requests[0]["scope"] == "https://graph.microsoft.com/.default"


async def test_github_issues_follow_the_link_header_and_send_since(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with GitHubServer(records=COUNT, owner="octocat", repo="Hello-World") as api:
        body = pointed("github_rest", api.url)
        use_env(monkeypatch, body, GITHUB_TOKEN=str(api.token))
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 3)
        assert await doc_ids(daemon, c.id) == sorted(str(i["id"]) for i in api.records)
        # The Link header's URLs, used as given (they name the repository by id).
        assert [(r.path, r.query.get("page")) for r in api.requests] == [
            ("/repos/octocat/Hello-World/issues", None),
            (f"/repositories/{api.repository_id}/issues", "2"),
            (f"/repositories/{api.repository_id}/issues", "3"),
        ]
        assert {r.headers["X-GitHub-Api-Version"] for r in api.requests} == {"2022-11-28"}

        mark = max(i["updated_at"] for i in api.records)
        assert mark == "2024-01-01T03:56:00Z"
        api.update(5, title="Edited")
        api.close(77)
        api.requests.clear()
        again = await sync(daemon, c.id)
        assert (again.outcome, again.pages, again.documents_enqueued) == (SUCCEEDED, 1, 2)
        assert [r.query.get("since") for r in api.requests] == [mark]
        closed = next(i for i in api.records if i["number"] == 77)
        assert (await payload(daemon, c.id, str(closed["id"])))["state"] == "closed"


async def test_github_primary_rate_limit_is_waited_out_until_the_reset(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two requests per two-second window: the third page is refused with GitHub's 403.
    async with GitHubServer(
        records=COUNT, owner="octocat", repo="Hello-World", rate_limit=2, window=2
    ) as api:
        body = pointed("github_rest", api.url)
        use_env(monkeypatch, body, GITHUB_TOKEN=str(api.token))
        c = await daemon.create_connector(body)
        await daemon.trigger_sync(c.id)
        held = await daemon.wait_connector(c.id, lambda c: c.waiting is not None, timeout=10)
        assert held.waiting is not None and held.waiting.reason is WaitReason.HOST_COOLDOWN
        reset = api.reset_at
        assert reset is not None and len(api.requests) == 3 and api.used == 2
        assert held.waiting.until.timestamp() >= reset
        await asyncio.wait_for(daemon.wait_run(c.id), 15)
        runs, _ = await daemon.list_runs(c.id, limit=1)
        assert (runs[0].outcome, runs[0].error, runs[0].pages) == (SUCCEEDED, None, 3)
        assert await doc_ids(daemon, c.id) == sorted(str(i["id"]) for i in api.records)
        # The refused page was asked again once, in the next window.
        assert [r.query.get("page") for r in api.requests] == [None, "2", "3", "3"]
        assert api.reset_at is not None and api.reset_at > reset and api.used == 1
        after = await daemon.get_connector(c.id)
        assert after.waiting is None


async def test_github_graphql_issues_page_by_end_cursor_in_the_variables(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with GitHubGraphQLServer(records=COUNT, owner="octocat", name="Hello-World") as api:
        body = pointed("github_graphql", api.url)
        use_env(monkeypatch, body, GITHUB_TOKEN=api.token)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 3)
        assert await doc_ids(daemon, c.id) == sorted(i["id"] for i in api.records)
        sent = [r.body["variables"] for r in api.requests]
        assert sent[0] == {"owner": "octocat", "name": "Hello-World"}
        # Each `after` is the endCursor of the page before: the 100th and 200th issues'.
        assert [_graphql_position(v["after"]) for v in sent[1:]] == [100, 200]

        mark = max(i["updatedAt"] for i in api.records)
        api.touch([3, 7])
        api.requests.clear()
        again = await sync(daemon, c.id)
        assert (again.outcome, again.pages, again.documents_enqueued) == (SUCCEEDED, 1, 2)
        assert [r.body["variables"].get("since") for r in api.requests] == [mark]
        third = next(i for i in api.records if i["number"] == 3)
        assert (await payload(daemon, c.id, third["id"]))["title"] == "Issue 3 (edited)"


def _graphql_position(cursor: str) -> int:
    """The issue number a cursor of the GraphQL fixture points after."""
    text = base64.b64decode(cursor).decode().removeprefix("cursor:v2:")
    number: int = json.loads(text)[2]
    return number


async def test_wordpress_posts_end_on_the_total_pages_header_or_the_400_past_the_last(
    daemon: Daemon,
) -> None:
    async with WordPressServer(records=COUNT) as api:
        body = pointed("wordpress", api.url)
        assert env_names(body) == set()
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 3)
        assert await doc_ids(daemon, c.id) == sorted(str(p["id"]) for p in api.records)
        assert [(r.query["page"], r.query["per_page"]) for r in api.requests] == [
            ("1", "100"),
            ("2", "100"),
            ("3", "100"),
        ]
        preview = await daemon.preview({"connector": body, "pages": 5})
        assert [p.reason for p in preview.pages] == [
            f"page {n} of 3 (header X-WP-TotalPages)" for n in (1, 2, 3)
        ]

        # 200 posts, and no X-WP-TotalPages configured: X-WP-Total ends it after page 2.
        api.set_records(200)
        totalled = changed(body, pagination={**body["source"]["pagination"]})
        del totalled["source"]["pagination"]["total_pages_header"]
        preview = await daemon.preview({"connector": totalled, "pages": 5})
        assert [(p.records, p.reason) for p in preview.pages] == [
            (100, "page not empty"),
            (100, "200 of 200 records (header X-WP-Total)"),
        ]
        # Neither: WordPress's 400 for page 3 ends it.
        bare = changed(totalled, pagination={**totalled["source"]["pagination"]})
        del bare["source"]["pagination"]["total_header"]
        preview = await daemon.preview({"connector": bare, "pages": 5})
        assert preview.error is None
        assert [(p.records, p.reason) for p in preview.pages] == [
            (100, "page not empty"),
            (100, "page not empty"),
            (0, "status 400 past the last page (end_status)"),
        ]
        api.requests.clear()
        await daemon.update_connector(c.id, {"source": bare["source"]})
        again = await sync(daemon, c.id)
        assert (again.outcome, again.error) == (SUCCEEDED, None)
        assert [r.query["page"] for r in api.requests] == ["1", "2", "3"]
        # A page-numbered list can shift under a deletion: the 37 posts gone wait for a
        # second complete crawl's word (prune_confirmations defaults to 2 for `page`).
        assert again.awaiting_confirmation == 37
        confirmed = await sync(daemon, c.id)
        assert (confirmed.outcome, confirmed.awaiting_confirmation) == (SUCCEEDED, 0)
        assert await doc_ids(daemon, c.id) == sorted(str(p["id"]) for p in api.records)


async def test_zendesk_export_follows_after_url_to_the_end_of_stream(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ZendeskServer(records=COUNT, page_size=100) as api:
        body = pointed("zendesk", api.url)
        use_env(monkeypatch, body, ZENDESK_EMAIL=api.email, ZENDESK_API_TOKEN=api.api_token)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 3)
        assert await doc_ids(daemon, c.id) == sorted(str(t["id"]) for t in api.records)
        assert api.requests[0].query == {"start_time": "0"}
        assert [set(r.query) for r in api.requests[1:]] == [{"cursor"}, {"cursor"}]
        assert {r.headers["Authorization"] for r in api.requests} == {api.basic_auth}

        mark = max(t["generated_timestamp"] for t in api.records)
        api.touch([5, 9])
        api.requests.clear()
        again = await sync(daemon, c.id)
        assert (again.outcome, again.pages, again.documents_enqueued) == (SUCCEEDED, 1, 2)
        assert [r.query for r in api.requests] == [{"start_time": str(mark)}]
        touched = await payload(daemon, c.id, "5")
        assert touched["generated_timestamp"] > mark


async def test_zendesk_429_with_retry_after_is_waited_out(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two exports a second instead of ten a minute: the third request is refused.
    async with ZendeskServer(records=COUNT, page_size=100, rate_limit=2, rate_window=1) as api:
        body = pointed("zendesk", api.url)
        use_env(monkeypatch, body, ZENDESK_EMAIL=api.email, ZENDESK_API_TOKEN=api.api_token)
        c = await daemon.create_connector(body)
        await daemon.trigger_sync(c.id)
        held = await daemon.wait_connector(c.id, lambda c: c.waiting is not None, timeout=10)
        assert held.waiting is not None and held.waiting.reason is WaitReason.HOST_COOLDOWN
        await asyncio.wait_for(daemon.wait_run(c.id), 15)
        runs, _ = await daemon.list_runs(c.id, limit=1)
        assert (runs[0].outcome, runs[0].error, runs[0].pages) == (SUCCEEDED, None, 3)
        assert len(api.requests) == 4  # the refused one, asked again after Retry-After
        assert await doc_ids(daemon, c.id) == sorted(str(t["id"]) for t in api.records)


async def test_elasticsearch_search_after_the_last_hits_sort_values(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ElasticsearchServer(records=COUNT) as api:
        body = pointed("elasticsearch", api.url)
        key = api.api_key_header.removeprefix("ApiKey ")
        use_env(monkeypatch, body, ELASTIC_API_KEY=key)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        # 100, 100, 37, then the empty page that ends a last_record crawl.
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 4)
        assert await doc_ids(daemon, c.id) == sorted(d["id"] for d in api.records)
        assert [r.body.get("search_after") for r in api.requests] == [
            None,
            _sort_values(api.records[99]),
            _sort_values(api.records[199]),
            _sort_values(api.records[236]),
        ]
        assert {r.headers["Authorization"] for r in api.requests} == {api.api_key_header}


def _sort_values(document: dict[str, Any]) -> list[Any]:
    """The ``sort`` of a hit under the recipe's sort: ``updated_at`` in epoch ms, ``id``."""
    moment = datetime.fromisoformat(document["updated_at"].replace("Z", "+00:00"))
    return [int(moment.timestamp() * 1000), document["id"]]


async def test_slack_history_pages_by_next_cursor_and_reads_new_messages_by_oldest(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SlackServer(records=COUNT) as api:
        body = pointed("slack", api.url)
        use_env(monkeypatch, body, SLACK_BOT_TOKEN=api.token)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error, run.pages) == (SUCCEEDED, None, 2)
        assert await doc_ids(daemon, c.id) == sorted(m["ts"] for m in api.records)
        first, second = api.requests
        assert first.query == {"channel": api.channel, "limit": "200"}
        assert second.query["cursor"] and second.query["limit"] == "200"

        newest = max(m["ts"] for m in api.records)
        added = api.add(5)
        api.requests.clear()
        again = await sync(daemon, c.id)
        assert (again.outcome, again.pages, again.documents_enqueued) == (SUCCEEDED, 1, 5)
        assert [r.query.get("oldest") for r in api.requests] == [newest]
        assert await doc_ids(daemon, c.id) == sorted(m["ts"] for m in api.records)
        assert len(added) == 5


async def test_errors_in_a_2xx_answer_fail_the_run_with_the_apis_message(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SlackServer(records=3) as slack, GitHubGraphQLServer(records=3) as graphql:
        body = pointed("slack", slack.url)
        use_env(monkeypatch, body, SLACK_BOT_TOKEN=slack.token)
        body["source"]["params"]["channel"] = "C0NOTTHERE"
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)
        assert (run.outcome, run.error) == (
            FAILED,
            "source reported an error ('ok' is false): channel_not_found",
        )
        body = pointed("github_graphql", graphql.url)
        use_env(monkeypatch, body, GITHUB_TOKEN=graphql.token)
        c = await daemon.create_connector(body)
        run = await sync(daemon, c.id)  # the repository is octocat/Hello-World, not served
        assert run.outcome is FAILED and run.error is not None
        assert run.error.startswith("source reported an error ('errors' is [")
        assert run.error.endswith(
            ": Could not resolve to a Repository with the name 'octocat/Hello-World'."
        )


# --- resuming after a failed page, on both backend pairs -----------------------------------


async def _fail_then_resume(daemon: Daemon, body: dict[str, Any]) -> tuple[str, int]:
    """Create the connector (no page retries) and sync twice: the first run must fail on
    the page the server was told to fail, the second complete. Its id and the pages the
    failed run committed."""
    c = await daemon.create_connector({**body, "page_retries": 0})
    failed = await sync(daemon, c.id)
    assert failed.outcome is FAILED and failed.error is not None and "500" in failed.error
    resumed = await sync(daemon, c.id)
    assert (resumed.outcome, resumed.error) == (SUCCEEDED, None)
    return c.id, failed.pages


async def test_a_notion_body_cursor_resumes_the_failed_page(
    make_any_daemon: DaemonFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    async with NotionServer(records=COUNT) as api:
        body = pointed("notion", api.url)
        use_env(monkeypatch, body, NOTION_TOKEN=api.token)
        api.fail_next(500, after=1)  # the second page
        cid, committed = await _fail_then_resume(daemon, body)
        created = list(reversed(api.records))
        failed, resumed = api.requests[1], api.requests[2]
        assert failed.body["start_cursor"] == resumed.body["start_cursor"] == created[100]["id"]
        assert committed == 1 and len(api.requests) == 4
        assert await doc_ids(daemon, cid) == sorted(p["id"] for p in created)


async def test_a_stripe_last_record_cursor_resumes_the_failed_page(
    make_any_daemon: DaemonFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    async with StripeServer(records=COUNT) as api:
        body = pointed("stripe", api.url)
        use_env(monkeypatch, body, STRIPE_SECRET_KEY=api.api_key)
        api.fail_next(500, after=2)  # the third page
        cid, committed = await _fail_then_resume(daemon, body)
        listed = api.records
        failed, resumed = api.requests[2], api.requests[3]
        assert failed.query["starting_after"] == resumed.query["starting_after"]
        assert resumed.query["starting_after"] == listed[199]["id"]
        assert committed == 2 and len(api.requests) == 4
        assert await doc_ids(daemon, cid) == sorted(c["id"] for c in listed)


async def test_a_stripe_cursor_deleted_meanwhile_starts_the_crawl_over(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StripeServer(records=COUNT) as api:
        body = pointed("stripe", api.url)
        use_env(monkeypatch, body, STRIPE_SECRET_KEY=api.api_key)
        api.fail_next(500, after=2)  # the third page
        c = await daemon.create_connector({**body, "page_retries": 0})
        failed = await sync(daemon, c.id)
        assert (failed.outcome, failed.pages) == (FAILED, 2)
        gone = api.records[199]["id"]  # the resume cursor
        api.delete(gone)
        api.requests.clear()
        again = await sync(daemon, c.id)
        # Stripe's 400 resource_missing for the cursor: the crawl starts over, completes, and
        # the customer it no longer lists is deleted.
        assert (again.outcome, again.error, again.pages, again.deleted) == (SUCCEEDED, None, 3, 1)
        assert again.note is not None and "rejected" in again.note
        listed = api.records
        assert [r.query.get("starting_after") for r in api.requests] == [
            gone,
            None,
            listed[99]["id"],
            listed[199]["id"],
        ]
        await daemon.wait_documents(c.id, lambda n: n[DocStatus.DELETED] == 1, timeout=10)
        assert await doc_ids(daemon, c.id) == sorted(r["id"] for r in listed)


async def test_an_elasticsearch_sort_tuple_resumes_the_failed_page(
    make_any_daemon: DaemonFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    async with ElasticsearchServer(records=COUNT) as api:
        body = pointed("elasticsearch", api.url)
        use_env(monkeypatch, body, ELASTIC_API_KEY=api.api_key_header.removeprefix("ApiKey "))
        api.fail_next(500, after=1)  # the second page
        cid, committed = await _fail_then_resume(daemon, body)
        failed, resumed = api.requests[1], api.requests[2]
        assert failed.body["search_after"] == resumed.body["search_after"]
        assert resumed.body["search_after"] == _sort_values(api.records[99])
        assert committed == 1 and len(api.requests) == 5
        assert await doc_ids(daemon, cid) == sorted(d["id"] for d in api.records)


async def test_a_jira_offset_moved_by_records_received_resumes_the_failed_page(
    make_any_daemon: DaemonFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    async with JiraServer(records=COUNT) as api:
        body = pointed("jira", api.url)
        use_env(monkeypatch, body, JIRA_EMAIL=api.email, JIRA_API_TOKEN=api.api_token)
        api.fail_next(500, after=2)  # the third page
        cid, committed = await _fail_then_resume(daemon, body)
        starts = [r.query["startAt"] for r in api.requests]
        # Pages of 50 although 100 were asked: the resume offset is 94 (100, three early
        # for the overlap), not 200.
        assert starts == ["0", "47", "94", "94", "141", "188"]
        assert committed == 2
        assert await doc_ids(daemon, cid) == sorted(i["id"] for i in api.records)


# --- the guards against a partial crawl -------------------------------------------------------


async def test_jira_with_plain_offset_would_stop_at_the_first_page_of_50(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with JiraServer(records=COUNT) as api:
        body = pointed("jira", api.url)
        use_env(monkeypatch, body, JIRA_EMAIL=api.email, JIRA_API_TOKEN=api.api_token)
        plain = changed(body, pagination={**body["source"]["pagination"]})
        del plain["source"]["pagination"]["total"]
        shown = await daemon.preview({"connector": plain, "pages": 5})
        assert [(p.records, p.reason) for p in shown.pages] == [
            (50, "short page (50 of 100), no total configured")
        ]
        shown = await daemon.preview({"connector": body, "pages": 5})
        assert [p.reason for p in shown.pages] == [
            f"{n} of 237 records (total 'total')" for n in (50, 97, 144, 191, 237)
        ]


@pytest.mark.parametrize(
    ("name", "signal", "wrong"),
    [("stripe", "more", "hasMore"), ("zendesk", "done", "endOfStream")],
)
async def test_a_configured_end_signal_missing_from_a_page_fails_the_run_naming_it(
    name: str, signal: str, wrong: str, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    stripe, zendesk = StripeServer(records=COUNT), ZendeskServer(records=COUNT, page_size=100)
    async with stripe, zendesk:
        if name == "stripe":
            body = pointed(name, stripe.url)
            use_env(monkeypatch, body, STRIPE_SECRET_KEY=stripe.api_key)
        else:
            body = pointed(name, zendesk.url)
            use_env(
                monkeypatch, body, ZENDESK_EMAIL=zendesk.email, ZENDESK_API_TOKEN=zendesk.api_token
            )
        body["source"]["pagination"][signal] = wrong
        c = await daemon.create_connector({**body, "page_retries": 0})
        run = await sync(daemon, c.id)
        assert (run.outcome, run.pages) == (FAILED, 0)
        assert run.error == (
            f"end signal {wrong!r} not found in the response: cannot tell whether more pages follow"
        )
        assert await doc_ids(daemon, c.id) == []


async def test_a_dotted_odata_next_link_gets_a_preview_warning_naming_the_pointer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = Daemon(embedded_config(tmp_path))  # serving its API
    await daemon.start()
    try:
        async with (
            GraphServer(records=COUNT) as graph,
            MicrosoftLogin(graph.token) as login,
            aiohttp.ClientSession() as http,
        ):
            body = pointed("msgraph", graph.url, token_base=login.url)
            use_env(
                monkeypatch,
                body,
                AZURE_TENANT_ID="contoso.onmicrosoft.com",
                AZURE_CLIENT_ID=login.client_id,
                AZURE_CLIENT_SECRET=login.client_secret,
            )
            dotted = changed(body, pagination={"type": "next_url", "next_url": "@odata.nextLink"})
            url = f"{daemon.api_address}/connectors/preview"
            async with http.post(url, json={"connector": dotted, "pages": 3}) as reply:
                assert reply.status == 200
                answer = await reply.json()
            (page,) = answer["pages"]
            assert (page["records"], page["reason"]) == (100, "no next URL at '@odata.nextLink'")
            assert page["warnings"] == [
                "'@odata.nextLink' is not in the first page's response (the key"
                " '@odata.nextLink' is: write the JSON Pointer '/@odata.nextLink')"
            ]
            async with http.post(url, json={"connector": body, "pages": 3}) as reply:
                answer = await reply.json()
            assert [(p["records"], p["reason"], p["warnings"]) for p in answer["pages"]] == [
                (100, "next URL at '/@odata.nextLink'", []),
                (100, "next URL at '/@odata.nextLink'", []),
                (37, "no next URL at '/@odata.nextLink'", []),
            ]
    finally:
        await daemon.stop()
