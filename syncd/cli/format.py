"""How the ``syncd`` command shows what the API answers: tables, a connector, a preview."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

IDS_SHOWN = 20  # external ids listed per page and kind by `preview`; the rest are counted


def describe_preview(answer: Mapping[str, Any]) -> str:
    """A preview's answer as ``preview`` prints it: the first request, then per page its
    counts, its ids (new and changed ones for an existing connector) and rejected records."""
    lines: list[str] = []
    request = answer.get("request")
    if isinstance(request, Mapping):
        lines.append(f"{request.get('method')} {request.get('url')}")
        lines.extend(f"  {k}: {v}" for k, v in (request.get("headers") or {}).items())
        if request.get("body") is not None:
            lines.append(f"  body: {json.dumps(request['body'], ensure_ascii=False)}")
    for number, page in enumerate(answer.get("pages") or (), start=1):
        ids, rejected = page.get("ids") or [], page.get("rejected") or []
        line = f"page {number}: {page.get('records')} records, {len(ids)} ids"
        if rejected:
            line += f", {len(rejected)} rejected"
        lines.append(f"{line}; next cursor: {cell(page.get('next_cursor'))}")
        if page.get("reason"):
            lines.append(
                f"  {'continues' if page.get('next_cursor') else 'ends'}: {page['reason']}"
            )
        lines.extend(f"  warning: {w}" for w in page.get("warnings") or ())
        if "new" in page:
            lines.append(f"  new {ids_line(page.get('new'))}")
            lines.append(f"  changed {ids_line(page.get('changed'))}")
            lines.append(f"  unchanged {len(page.get('unchanged') or ())}")
        elif ids:
            lines.append(f"  ids {ids_line(ids)}")
        lines.extend(f"  rejected record {r.get('index')}: {r.get('reason')}" for r in rejected)
        for doc_id, shape in zip(ids, page.get("documents") or (), strict=False):
            lines.append(f"  document {doc_id}: {json.dumps(shape, ensure_ascii=False)}")
    if not answer.get("pages"):
        lines.append("no page fetched")
    return "".join(line + "\n" for line in lines)


def ids_line(ids: Sequence[str] | None) -> str:
    """``n: a, b, …`` with at most :data:`IDS_SHOWN` ids written out."""
    ids = list(ids or ())
    if not ids:
        return "0"
    shown = ", ".join(ids[:IDS_SHOWN])
    more = len(ids) - IDS_SHOWN
    return f"{len(ids)}: {shown}" + (f", … ({more} more)" if more > 0 else "")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under headers in aligned columns (``None`` shown as ``-``)."""
    cells = [list(headers), *([cell(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = (
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
    return "\n".join(lines) + "\n"


def describe_connector(connector: Mapping[str, Any]) -> str:
    """A connector as ``key: value`` lines, the way ``show`` prints it."""
    progress = connector.get("progress") or {}
    waiting = connector.get("waiting")
    documents = connector.get("documents") or {}
    fields: list[tuple[str, Any]] = [
        ("id", connector.get("id")),
        ("name", connector.get("name")),
        ("status", connector.get("status")),
        ("sync status", connector.get("sync_status")),
        ("last error", connector.get("last_error")),
        ("run id", connector.get("run_id")),
        ("sync started", ts(connector.get("sync_started_at"))),
        ("sync owner", connector.get("sync_owner")),
        ("heartbeat", ts(connector.get("sync_heartbeat_at"))),
        ("progress", f"{progress.get('pages', 0)} pages, {progress.get('documents', 0)} documents"),
        (
            "waiting",
            f"{waiting.get('reason')} until {ts(waiting.get('until'))}"
            if isinstance(waiting, Mapping)
            else None,
        ),
        ("last synced", ts(connector.get("last_synced_at"))),
        ("schedule", schedule_text(connector)),
        ("next run", ts(next_run(connector))),
        ("documents", ", ".join(f"{k} {v}" for k, v in documents.items()) or None),
        ("deletions held", connector.get("deletions_held") or None),
        ("missed", _awaiting(connector.get("documents_awaiting_confirmation"))),
        ("source", connector.get("source")),
        ("indexer", connector.get("indexer")),
        ("page retries", connector.get("page_retries")),
        ("retry backoff", connector.get("page_retry_backoff")),
        ("throttle", connector.get("throttle_seconds")),
        ("retry on status", connector.get("retry_on_status")),
        ("created", ts(connector.get("created_at"))),
        ("updated", ts(connector.get("updated_at"))),
    ]
    width = max(len(k) for k, _ in fields) + 1
    return "".join(f"{(k + ':').ljust(width)}  {cell(v)}\n" for k, v in fields)


def describe_state(state: Mapping[str, Any]) -> str:
    """A connector's crawl state (``GET /connectors/{id}/state``) as ``key: value`` lines,
    the way ``state`` prints it."""
    mark_set = None
    if state.get("mark_set_by") == "crawl":
        mark_set = (
            f"{ts(state.get('mark_set_at'))} by crawl {state.get('mark_crawl_id')} "
            f"(run {state.get('mark_run_id')})"
        )
    elif state.get("mark_set_by") == "user":
        mark_set = f"{ts(state.get('mark_set_at'))} by hand"
    crawl = state.get("crawl")
    in_progress = None
    if isinstance(crawl, Mapping):
        held = ", resume cursor held" if crawl.get("resume_cursor_held") else ""
        in_progress = (
            f"{crawl_text(crawl)}, id {crawl.get('id')}, started "
            f"{ts(crawl.get('started_at'))}{held}"
        )
    nxt = state.get("next_crawl") or {}
    resumes = ", resuming the crawl in progress" if nxt.get("resumes") else ""
    fields: list[tuple[str, Any]] = [
        ("incremental", "yes" if state.get("incremental") else "no (every crawl is full)"),
        ("mark", state.get("mark")),
        ("mark set", mark_set),
        ("crawl", in_progress),
        ("next crawl", f"{crawl_text(nxt)}{resumes}"),
        ("last full crawl", ts(state.get("last_full_crawl_at"))),
        ("awaiting confirmation", state.get("documents_awaiting_confirmation") or None),
    ]
    width = max(len(k) for k, _ in fields) + 1
    return "".join(f"{(k + ':').ljust(width)}  {cell(v)}\n" for k, v in fields)


def crawl_text(crawl: Mapping[str, Any]) -> str:
    """``full crawl``, ``incremental crawl``, ``backfill from A to B`` (or ``from A``): a
    crawl's mode and window (``{"mode", "since", "until"}``)."""
    mode = str(crawl.get("mode"))
    if mode != "backfill":
        return f"{mode} crawl"
    until = crawl.get("until")
    window = f"from {cell(crawl.get('since'))}" + (
        f" to {cell(until)}" if until is not None else ""
    )
    return f"backfill {window}"


def _awaiting(count: Any) -> str | None:
    """The documents the last complete full crawl missed that await confirmation, if any."""
    if not isinstance(count, int) or count <= 0:
        return None
    return f"{count} document{'s' if count != 1 else ''} awaiting confirmation"


def next_run(connector: Mapping[str, Any]) -> Any:
    """The connector's next scheduled run, or ``None`` when the scheduler will not start
    it (paused or being deleted: ``next_run_at`` is kept for when it is resumed)."""
    if connector.get("status") in ("paused", "deleting"):
        return None
    return connector.get("next_run_at")


def workers_text(workers: Any) -> str:
    """``busy/concurrency`` of a ``workers`` object of ``GET /status``."""
    w = workers if isinstance(workers, Mapping) else {}
    return f"{w.get('busy', 0)}/{w.get('concurrency', 0)}"


def schedule_text(connector: Mapping[str, Any]) -> str | None:
    cron, zone = connector.get("sync_schedule"), connector.get("sync_timezone")
    return f"{cron} ({zone})" if cron and zone else cron


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value.replace("\n", " ")
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def short(value: Any, width: int) -> str | None:
    if value is None:
        return None
    text = str(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def ts(value: Any) -> str | None:
    """An API timestamp, compact and in UTC (``2024-05-01 12:00:03Z``); as is if unparsable."""
    if value is None:
        return None
    parsed = parse_ts(value)
    return str(value) if parsed is None else f"{parsed:%Y-%m-%d %H:%M:%S}Z"


def loop_lag_text(seconds: Any) -> str:
    """An event loop's lag of ``GET /status`` in milliseconds (``-`` from a daemon that does
    not report it)."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "-"
    return f"{seconds * 1000:.1f} ms"


def describe_status(status: Mapping[str, Any], now: datetime) -> str:
    """``GET /status`` the way ``status`` prints it: the instance that answered, then a
    table of every instance heard from lately."""
    workers = status.get("workers") or {}
    started = parse_ts(status.get("started_at"))
    up = f" (up {duration((now - started).total_seconds())})" if started else ""
    fields: list[tuple[str, Any]] = [
        ("version", status.get("version")),
        ("instance", status.get("instance_id")),
        ("owner", status.get("owner")),
        ("started", f"{ts(status.get('started_at'))}{up}"),
        ("workers", f"{workers.get('busy', 0)} of {workers.get('concurrency', 0)} busy"),
        ("queue", f"{(status.get('queue') or {}).get('depth', 0)} documents waiting"),
        ("running syncs", status.get("running_syncs", 0)),
        ("loop lag", loop_lag_text(status.get("loop_lag_seconds"))),
    ]
    width = max(len(k) for k, _ in fields) + 1
    text = "".join(f"{(k + ':').ljust(width)}  {cell(v)}\n" for k, v in fields)
    rows = [
        [
            i.get("instance_id"),
            i.get("owner"),
            i.get("version"),
            ts(i.get("started_at")),
            ts(i.get("heartbeat_at")),
            i.get("running_syncs"),
            workers_text(i.get("workers")),
            loop_lag_text(i.get("loop_lag_seconds")),
        ]
        for i in status.get("instances") or ()
    ]
    headers = ["INSTANCE", "OWNER", "VERSION", "STARTED", "HEARTBEAT", "SYNCS", "WORKERS"]
    headers.append("LOOP LAG")
    return text + "\n" + render_table(headers, rows)


def describe_document(document: Mapping[str, Any]) -> str:
    """A document as ``key: value`` lines, then its payload as indented JSON."""
    fields: list[tuple[str, Any]] = [
        ("external id", document.get("external_id")),
        ("status", document.get("status")),
        ("error", document.get("error")),
        ("attempts", document.get("attempts")),
        ("content hash", document.get("content_hash")),
        ("created", ts(document.get("created_at"))),
        ("updated", ts(document.get("updated_at"))),
        ("indexed", ts(document.get("indexed_at"))),
    ]
    width = max(len(k) for k, _ in fields) + 1
    text = "".join(f"{(k + ':').ljust(width)}  {cell(v)}\n" for k, v in fields)
    payload = json.dumps(document.get("payload"), indent=2, ensure_ascii=False)
    return f"{text}payload:\n{payload}\n"


BAR_WIDTH = 20  # cells of the progress bar of a run whose total is unknown
_BLOCK = 4  # cells of the block that moves to and fro in it


def progress_bar(
    *, pages: int, documents: int, elapsed: float, frame: int, width: int = BAR_WIDTH
) -> str:
    """One frame of the progress of a run whose total is unknown: a block moving to and
    fro (``frame`` is the redraw's number), pages, documents, their rate and the time
    elapsed: ``[  ====    ] 3 pages  250 documents  41.7 docs/s  0:06``."""
    travel = max(1, width - _BLOCK)
    at = frame % (2 * travel)
    at = at if at <= travel else 2 * travel - at
    bar = " " * at + "=" * _BLOCK + " " * (width - _BLOCK - at)
    rate = f"{documents / elapsed:.1f} docs/s" if elapsed >= 1 else "- docs/s"
    return f"[{bar[:width]}] {pages} pages  {documents} documents  {rate}  {duration(elapsed)}"


def duration(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on (negative counts as zero)."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
