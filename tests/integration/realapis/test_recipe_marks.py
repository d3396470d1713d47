"""An incremental recipe end to end on both backend pairs: ``docs/recipes/jira.json`` crawls
the Jira fixture completely, then each later crawl sends the mark the store kept in Jira's
JQL date format (to the minute, UTC), moved back by the recipe's ``lag`` (300 s), and picks up
exactly what changed — the issues of the lookback window are fetched again but, unchanged,
not indexed again."""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta
from typing import Any

import pytest
from yarl import URL

from syncd.models import RunOutcome
from tests.integration.conftest import DaemonFactory
from tests.integration.realapis.jira import JiraServer
from tests.integration.realapis.recipes import doc_ids, payload, pointed, recipe, sync, use_env

COUNT = 237
JIRA_TIME = "%Y-%m-%dT%H:%M:%S.%f%z"  # 2024-01-01T03:56:39.000+0000
JQL_DATE = "%Y/%m/%d %H:%M"


def updated(issue: dict[str, Any]) -> datetime:
    return datetime.strptime(issue["fields"]["updated"], JIRA_TIME)


def since_for(issues: list[dict[str, Any]], lag: float) -> tuple[str, datetime]:
    """The JQL date the next crawl must send after a crawl that saw ``issues``: the latest
    ``updated`` less ``lag``, to the minute; and that minute as a time."""
    moment = max(updated(i) for i in issues) - timedelta(seconds=lag)
    text = moment.strftime(JQL_DATE)
    return text, datetime.strptime(text, JQL_DATE).replace(tzinfo=moment.tzinfo)


def jql(since: str) -> str:
    return f'project = PROJ AND updated >= "{since}" ORDER BY created ASC'


async def test_jira_marks_are_sent_in_jql_format_with_the_lag_on_both_backends(
    make_any_daemon: DaemonFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    inc = recipe("jira")["source"]["incremental"]
    assert (inc["format"], inc["lag"]) == (JQL_DATE, 300)
    daemon = make_any_daemon()
    await daemon.start()
    async with JiraServer(records=COUNT) as api:
        host = URL(api.url).host
        assert host is not None and ipaddress.ip_address(host).is_loopback
        body = pointed("jira", api.url)
        use_env(monkeypatch, body, JIRA_EMAIL=api.email, JIRA_API_TOKEN=api.api_token)
        c = await daemon.create_connector(body)

        # The first crawl: no mark yet, the recipe's own JQL, every issue.
        first = await sync(daemon, c.id)
        assert (first.outcome, first.error, first.pages) == (RunOutcome.SUCCEEDED, None, 5)
        assert {r.query["jql"] for r in api.requests} == {"project = PROJ ORDER BY created ASC"}
        assert await doc_ids(daemon, c.id) == sorted(i["id"] for i in api.records)

        # Changes after the mark: one issue edited, two created.
        since, minute = since_for(api.records, 300)
        assert since == "2024/01/01 03:51"  # 03:56:39 (PROJ-237) less 300 s, to the minute
        window = [i["id"] for i in api.records if updated(i) >= minute]
        # PROJ-232 … PROJ-237: the lookback, widened by the minute JQL rounds down to.
        assert len(window) == 6
        api.update("PROJ-3", summary="Renamed")
        added = api.add(2)
        api.requests.clear()

        second = await sync(daemon, c.id)
        assert (second.outcome, second.error, second.pages) == (RunOutcome.SUCCEEDED, None, 1)
        assert [r.query["jql"] for r in api.requests] == [jql(since)]
        # The lookback window again (unchanged: not indexed again) and the three changes.
        assert (second.documents_seen, second.documents_enqueued) == (len(window) + 3, 3)
        assert await doc_ids(daemon, c.id) == sorted(i["id"] for i in api.records)
        renamed = next(i for i in api.records if i["key"] == "PROJ-3")
        assert (await payload(daemon, c.id, renamed["id"]))["fields"]["summary"] == "Renamed"
        for issue in added:
            assert (await payload(daemon, c.id, issue["id"]))["key"] == issue["key"]

        # The mark the backend kept moved with the second crawl: the third sends the newest
        # update (PROJ-239's creation) less the lag, and finds only the window.
        since, minute = since_for(api.records, 300)
        assert since > "2024/01/01 03:51"
        window = [i["id"] for i in api.records if updated(i) >= minute]
        api.requests.clear()
        third = await sync(daemon, c.id)
        assert (third.outcome, third.pages) == (RunOutcome.SUCCEEDED, 1)
        assert [r.query["jql"] for r in api.requests] == [jql(since)]
        assert (third.documents_seen, third.documents_enqueued) == (len(window), 0)
