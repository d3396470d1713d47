"""The dashboard at ``/ui/`` in a real browser against a real daemon and a real local source.

Each test waits on conditions (Playwright's ``expect`` polls the page; the daemon's
``wait_*``); none sleeps to wait for state.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Page, Request, Route, expect

from syncd.models import DocStatus, RunOutcome
from syncd.ui import CONTENT_SECURITY_POLICY
from tests.integration.conftest import http_source
from tests.integration.sourceserver import SourceServer

from .conftest import TOKEN, Dashboard, Proxy, StartDashboard

pytestmark = pytest.mark.needs("chromium")

SECRET = "Bearer sup3r-s3cret"


async def create(d: Dashboard, name: str, server: SourceServer, **fields: Any) -> str:
    """Create a connector on ``server``'s ``/items``; its id."""
    source = http_source(server, headers={"Authorization": SECRET})
    c = await d.daemon.create_connector({"name": name, "source": source, **fields})
    return c.id


async def sync_to_the_end(d: Dashboard, connector_id: str) -> None:
    await d.daemon.trigger_sync(connector_id)
    await d.daemon.wait_run(connector_id)


async def test_the_assets_are_public_and_carry_a_strict_csp(
    start_dashboard: StartDashboard,
) -> None:
    d = await start_dashboard(token=TOKEN)
    root = d.url.removesuffix("/ui/")
    async with aiohttp.ClientSession() as http:
        for name, media_type in [
            ("", "text/html"),
            ("index.html", "text/html"),
            ("app.js", "text/javascript"),
            ("app.css", "text/css"),
        ]:
            async with http.get(d.url + name) as reply:
                assert reply.status == 200, name
                assert reply.content_type == media_type
                assert reply.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
                etag = reply.headers["ETag"]
            async with http.get(d.url + name, headers={"If-None-Match": etag}) as again:
                assert again.status == 304
        async with http.get(f"{root}/ui", allow_redirects=False) as reply:
            assert (reply.status, reply.headers["Location"]) == (302, "ui/")
        async with http.get(f"{d.url}secrets.txt") as reply:
            assert reply.status == 404
        # The data stays behind the token.
        async with http.get(f"{root}/connectors") as reply:
            assert reply.status == 401


async def test_the_list_shows_connectors_and_one_connector_its_details(
    dashboard: Dashboard, page: Page, screenshots: Path
) -> None:
    d = dashboard
    async with SourceServer(25) as done, SourceServer(60) as slow:
        tickets = await create(d, "tickets", done, sync_schedule="*/15 * * * *")
        await sync_to_the_end(d, tickets)
        await d.daemon.wait_documents(tickets, lambda n: n[DocStatus.INDEXED] == 25)
        broken = await d.daemon.create_connector(
            {"name": "legacy", "source": {**http_source(done), "url": f"{done.url}/gone"}}
        )
        await sync_to_the_end(d, broken.id)
        users = await create(d, "users", done)
        await d.daemon.update_connector(users, {"status": "paused"})
        orders = await create(d, "orders", slow, indexer={"type": "hold"})
        slow.hang_on(SourceServer.cursor_for(2))
        await d.daemon.trigger_sync(orders)
        await slow.requested(SourceServer.cursor_for(2)).wait()

        response = await page.goto(d.url)
        assert response is not None
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY

        rows = page.locator("#connectors tr")
        await expect(rows).to_have_count(4)
        names = [await r.locator("[data-k=name]").inner_text() for r in await rows.all()]
        assert names == ["legacy", "orders", "tickets", "users"]
        row = page.locator(f"#connectors tr[data-id='{tickets}']")
        await expect(row.locator("[data-k=status]")).to_have_text("active")
        await expect(row.locator("[data-k=sync]")).to_have_text("idle")
        await expect(row.locator("[data-k=progress]")).to_have_text("3 pages · 25 docs")
        await expect(row.locator("[data-status=indexed]")).to_have_text("25 indexed")
        await expect(row.locator("[data-k=next-run]")).to_contain_text("in ")
        await expect(row.locator("[data-k=last-synced]")).to_contain_text("ago")
        running = page.locator(f"#connectors tr[data-id='{orders}']")
        await expect(running.locator("[data-k=sync]")).to_have_text("running")
        await expect(running.locator("[data-k=progress]")).to_have_text("2 pages · 20 docs")
        failed = page.locator(f"#connectors tr[data-id='{broken.id}']")
        await expect(failed.locator("[data-k=status]")).to_have_text("error")
        await expect(failed.locator("[data-k=last-error]")).to_contain_text("404")
        paused = page.locator(f"#connectors tr[data-id='{users}']")
        await expect(paused.locator("[data-k=status]")).to_have_text("paused")
        await page.screenshot(path=screenshots / "list.png")

        await row.locator("[data-k=name] a").click()
        await expect(page.locator("#c-name")).to_have_text("tickets")
        await expect(page.locator("#c-runs tr[data-outcome=succeeded]")).to_have_count(1)
        await expect(page.locator("#c-runs tr").first).to_contain_text("manual")
        config = page.locator("#c-config")
        await expect(config).to_contain_text('"Authorization": "***"')
        await expect(config).to_contain_text(done.items_url)
        assert "sup3r-s3cret" not in await page.content()
        await expect(page.locator("#act-sync")).to_be_enabled()
        await expect(page.locator("#act-abort")).to_be_disabled()
        await page.screenshot(path=screenshots / "connector.png")

        await page.locator("a[data-nav=daemon]").click()
        await expect(page.locator("#d-ready [data-k=store]")).to_have_text("ok")
        await expect(page.locator("#d-instances")).to_contain_text(d.daemon.owner)
        await expect(page.locator("#d-version")).not_to_have_text("—")
        await page.screenshot(path=screenshots / "daemon.png")


async def test_the_config_shows_the_auth_shape_and_no_secret(
    dashboard: Dashboard, page: Page
) -> None:
    d = dashboard
    async with SourceServer(1) as server:
        auth = {
            "type": "oauth2",
            "grant": "client_credentials",
            "token_url": f"{server.url}/token",
            "client_id": "canary-client-id",
            "client_secret": "canary-client-secret",
            "scopes": ["tickets.read"],
        }
        c = await d.daemon.create_connector(
            {"name": "oauth", "source": {**http_source(server), "auth": auth}}
        )
        await page.goto(f"{d.url}#/c/{c.id}")
        config = page.locator("#c-config")
        await expect(config).to_contain_text('"grant": "client_credentials"')
        await expect(config).to_contain_text(f'"token_url": "{server.url}/token"')
        await expect(config).to_contain_text('"client_secret": "***"')
        await expect(config).to_contain_text('"client_id": "***"')
        await expect(config).to_contain_text('"tickets.read"')
        assert "canary" not in await page.content()


async def without_events(page: Page) -> None:
    """Make ``/events`` answer 404 to the page, as a daemon without it does."""

    async def absent(route: Route) -> None:
        await route.fulfill(status=404, json={"detail": "Not Found"})

    await page.route("**/events*", absent)


@pytest.mark.parametrize("feed", ["events", "polling"])
async def test_progress_advances_without_reloading(
    dashboard: Dashboard, page: Page, feed: str
) -> None:
    d = dashboard
    if feed == "polling":
        await without_events(page)
    async with SourceServer(50) as server:
        connector_id = await create(d, "tickets", server)
        await page.goto(f"{d.url}#/c/{connector_id}")
        await expect(page.locator("#c-sync")).to_have_text("idle")
        mode = "live" if feed == "events" else "polling"
        await expect(page.locator("#live")).to_have_attribute("data-mode", mode)
        await page.evaluate("window.notReloaded = true")

        # The source answers one page at a time, when the test lets it.
        server.hang_on(SourceServer.cursor_for(1))
        await page.locator("#act-sync").click()
        await server.requested(SourceServer.cursor_for(1)).wait()
        await expect(page.locator("#c-sync")).to_have_text("running")
        await expect(page.locator("#c-pages")).to_have_text("1")
        await expect(page.locator("#c-docs-seen")).to_have_text("10")
        # Polling sees a change within 2 s: one more step is enough there.
        for page_index in (2, 3) if feed == "events" else (2,):
            server.release()
            server.hang_on(SourceServer.cursor_for(page_index))
            await server.requested(SourceServer.cursor_for(page_index)).wait()
            await expect(page.locator("#c-pages")).to_have_text(str(page_index))
            await expect(page.locator("#c-docs-seen")).to_have_text(str(page_index * 10))
        server.release()
        await d.daemon.wait_run(connector_id)
        await expect(page.locator("#c-sync")).to_have_text("idle")
        await expect(page.locator("#c-pages")).to_have_text("5")
        await expect(page.locator("#c-runs tr[data-outcome=succeeded]")).to_have_count(1)
        assert await page.evaluate("window.notReloaded") is True


async def test_the_abort_button_stops_a_run_and_failed_documents_can_be_retried(
    dashboard: Dashboard, page: Page
) -> None:
    d = dashboard
    async with SourceServer(30) as server:
        connector_id = await create(d, "tickets", server, indexer={"type": "hold"})
        server.hang_on(SourceServer.cursor_for(1))
        await page.goto(f"{d.url}#/c/{connector_id}")
        await page.locator("#act-sync").click()
        await server.requested(SourceServer.cursor_for(1)).wait()
        await expect(page.locator("#c-sync")).to_have_text("running")
        await expect(page.locator("#act-delete")).to_be_disabled()

        await page.locator("#act-abort").click()
        await expect(page.locator("#c-sync")).to_have_text("idle")
        shown = await d.daemon.get_connector(connector_id)
        assert (shown.sync_status.value, shown.status.value) == ("idle", "active")
        await d.daemon.wait_run(connector_id)
        [run], _ = await d.daemon.list_runs(connector_id)
        assert run.outcome is RunOutcome.ABORTED
        await expect(page.locator("#c-runs tr[data-outcome=aborted]")).to_have_count(1)
        await expect(page.locator("#act-abort")).to_be_disabled()

        # The first page's documents were failed by the abort: listed with their error.
        failed = page.locator("#c-failed tr")
        await expect(failed).to_have_count(10)
        await expect(failed.first).to_contain_text("Aborted")
        retry = page.locator("#act-retry")
        await expect(retry).to_have_text("Retry failed (10)")
        await retry.click()
        await expect(page.locator("#notice")).to_have_text("10 failed documents re-queued")
        await expect(page.locator("#c-failed")).to_contain_text("No failed documents")
        await expect(retry).to_be_disabled()


async def test_pause_resume_and_delete_with_confirmation(dashboard: Dashboard, page: Page) -> None:
    d = dashboard
    async with SourceServer(5) as server:
        connector_id = await create(d, "tickets", server)
        await page.goto(f"{d.url}#/c/{connector_id}")
        pause = page.locator("#act-pause")
        await expect(pause).to_have_text("Pause")
        await pause.click()
        await expect(page.locator("#c-status")).to_have_text("paused")
        await expect(page.locator("#act-sync")).to_be_disabled()
        assert (await d.daemon.get_connector(connector_id)).status.value == "paused"
        await expect(pause).to_have_text("Resume")
        await pause.click()
        await expect(page.locator("#c-status")).to_have_text("active")
        await expect(page.locator("#act-sync")).to_be_enabled()

        dialog = page.locator("#confirm-delete")
        await page.locator("#act-delete").click()
        await expect(dialog).to_be_visible()
        await expect(dialog).to_contain_text("Delete tickets")
        await page.locator("#del-cancel").click()
        await expect(dialog).to_be_hidden()
        assert (await d.daemon.get_connector(connector_id)).status.value == "active"

        await page.locator("#act-delete").click()
        await page.locator("#del-ok").click()
        await d.daemon.wait_deleted(connector_id)
        await expect(page.locator("#view-list")).to_be_visible()
        await expect(page.locator("#connectors tr")).to_have_count(0)
        await expect(page.locator("#list-empty")).to_be_visible()


async def test_with_a_token_the_page_asks_for_it_and_shows_no_data_before(
    start_dashboard: StartDashboard, page: Page, screenshots: Path
) -> None:
    d = await start_dashboard(token=TOKEN)
    async with SourceServer(5) as server:
        await create(d, "confidential-tickets", server)
        await page.goto(d.url)
        await expect(page.locator("#login-form")).to_be_visible()
        await expect(page.locator("#main")).to_be_hidden()
        assert "confidential-tickets" not in await page.content()
        await page.screenshot(path=screenshots / "token.png")

        await page.locator("#token").fill("wrong-token")
        await page.locator("#login-form button").click()
        await expect(page.locator("#login-error")).to_have_text("Token refused")
        await expect(page.locator("#main")).to_be_hidden()
        assert "confidential-tickets" not in await page.content()
        assert await page.evaluate("sessionStorage.length") == 0

        await page.locator("#token").fill(TOKEN)
        await page.locator("#login-form button").click()
        await expect(page.locator("#connectors tr")).to_have_count(1)
        await expect(page.locator("#connectors")).to_contain_text("confidential-tickets")
        await expect(page.locator("#login")).to_be_hidden()

        # Kept for the tab: a reload does not ask again. Forgetting it removes every datum.
        await page.reload()
        await expect(page.locator("#connectors")).to_contain_text("confidential-tickets")
        await page.locator("#connectors a").click()
        await expect(page.locator("#c-name")).to_have_text("confidential-tickets")
        await page.locator("#signout").click()
        await expect(page.locator("#login-form")).to_be_visible()
        await expect(page.locator("#login-error")).to_be_hidden()
        assert "confidential-tickets" not in await page.content()


async def test_the_stream_reconnects_and_resumes_with_the_last_event_id(
    dashboard: Dashboard, page: Page
) -> None:
    d = dashboard
    streams: list[Request] = []
    page.on("request", lambda r: streams.append(r) if "/events" in r.url else None)
    daemon_port = int(d.url.split(":")[-1].split("/")[0])
    async with SourceServer(5) as server, Proxy(daemon_port) as proxy:
        await page.goto(f"http://127.0.0.1:{proxy.port}/ui/")
        await expect(page.locator("#live")).to_have_attribute("data-mode", "live")
        await create(d, "first", server)
        await expect(page.locator("#connectors")).to_contain_text("first")
        assert "last-event-id" not in await streams[0].all_headers()

        proxy.cut()  # the network drops the stream
        await create(d, "second", server)
        await expect(page.locator("#connectors")).to_contain_text("second")
        await expect(page.locator("#live")).to_have_attribute("data-mode", "live")
        assert len(streams) >= 2
        resumed = (await streams[-1].all_headers()).get("last-event-id", "")
        assert re.fullmatch(r".+:\d+", resumed), resumed


async def test_a_waiting_run_shows_what_it_waits_for(dashboard: Dashboard, page: Page) -> None:
    d = dashboard
    async with SourceServer(5) as server:
        server.fail_next(429, retry_after=30)
        connector_id = await create(d, "tickets", server, retry_on_status=[429])
        await page.goto(d.url)
        await d.daemon.trigger_sync(connector_id)
        await d.daemon.wait_connector(connector_id, lambda c: c.waiting is not None)
        row = page.locator(f"#connectors tr[data-id='{connector_id}']")
        # A 429 with Retry-After holds every request to the host (DESIGN.md §8).
        await expect(row.locator("[data-k=sync]")).to_contain_text("waiting: host_cooldown")
        await expect(row.locator("[data-k=sync]")).to_contain_text(re.compile(r"until in \d+ s"))
        await row.locator("[data-k=name] a").click()
        await expect(page.locator("#c-waiting")).to_contain_text("host_cooldown until in")
        await page.locator("#act-abort").click()
        await expect(page.locator("#c-sync")).to_have_text("idle")
        await expect(page.locator("#c-waiting")).to_have_text("—")
