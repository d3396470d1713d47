"""The dashboard's daemon view lists every instance ``GET /status`` reports."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from syncd.models import utcnow

from .conftest import Dashboard

pytestmark = pytest.mark.needs("chromium")


async def test_the_daemon_view_lists_every_instance(dashboard: Dashboard, page: Page) -> None:
    d = dashboard
    await d.daemon.heartbeat()
    other = {
        "instance_id": "node-2",
        "version": "9.9.9",
        "started_at": "2024-05-01T10:00:00Z",
        "running_syncs": 2,
        "workers": {"concurrency": 8, "busy": 3},
        "loop_lag_seconds": 0.0125,
    }
    await d.daemon.store.heartbeat_instance("node-2/abc", other, utcnow())
    await page.goto(d.url)
    await page.locator("a[data-nav=daemon]").click()
    me = page.locator(f'#d-nodes tr[data-owner="{d.daemon.owner}"]')
    await expect(me).to_contain_text(d.daemon.instance_id)
    await expect(me).to_contain_text(f"0 of {d.daemon.config.workers.concurrency}")
    await expect(me.locator("td").nth(6)).to_have_text(re.compile(r"^\d+\.\d ms$"))
    them = page.locator('#d-nodes tr[data-owner="node-2/abc"]')
    await expect(them).to_contain_text("node-2")
    await expect(them).to_contain_text("9.9.9")
    await expect(them).to_contain_text("3 of 8")
    await expect(them.locator("td").nth(6)).to_have_text("12.5 ms")
