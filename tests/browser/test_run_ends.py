"""The dashboard's runs say how each crawl ended, and warn of a misspelt path: a run that
ends while the page is open arrives through the events stream with its end and warning."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.integration.conftest import http_source
from tests.integration.sourceserver import SourceServer

from .conftest import Dashboard

pytestmark = pytest.mark.needs("chromium")

TYPO = "next cursor path 'cursor' was absent from every page: check `pagination.next_cursor`"


async def test_the_runs_show_how_the_crawl_ended_and_its_warning(
    dashboard: Dashboard, page: Page, screenshots: Path
) -> None:
    d = dashboard
    async with SourceServer(50) as server:
        source = http_source(server)
        source["pagination"] = {**source["pagination"], "next_cursor": "cursor"}
        c = await d.daemon.create_connector({"name": "tickets", "source": source})
        await page.goto(f"{d.url}#/c/{c.id}")
        await expect(page.locator("#live")).to_have_attribute("data-mode", "live")
        await expect(page.locator("#c-runs")).to_contain_text("No runs yet")

        # The misspelt path: one page, a success that warns.
        typo = await d.daemon.trigger_sync(c.id)
        await d.daemon.wait_run(c.id)
        row = page.locator(f"#c-runs tr[data-id='{typo}']")
        await expect(row.locator("[data-k=outcome]")).to_have_text("succeeded")
        await expect(row.locator("[data-k=end-reason]")).to_have_text("no next cursor at 'cursor'")
        await expect(row.locator("[data-k=warning]")).to_have_text(f"⚠ {TYPO}")
        await page.screenshot(path=screenshots / "run-warning.png")

        # Corrected: the whole source, its end, no warning; the first run keeps its own.
        await d.daemon.update_connector(c.id, {"source": http_source(server)})
        fixed = await d.daemon.trigger_sync(c.id)
        await d.daemon.wait_run(c.id)
        again = page.locator(f"#c-runs tr[data-id='{fixed}']")
        await expect(again.locator("[data-k=end-reason]")).to_have_text(
            "no next cursor at 'next_cursor'"
        )
        await expect(again.locator("[data-k=warning]")).to_have_count(0)
        await expect(page.locator("#c-runs tr")).to_have_count(2)
        await expect(row.locator("[data-k=warning]")).to_have_count(1)
