"""The dashboard shows a connector's crawl state and starts a full crawl (DESIGN.md §12), in
a real browser against a real daemon and a source that moves
(:mod:`tests.integration.movingsource`). Nothing sleeps to wait for state."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from syncd.models import DocStatus, RunOutcome
from tests.integration.movingsource import MovingSource

from .conftest import Dashboard

pytestmark = pytest.mark.needs("chromium")


async def test_the_crawl_state_and_a_full_crawl_from_the_dashboard(
    dashboard: Dashboard, page: Page, screenshots: Path
) -> None:
    d = dashboard
    async with MovingSource(25, per_page=10) as moving:
        source = {
            "type": "http",
            "url": f"{moving.url}/keyset",
            "records": "data",
            "pagination": {
                "type": "cursor",
                "cursor_param": "after",
                "next_cursor": "next_cursor",
            },
            "incremental": {"field": "updated_at", "param": "since"},
        }
        c = await d.daemon.create_connector({"name": "moving", "source": source})
        await d.daemon.trigger_sync(c.id)
        await d.daemon.wait_run(c.id)
        mark = max(r["updated_at"] for r in moving.records.values())

        await page.goto(f"{d.url}#/c/{c.id}")
        await expect(page.locator("#c-mark")).to_have_text(mark)
        await expect(page.locator("#c-mark-set")).to_contain_text("by a crawl")
        await expect(page.locator("#c-crawl")).to_have_text("none")
        await expect(page.locator("#c-next-crawl")).to_have_text("incremental")
        await expect(page.locator("#c-last-full")).to_have_text("—")
        await expect(page.locator("#act-full")).to_be_enabled()

        # Gone at the source: only a full crawl sees it. The button asks for one.
        moving.delete(4)
        moving.requests.clear()
        await page.locator("#act-full").click()
        await expect(page.locator("#notice")).to_have_text("Full crawl of moving started")
        await expect(page.locator("#c-runs tr[data-outcome=succeeded]")).to_have_count(2)
        await d.daemon.wait_run(c.id)
        runs, _ = await d.daemon.list_runs(c.id, limit=1)
        assert (runs[0].outcome, runs[0].deleted) == (RunOutcome.SUCCEEDED, 1)
        assert [q.get("since") for _, q in moving.requests] == [None, None, None]
        counts = await d.daemon.document_counts(c.id)
        assert (counts[DocStatus.INDEXED], counts[DocStatus.DELETED]) == (24, 1)
        await expect(page.locator("#c-last-full")).not_to_have_text("—")
        await expect(page.locator("#c-mark")).to_have_text(mark)

        # A mark set elsewhere is shown once the page reloads its view.
        await d.daemon.set_state(c.id, "2020-01-01T00:00:00Z")
        await page.reload()
        await expect(page.locator("#c-mark")).to_have_text("2020-01-01T00:00:00Z")
        await expect(page.locator("#c-mark-set")).to_contain_text("by hand")
        await page.screenshot(path=screenshots / "crawl-state.png")

        # Reset elsewhere: no mark, and the next crawl is a full one.
        await d.daemon.reset_state(c.id)
        await page.reload()
        await expect(page.locator("#c-mark")).to_have_text("none")
        await expect(page.locator("#c-next-crawl")).to_have_text("full")
