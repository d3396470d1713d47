"""Steering a crawl with the ``syncd`` CLI (``sync --full``, ``sync --backfill``, ``state``),
the CLI and the daemon both subprocesses, against a source that moves
(:mod:`tests.integration.movingsource`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.acceptance.conftest import Harness
from tests.acceptance.test_cli import described
from tests.integration.movingsource import MovingSource

JAN1, JAN2, JAN3 = (f"2099-01-0{d}T00:00:00.000000Z" for d in (1, 2, 3))


@pytest.fixture
async def moving() -> AsyncIterator[MovingSource]:
    async with MovingSource(25, per_page=10) as server:
        yield server


def newest(server: MovingSource) -> str:
    return max(r["updated_at"] for r in server.records.values())


async def live(harness: Harness, cid: str) -> dict[str, Any]:
    """The connector's live documents (external id → payload), read through the API."""
    listed = await harness.api.ok("GET", f"/connectors/{cid}/documents?limit=1000")
    return {
        d["external_id"]: (
            await harness.api.ok("GET", f"/connectors/{cid}/documents/{d['external_id']}")
        )["payload"]
        for d in listed["data"]
        if d["status"] != "deleted"
    }


async def test_full_crawls_backfills_and_the_mark_through_the_cli(
    harness: Harness, moving: MovingSource
) -> None:
    harness.write_config()
    await harness.start()
    definition = harness.root / "moving.json"
    source = {
        "type": "http",
        "url": f"{moving.url}/keyset",
        "records": "data",
        "pagination": {"type": "cursor", "cursor_param": "after", "next_cursor": "next_cursor"},
        "incremental": {"field": "updated_at", "param": "since", "format": "iso8601"},
    }
    definition.write_text(json.dumps({"name": "moving", "source": source, "page_retries": 0}))
    created = await harness.cli("create", str(definition), "--json")
    assert created.code == 0, created.stderr
    cid = created.json["id"]
    assert (await harness.cli("sync", "moving", "--follow")).code == 0

    shown = await harness.cli("state", "moving")
    assert shown.code == 0, shown.stderr
    fields = described(shown.stdout)
    assert (fields["incremental"], fields["mark"]) == ("yes", newest(moving))
    assert fields["mark set"].endswith(")") and " by crawl " in fields["mark set"]
    assert (fields["crawl"], fields["next crawl"], fields["last full crawl"]) == (
        "-",
        "incremental crawl",
        "-",
    )

    # A full crawl on demand deletes what is gone at the source.
    moving.delete(9)
    full = await harness.cli("sync", "moving", "--full", "--follow")
    assert full.code == 0, full.stderr
    first = full.stdout.splitlines()[0]
    assert first.startswith("sync started: run ") and first.endswith(" (full crawl)")
    assert full.last_line == "succeeded"
    assert await live(harness, cid) == moving.expected()
    assert described((await harness.cli("state", cid)).stdout)["last full crawl"] != "-"

    # The mark, set by hand, and shown back.
    mark = "2020-01-01T00:00:00Z"
    set_ = await harness.cli("state", "moving", "--set", mark)
    assert set_.code == 0, set_.stderr
    assert described(set_.stdout)["mark"] == mark
    assert described(set_.stdout)["mark set"].endswith(" by hand")
    as_json = await harness.cli("state", "moving", "--json")
    assert (as_json.json["mark"], as_json.json["mark_set_by"]) == (mark, "user")

    # A backfill of a window: only it is synced, and the mark stays.
    moving.records[3].update(version=2, updated_at=JAN1)
    moving.records[12].update(version=2, updated_at=JAN3)
    moving.requests.clear()
    backfill = await harness.cli(
        "sync", "moving", "--backfill", f"2098-12-31T00:00:00Z..{JAN2}", "--follow"
    )
    assert backfill.code == 0, backfill.stderr
    assert backfill.stdout.splitlines()[0].endswith(
        f" (backfill from 2098-12-31T00:00:00Z to {JAN2})"
    )
    assert [q.get("since") for _, q in moving.requests] == ["2098-12-31T00:00:00Z"]
    stored = await live(harness, cid)
    assert (stored["3"]["version"], stored["12"]["version"]) == (2, 1)
    assert (await harness.cli("state", "moving", "--json")).json["mark"] == mark
    [run] = (await harness.api.ok("GET", f"/connectors/{cid}/runs?limit=1"))["data"]
    assert (run["documents_seen"], run["documents_filtered"]) == (1, 1)

    # Reset: the next crawl is a full one.
    reset = await harness.cli("state", "moving", "--reset")
    assert reset.code == 0, reset.stderr
    fields = described(reset.stdout)
    assert (fields["mark"], fields["next crawl"]) == ("-", "full crawl")
    assert (await harness.cli("sync", "moving", "--follow")).code == 0
    assert await live(harness, cid) == moving.expected()
    final = described((await harness.cli("state", "moving")).stdout)
    # Set by that crawl: no later than its start (two records are dated 2099).
    assert " by crawl " in final["mark set"]
    assert mark < final["mark"] < newest(moving)


async def test_steering_mistakes_are_refused(harness: Harness, moving: MovingSource) -> None:
    harness.write_config()
    await harness.start()
    definition = harness.root / "plain.json"
    source = {"type": "http", "url": f"{moving.url}/keyset", "records": "data"}
    definition.write_text(json.dumps({"name": "plain", "source": source}))
    assert (await harness.cli("create", str(definition))).code == 0
    definition.write_text(
        json.dumps(
            {
                "name": "unix",
                "source": {
                    **source,
                    "incremental": {"field": "n", "param": "since", "format": "unix"},
                },
            }
        )
    )
    assert (await harness.cli("create", str(definition))).code == 0

    # Usage: exit 2, nothing sent.
    for args in (
        ("sync", "unix", "--full", "--backfill", "1"),
        ("sync", "unix", "--backfill", "..5"),
        ("sync", "unix", "--backfill", "5.."),
        ("state", "unix", "--set", "1", "--reset"),
    ):
        usage = await harness.cli(*args)
        assert usage.code == 2, args
        assert usage.stdout == ""

    # Refused by the daemon: exit 1, the field named.
    empty = await harness.cli("sync", "unix", "--backfill", "1700000500..1700000000")
    assert (empty.code, empty.stdout) == (1, "")
    assert empty.stderr == "error: 422 body.since: Must be before until\n"
    no_mark = await harness.cli("sync", "plain", "--backfill", "1")
    assert no_mark.code == 1
    assert "body.mode: Must be full" in no_mark.stderr
    unreadable = await harness.cli("state", "unix", "--set", "soon", "--json")
    assert unreadable.code == 1
    error = unreadable.json["error"]
    assert (error["status"], error["problems"]) == (
        422,
        [
            "body.mark: Must be a time (ISO 8601 text, or Unix seconds or milliseconds): the "
            "incremental format 'unix' cannot read 'soon'"
        ],
    )
    reset = await harness.cli("state", "plain", "--reset")
    assert reset.code == 1
    assert "path.id: The connector's source has no `incremental`, so no mark" in reset.stderr
    # A number stays a number; JSON text stays text.
    assert (await harness.cli("state", "unix", "--set", "1700000000", "--json")).json["mark"] == (
        1700000000
    )
    quoted = await harness.cli("state", "unix", "--set", '"1700000000"', "--json")
    assert quoted.json["mark"] == "1700000000"
