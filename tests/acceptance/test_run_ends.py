"""How a crawl ended, through the real ``syncd`` CLI against a real daemon (both subprocesses)
on both backend pairs: a ``cursor`` connector whose ``next_cursor`` is misspelt reads one page
of a 50-record source and succeeds — and the API, ``syncd sync --follow``, ``syncd runs`` and
the daemon's log say how the crawl ended and warn of the path; corrected, the next run reads
the whole source and warns of nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.acceptance.conftest import Harness, http_source, wait_until
from tests.integration.sourceserver import SourceServer, make_records

TYPO = "next cursor path 'cursor' was absent from every page: check `pagination.next_cursor`"
BACKENDS = ["sqlite+memory", "postgres+redis"]


@pytest.fixture
async def fifty() -> AsyncIterator[SourceServer]:
    """50 records in pages of 10 (``next_cursor``: ``page-1`` … ``page-4``, then null)."""
    async with SourceServer(50, page_size=10) as server:
        yield server


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """The configuration sections of the parametrised backend pair."""
    if request.param == "sqlite+memory":
        return {}
    dsn: str = request.getfixturevalue("postgres_dsn")
    prefix: str = request.getfixturevalue("redis_prefix")
    redis_url: str = request.getfixturevalue("redis_url")
    return {"store": {"url": dsn}, "queue": {"url": redis_url, "prefix": prefix}}


async def test_a_misspelt_next_cursor_is_told_by_the_api_the_cli_and_the_log(
    harness: Harness, fifty: SourceServer, backend: dict[str, dict[str, Any]]
) -> None:
    harness.write_config(**backend)
    daemon = await harness.start()
    typo = http_source(fifty, pagination={"type": "cursor", "next_cursor": "cursor"})
    definition = harness.root / "tickets.json"
    definition.write_text(json.dumps({"name": "tickets", "source": typo}))
    created = await harness.cli("create", str(definition), "--json")
    assert created.code == 0, created.stderr
    cid = created.json["id"]

    synced = await harness.cli("sync", "tickets", "--follow")
    # A warning, not a failure: the run succeeded, and the command says so.
    assert synced.code == 0, synced.stdout + synced.stderr
    run_id = synced.stdout.splitlines()[0].removeprefix("sync started: run ")
    assert synced.stdout.splitlines()[-4:] == [
        "crawl ended: no next cursor at 'cursor'",
        f"warning: {TYPO}",
        f"run {run_id}: 1 pages, 10 documents seen, 10 indexed",
        "succeeded",
    ]

    answer = await harness.api.get(f"/connectors/{cid}/runs")
    assert answer.status == 200
    [run] = answer.json["data"]
    assert (run["id"], run["outcome"], run["pages"]) == (run_id, "succeeded", 1)
    assert (run["end_reason"], run["warnings"]) == ("no next cursor at 'cursor'", [TYPO])

    table = await harness.cli("runs", "tickets")
    assert table.code == 0, table.stderr
    header, row, warning = table.stdout.splitlines()
    assert header.split()[8:] == ["DELETED", "ENDED", "ERROR"]
    assert row.startswith(run_id) and "no next cursor at 'cursor'" in row
    assert warning == f"warning: run {run_id}: {TYPO}"
    listed = await harness.cli("runs", "tickets", "--json")
    assert listed.json["data"][0]["warnings"] == [TYPO]

    async def logged() -> bool:
        return any(
            line.get("event") == "sync.crawl_warning" and line.get("run_id") == run_id
            for line in _json_lines(daemon.output)
        )

    await wait_until(logged, "the crawl's warning in the daemon's log")
    [line] = [e for e in _json_lines(daemon.output) if e.get("event") == "sync.crawl_warning"]
    assert (line["level"], line["warning"]) == ("warning", TYPO)

    # Corrected: the whole source, an end, no warning.
    fixed = harness.root / "fixed.json"
    fixed.write_text(json.dumps({"source": http_source(fifty)}))
    updated = await harness.cli("update", "tickets", str(fixed))
    assert updated.code == 0, updated.stderr
    again = await harness.cli("sync", "tickets", "--follow")
    assert again.code == 0, again.stdout + again.stderr
    assert "warning" not in again.stdout
    assert again.stdout.splitlines()[-3:-1] == [
        "crawl ended: no next cursor at 'next_cursor'",
        f"run {again.stdout.splitlines()[0].removeprefix('sync started: run ')}: "
        "5 pages, 50 documents seen, 40 indexed",  # the first 10 are unchanged
    ]
    documents = await harness.api.get(f"/connectors/{cid}/documents?limit=100")
    assert sorted(d["external_id"] for d in documents.json["data"]) == [
        r["id"] for r in make_records(50)
    ]


def _json_lines(output: str) -> list[dict[str, Any]]:
    """The JSON log lines of a daemon's output."""
    lines = []
    for text in output.splitlines():
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines
