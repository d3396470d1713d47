"""``syncd sync --follow``: progress of a run until it is over, from the daemon's events
stream (``GET /events``), or by polling when the daemon offers none."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Mapping
from datetime import UTC, datetime
from itertools import count
from typing import Any, TextIO

import aiohttp
from yarl import URL

from syncd.cli.client import ApiError, Client
from syncd.cli.format import parse_ts, progress_bar

FOLLOW_INTERVAL = 0.2  # seconds between progress polls of `sync --follow`
OUTCOME_WAIT = 10.0  # seconds `--follow` waits for the run row to record its outcome
EVENTS_SILENCE = 60.0  # seconds without a byte (the daemon pings every 15) = a lost stream


async def follow(
    api: Client,
    cid: str,
    run_id: str,
    stdout: TextIO,
    stderr: TextIO,
    *,
    interval: float,
    quiet: bool,
) -> dict[str, Any]:
    """Show progress until run ``run_id`` is over; return its run row."""
    out = stdout
    tty = out.isatty() and not quiet
    frames = count()
    followed = time.monotonic()
    last: str | None = None
    try:
        async with contextlib.aclosing(_connector_updates(api, cid, interval)) as updates:
            async for connector in updates:
                if connector.get("run_id") != run_id or connector.get("sync_status") != "running":
                    break
                now = datetime.now(UTC)
                line = _progress_line(connector, now, countdown=tty)
                if tty:
                    # One line redrawn in place; \x1b[K clears what a longer line left behind.
                    bar = _bar(connector, now, next(frames), time.monotonic() - followed)
                    out.write(f"\r{bar}\x1b[K")
                    out.flush()
                elif not quiet and line != last:
                    out.write(line + "\n")
                    out.flush()
                last = line
    except asyncio.CancelledError:
        stderr.write(f"\nstopped following; run {run_id} goes on in the daemon\n")
        raise
    if tty and last is not None:
        out.write("\r\x1b[K")
    return await _finished_run(api, cid, run_id, interval)


async def _connector_updates(
    api: Client, cid: str, interval: float
) -> AsyncGenerator[dict[str, Any], None]:
    """The connector's state as it changes: from ``GET /events`` (the last state again
    every ``interval`` of silence, for the countdown of a wait), else — a daemon without the
    stream, or once the stream ends — by polling every ``interval``."""
    response = await _open_events(api, cid)
    if response is not None:
        states: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        reader = asyncio.create_task(
            _read_connector_events(response, cid, states), name=f"follow-events:{cid}"
        )
        try:
            latest: dict[str, Any] | None = None
            while True:
                try:
                    state = await asyncio.wait_for(states.get(), interval)
                except TimeoutError:
                    state = latest  # nothing new: the same state, redrawn
                else:
                    if state is None:
                        break  # the stream ended (a daemon stopping): poll from here on
                    latest = state
                if state is not None:
                    yield state
        finally:
            reader.cancel()
            response.close()
    while True:
        yield await api.get_connector(cid)
        await asyncio.sleep(interval)


async def _open_events(api: Client, cid: str) -> aiohttp.ClientResponse | None:
    """The open ``GET /events`` stream of one connector, or ``None`` when the daemon does
    not offer it (then the caller polls)."""
    # The client's session carries the token and the unix socket; Client has no streaming
    # call (yet), hence its private parts here.
    session, base = api._session, api._base
    if session is None:
        return None
    url = URL(str(base).rstrip("/") + "/events", encoded=True).with_query(connector_id=cid)
    try:
        response = await session.get(
            url,
            headers={"Accept": "text/event-stream"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=EVENTS_SILENCE),
        )
    except (aiohttp.ClientError, TimeoutError):
        return None
    if response.status != 200 or response.content_type != "text/event-stream":
        response.close()
        return None
    return response


async def _read_connector_events(
    response: aiohttp.ClientResponse, cid: str, states: asyncio.Queue[dict[str, Any] | None]
) -> None:
    """Put the data of each ``connector`` event of ``cid`` in ``states``; ``None`` at the
    end of the stream."""
    kind, data = "message", []
    try:
        async for raw in response.content:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith(":"):
                continue  # a ping
            if line:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    kind = value
                elif name == "data":
                    data.append(value)
                continue
            if kind == "connector" and data:
                state = json.loads("\n".join(data))
                if isinstance(state, dict) and state.get("id") == cid:
                    states.put_nowait(state)
            kind, data = "message", []
    except (aiohttp.ClientError, TimeoutError, ValueError):
        pass  # a lost stream: the caller polls
    finally:
        states.put_nowait(None)


async def _finished_run(api: Client, cid: str, run_id: str, interval: float) -> dict[str, Any]:
    """The run row of ``run_id`` once it records an outcome (or after ``OUTCOME_WAIT``)."""
    waited = 0.0
    while True:
        run = await _find_run(api, cid, run_id)
        if run.get("outcome") != "running" or waited >= OUTCOME_WAIT:
            return run
        await asyncio.sleep(interval)
        waited += interval


async def _find_run(api: Client, cid: str, run_id: str) -> dict[str, Any]:
    page = await api.list_runs(cid, limit=1)
    latest = page.get("data") or []
    if latest and latest[0].get("id") == run_id:
        return dict(latest[0])
    # A newer run (e.g. a scheduled one) started meanwhile: look further back.
    cursor: str | None = None
    while True:
        page = await api.list_runs(cid, cursor=cursor)
        for run in page.get("data") or ():
            if run.get("id") == run_id:
                return dict(run)
        cursor = page.get("next_cursor")
        if not cursor:
            raise ApiError(404, f"Run {run_id} not found")


def _bar(connector: Mapping[str, Any], now: datetime, frame: int, following: float) -> str:
    """The terminal's progress line: a bar moving to and fro (a crawl's total is unknown),
    pages, documents, rate, time since the run started (``following``: seconds since this
    command began to follow, when the start time is missing or ahead of this clock), and
    the wait in progress if any."""
    progress = connector.get("progress") or {}
    started = parse_ts(connector.get("sync_started_at"))
    elapsed = (now - started).total_seconds() if started is not None else -1.0
    line = progress_bar(
        pages=int(progress.get("pages") or 0),
        documents=int(progress.get("documents") or 0),
        elapsed=elapsed if elapsed >= 0 else following,
        frame=frame,
    )
    waiting = _progress_line(connector, now, countdown=True).partition("  waiting: ")[2]
    return f"{line}  waiting: {waiting}" if waiting else line


def _progress_line(connector: Mapping[str, Any], now: datetime, *, countdown: bool) -> str:
    progress = connector.get("progress") or {}
    line = f"pages {progress.get('pages', 0)}  documents {progress.get('documents', 0)}"
    waiting = connector.get("waiting")
    if isinstance(waiting, Mapping):
        line += f"  waiting: {waiting.get('reason')}"
        until = parse_ts(waiting.get("until"))
        if until is not None:
            line += f" until {until:%H:%M:%S}Z"
            if countdown:
                line += f" ({max(0.0, (until - now).total_seconds()):.0f}s)"
    return line


def outcome_line(run: Mapping[str, Any], *, indexed: bool = False) -> str:
    """What ``sync --follow`` prints of a finished run: how its crawl ended and a line per
    warning about that end, then its counts, and last the outcome alone, or ``failed:`` with
    the error (the two last lines, which scripts read, are as they were before runs said how
    their crawls ended)."""
    outcome = str(run.get("outcome"))
    summary = f"crawl ended: {run['end_reason']}\n" if run.get("end_reason") else ""
    summary += "".join(f"warning: {w}\n" for w in run.get("warnings") or ())
    summary += (
        f"run {run.get('id')}: {run.get('pages', 0)} pages, "
        f"{run.get('documents_seen', 0)} documents seen, "
        f"{run.get('documents_enqueued', 0)} {'indexed' if indexed else 'enqueued'}\n"
    )
    if outcome == "failed":
        return f"{summary}failed: {run.get('error')}"
    return summary + outcome
