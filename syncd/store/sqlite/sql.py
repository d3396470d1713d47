"""Every query of the SQLite store, each under a name (the schema's migrations live in
:mod:`syncd.store.sqlite.migrations`).

Conventions: datetimes are fixed-width ISO-8601 UTC text (so ``<`` on text is ``<`` in time),
JSON is text, enums are their string values. Lists of values travel as one JSON array
parameter expanded with ``json_each`` (no statement text built per call, no limit on the
number of values).
"""

from __future__ import annotations

from syncd.store.codec import CLAIM_COLUMNS, CONNECTOR_COLUMNS, DOCUMENT_COLUMNS, RUN_COLUMNS

# --- setup ------------------------------------------------------------------------------

PRAGMAS_PER_CONNECTION = (
    "PRAGMA foreign_keys = ON",
    # WAL + NORMAL: durable across application crashes; a power loss may lose the last
    # commits but never corrupts the file.
    "PRAGMA synchronous = NORMAL",
    # A larger page cache and in-memory temporary tables: page commits and claims touch the
    # same recent pages over and over.
    "PRAGMA cache_size = -65536",
    "PRAGMA temp_store = MEMORY",
    # Checkpoint the WAL every ~40 MB rather than every 4 MB: a crawl rewrites the same
    # index pages page after page, and each checkpoint copies them once, not once per commit.
    "PRAGMA wal_autocheckpoint = 10000",
)
JOURNAL_MODE_WAL = "PRAGMA journal_mode = WAL"

BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
PING = "SELECT 1"

# --- connectors -------------------------------------------------------------------------

_CONNECTOR_SELECT = f"SELECT {', '.join(CONNECTOR_COLUMNS)} FROM connectors"

INSERT_CONNECTOR = (
    f"INSERT INTO connectors ({', '.join(CONNECTOR_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in CONNECTOR_COLUMNS)})"
)
UPDATE_CONNECTOR = (
    "UPDATE connectors SET "
    + ", ".join(f"{c} = :{c}" for c in CONNECTOR_COLUMNS if c not in ("id", "created_at"))
    + " WHERE id = :id"
)
GET_CONNECTOR = f"{_CONNECTOR_SELECT} WHERE id = ?"
# A connector with its counts as one JSON object (``{}`` without documents): one statement.
_COUNTS_OBJECT = (
    "(SELECT json_group_object(k.status, k.n) FROM document_counts AS k "
    "WHERE k.connector_id = connectors.id) AS document_counts"
)
GET_CONNECTOR_COUNTED = (
    f"SELECT {', '.join(CONNECTOR_COLUMNS)}, {_COUNTS_OBJECT} FROM connectors WHERE id = ?"
)
# What a tick may act on: due schedules and queued triggers, each served by its index. Its
# age is the earlier of a due next_run_at and sync_queued_at: the order of admission.
_ADMISSIBLE = (
    "SELECT id, next_run_at AS age FROM connectors "
    "WHERE next_run_at <= :now AND status IN ('active', 'error') "
    "UNION ALL "
    "SELECT id, sync_queued_at AS age FROM connectors WHERE sync_queued_at IS NOT NULL"
)
COUNT_ADMISSIBLE = f"SELECT count(*) FROM (SELECT DISTINCT id FROM ({_ADMISSIBLE}) LIMIT :limit)"
ADMISSIBLE_CONNECTORS = (
    f"SELECT {', '.join('c.' + col for col in CONNECTOR_COLUMNS)} FROM connectors AS c "
    f"JOIN (SELECT id, min(age) AS age FROM ({_ADMISSIBLE}) GROUP BY id) AS a ON a.id = c.id "
    "ORDER BY a.age, c.id LIMIT :limit"
)
# Parameters: the values of CLAIM_COLUMNS in order, then the id.
CLAIM_CONNECTOR = (
    "UPDATE connectors SET " + ", ".join(f"{col} = ?" for col in CLAIM_COLUMNS) + " WHERE id = ?"
)
DELETE_CONNECTOR_DOCUMENTS = "DELETE FROM documents WHERE connector_id = ?"
DELETE_CONNECTOR_RUNS = "DELETE FROM runs WHERE connector_id = ?"
DELETE_CONNECTOR_COUNTS = "DELETE FROM document_counts WHERE connector_id = ?"
DELETE_CONNECTOR = "DELETE FROM connectors WHERE id = ?"


def list_connectors(*, by_status: bool, after: bool, counted: bool = False) -> str:
    """Connectors by id; parameters: ``[status], [after], limit``. ``counted`` adds the
    ``document_counts`` column (a JSON object, see :data:`GET_CONNECTOR_COUNTED`)."""
    where = []
    if by_status:
        where.append("status = ?")
    if after:
        where.append("id > ?")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    select = f"SELECT {', '.join(CONNECTOR_COLUMNS)}, {_COUNTS_OBJECT} FROM connectors"
    return f"{select if counted else _CONNECTOR_SELECT}{clause} ORDER BY id LIMIT ?"


# --- runs -------------------------------------------------------------------------------

_RUN_SELECT = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"

INSERT_RUN = (
    "INSERT INTO runs (id, connector_id, trigger, outcome, started_at, owner, attempt) "
    "VALUES (?, ?, ?, 'running', ?, ?, ?)"
)
END_RUN = (
    "UPDATE runs SET outcome = ?, finished_at = ?, error = ?, end_reason = ?, warnings = ? "
    "WHERE id = ? AND outcome = 'running'"
)
GET_RUN = f"{_RUN_SELECT} WHERE id = ?"
LIST_RUNS = f"{_RUN_SELECT} WHERE connector_id = ? ORDER BY id DESC LIMIT ?"
LIST_RUNS_BEFORE = f"{_RUN_SELECT} WHERE connector_id = ? AND id < ? ORDER BY id DESC LIMIT ?"

# --- run writes (fenced) ----------------------------------------------------------------

# The fence and the checkpoint in one statement: no row changed means "not the current run".
# A null crawl (a run that cannot stamp) leaves the connector's crawl as it is.
CHECKPOINT_PAGE = (
    "UPDATE connectors SET resume_cursor = ?, source_state = ?, "
    "progress_pages = progress_pages + 1, progress_documents = progress_documents + ?, "
    "sync_heartbeat_at = ?, crawl_id = COALESCE(?, crawl_id), "
    "crawl_full = COALESCE(?, crawl_full) WHERE id = ? AND run_id = ?"
)
EXISTING_DOCUMENTS = (
    "SELECT external_id, content_hash, status, error, op FROM documents "
    "WHERE connector_id = ? AND external_id IN (SELECT value FROM json_each(?))"
)
# The documents syncd.rules.plan_page picks (new, changed, failed by an abort, deleted or
# being deleted) alike become pending index operations with a clean slate (no longer held,
# no longer missed by any crawl);
# a running one loses its lease, so the worker indexing the old content cannot record a
# result for it.
# A new document of a page commit: a plain insert, never an upsert (with the update trigger
# on the table, an upsert costs each row about 2 µs more even when nothing conflicts).
INSERT_DOCUMENT = (
    "INSERT INTO documents (connector_id, external_id, status, content_hash, created_at, "
    "updated_at, attempts, payload, indexed_at, op) VALUES (?1, ?2, ?6, ?3, ?5, ?5, "
    "0, ?4, CASE WHEN ?6 = 'indexed' THEN ?5 END, 'index')"
)
# A stored document a page commit writes again (changed, or back at the source).
UPSERT_DOCUMENT = (
    f"{INSERT_DOCUMENT} ON CONFLICT (connector_id, external_id) DO UPDATE SET "
    "status = excluded.status, "
    "content_hash = excluded.content_hash, payload = excluded.payload, error = NULL, "
    "attempts = 0, lease_token = NULL, lease_until = NULL, updated_at = excluded.updated_at, "
    "indexed_at = COALESCE(excluded.indexed_at, documents.indexed_at), op = 'index', held = 0, "
    "missed = 0"
)
# The documents a page commit inserted, counted (migration 12): (connector, status, n).
COUNT_INSERTED = (
    "INSERT INTO document_counts (connector_id, status, n) VALUES (?, ?, ?) "
    "ON CONFLICT (connector_id, status) DO UPDATE SET n = n + excluded.n"
)
# What a full crawl saw: the page's external ids (a JSON array), one row per page.
SEEN_PAGE = "INSERT INTO crawl_pages (connector_id, crawl_id, ids) VALUES (?, ?, ?)"

# --- deletions (DESIGN.md §11) ----------------------------------------------------------

# Live documents not already on their way out: what a prune may delete or hold.
_PRUNABLE = "status <> 'deleted' AND NOT (op = 'delete' AND status IN ('pending', 'running'))"


def _seen(connector: str, crawl: str | None) -> str:
    """The external ids the pages of crawl ``crawl`` (every crawl kept, if ``None``) of
    connector ``connector`` saw (both parameter references). Not correlated: SQLite builds it
    once, as an index, for ``NOT IN``."""
    which = "" if crawl is None else f" AND p.crawl_id = {crawl}"
    return (
        "SELECT j.value FROM crawl_pages AS p, json_each(p.ids) AS j "
        f"WHERE p.connector_id = {connector}{which}"
    )


# A deletion: at once (?1 = 'deleted', the payload dropped) or as a pending delete operation
# (?1 = 'pending') that travels the queue like an index. Parameters: status, now, connector
# id, then the selection's own.
_MARK_DELETE = (
    "UPDATE documents SET op = 'delete', status = ?1, error = NULL, attempts = 0, held = 0, "
    "missed = 0, lease_token = NULL, lease_until = NULL, updated_at = ?2, "
    "payload = CASE WHEN ?1 = 'deleted' THEN 'null' ELSE payload END "
    f"WHERE connector_id = ?3 AND {_PRUNABLE} AND "
)
DELETE_IDS = f"{_MARK_DELETE}external_id IN (SELECT value FROM json_each(?4)) RETURNING external_id"
# What a complete crawl confirms gone (DESIGN.md §12): the prunable documents that as many
# complete crawls in a row as the connector asks (at least 1) have missed, this one
# included (COUNT_MISSED ran first). "missed > 0" lets the partial index find them.
DELETE_CONFIRMED = f"{_MARK_DELETE}missed > 0 AND missed >= ?4 RETURNING external_id"
# Held, and not seen again by a crawl begun since (its pages are the only ones kept).
DELETE_HELD = (
    f"{_MARK_DELETE}held AND external_id NOT IN ({_seen('?3', None)}) RETURNING external_id"
)
HOLD_CONFIRMED = (
    f"UPDATE documents SET held = 1 WHERE connector_id = ?1 AND {_PRUNABLE} "
    "AND missed > 0 AND missed >= ?2"
)
CLEAR_HELD = "UPDATE documents SET held = 0 WHERE connector_id = ? AND held"
# At a complete crawl's end, the count of the crawls in a row that missed each document:
# back to 0 for those it saw (and for every document when ?3 is false: nothing is counted,
# e.g. prune is off), through the partial index of the few counted; one more for the
# prunable documents it did not see (read like a prune reads them).
RESET_MISSED = (
    f"UPDATE documents SET missed = 0 WHERE connector_id = ?1 AND missed > 0 "
    f"AND (NOT ?3 OR NOT ({_PRUNABLE}) OR external_id IN ({_seen('?1', '?2')}))"
)
COUNT_MISSED = (
    f"UPDATE documents SET missed = missed + 1 WHERE connector_id = ?1 AND {_PRUNABLE} "
    f"AND external_id NOT IN ({_seen('?1', '?2')})"
)
FORGET_CRAWLS = "DELETE FROM crawl_pages WHERE connector_id = ?"
# The guard's figures: live documents, those of them the crawl did not see (less those
# being deleted already), and of those the ones it confirms gone: missed at least ?3 times
# before (the connector's prune_confirmations less one; null when that is 0: all of them).
# The first two counts read only the documents_status index (the statuses are listed:
# "<> 'deleted'" would not use it); the third reads the few pending or running documents,
# the last the few counted in the partial index of missed documents.
_LIVE = "status IN ('pending', 'running', 'indexed', 'failed') AND connector_id = ?1"
PRUNE_COUNTS = (
    f"SELECT (SELECT count(*) FROM documents WHERE {_LIVE}), "
    f"(SELECT count(*) FROM documents WHERE {_LIVE} "
    f"AND external_id NOT IN ({_seen('?1', '?2')})) - "
    "(SELECT count(*) FROM documents WHERE status IN ('pending', 'running') "
    f"AND connector_id = ?1 AND op = 'delete' AND external_id NOT IN ({_seen('?1', '?2')})), "
    "CASE WHEN ?3 > 0 THEN (SELECT count(*) FROM documents WHERE connector_id = ?1 "
    f"AND missed > 0 AND missed >= ?3 AND {_PRUNABLE} "
    f"AND external_id NOT IN ({_seen('?1', '?2')})) END"
)
RUN_PRUNED = (
    "UPDATE runs SET deleted = deleted + ?, deletions_held = deletions_held + ?, "
    "awaiting_confirmation = ? WHERE id = ?"
)
PURGE_DELETED = "DELETE FROM documents WHERE status = 'deleted' AND updated_at < ?"
# The sample of rejections is read and rewritten only when a page rejected records; a null
# sample or note leaves the column as it is.
RUN_REJECTIONS = "SELECT pages, rejections FROM runs WHERE id = ?"
RUN_PAGE = (
    "UPDATE runs SET pages = pages + 1, documents_seen = documents_seen + ?, "
    "documents_enqueued = documents_enqueued + ?, documents_rejected = documents_rejected + ?, "
    "rejections = COALESCE(?, rejections), note = COALESCE(?, note), deleted = deleted + ?, "
    "documents_filtered = documents_filtered + ? WHERE id = ?"
)
# The fence of a run's writes that do not checkpoint (e.g. its requeue of aborted documents):
# read under the write lock, so an abort cannot slip in before the write.
IS_CURRENT_RUN = "SELECT 1 FROM connectors WHERE id = ? AND run_id = ?"
REPORT = (
    "UPDATE connectors SET sync_heartbeat_at = ?, waiting_reason = ?, waiting_until = ? "
    "WHERE id = ? AND run_id = ?"
)

# --- documents --------------------------------------------------------------------------

_DOCUMENT_COLUMNS = ", ".join(DOCUMENT_COLUMNS)

GET_DOCUMENT = (
    f"SELECT {_DOCUMENT_COLUMNS}, payload FROM documents WHERE connector_id = ? AND external_id = ?"
)


def list_documents(*, by_status: bool, after: bool) -> str:
    """A connector's documents by external id; parameters: ``[status], connector_id,
    [after], limit``. With a status the ``documents_status`` index serves order and filter."""
    where = ["connector_id = ?"]
    if by_status:
        where.insert(0, "status = ?")
    if after:
        where.append("external_id > ?")
    return (
        f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE {' AND '.join(where)} "
        "ORDER BY external_id LIMIT ?"
    )


# The counters (migration 8), never the documents themselves.
DOCUMENT_COUNTS = "SELECT status, n FROM document_counts WHERE connector_id = ?"
PENDING_DOCUMENTS = (
    "SELECT connector_id, external_id FROM documents WHERE status = 'pending' "
    "ORDER BY connector_id, external_id LIMIT ?"
)
PENDING_DOCUMENTS_AFTER = (
    "SELECT connector_id, external_id FROM documents WHERE status = 'pending' "
    "AND (connector_id, external_id) > (?, ?) ORDER BY connector_id, external_id LIMIT ?"
)
# A pending document with a lease_until waits to be retried until then: not claimed yet.
_DOCUMENT_CLAIM = (
    "UPDATE documents SET status = 'running', lease_token = ?, lease_until = ?, "
    "attempts = attempts + 1, updated_at = ? WHERE status = 'pending' AND connector_id = ? "
    "AND external_id IN (SELECT value FROM json_each(?)) "
    "AND (lease_until IS NULL OR lease_until <= ?) "
)
CLAIM_DOCUMENTS = f"{_DOCUMENT_CLAIM}RETURNING {_DOCUMENT_COLUMNS}, payload"
CLAIM_DOCUMENTS_NO_PAYLOAD = f"{_DOCUMENT_CLAIM}RETURNING {_DOCUMENT_COLUMNS}"
# The stamp a worker compares with the connector it holds (Store.claim_for_delivery), read
# in the claim's transaction: in RETURNING, SQLite would read it once per row.
CONNECTOR_STAMP = "SELECT status, updated_at FROM connectors WHERE id = ?"
# One statement for every result of a batch that shares its status and error (usually the
# whole batch): each id one probe of the status index.
FINISH_DOCUMENTS = (
    "UPDATE documents SET status = ?1, error = ?2, "
    "indexed_at = CASE WHEN ?1 = 'indexed' THEN ?3 ELSE indexed_at END, updated_at = ?3, "
    "lease_token = NULL, lease_until = NULL, "
    "payload = CASE WHEN ?1 = 'deleted' THEN 'null' ELSE payload END "
    "WHERE status = 'running' AND connector_id = ?4 "
    "AND external_id IN (SELECT value FROM json_each(?5)) AND lease_token = ?6"
)
EXTEND_LEASES = (
    "UPDATE documents SET lease_until = ? "
    "WHERE status = 'running' AND connector_id = ? AND lease_token = ?"
)
RELEASE_EXPIRED_LEASES = (
    "UPDATE documents SET status = 'pending', lease_token = NULL, lease_until = NULL, "
    "updated_at = ? WHERE status = 'running' AND lease_until <= ? "
    "RETURNING connector_id, external_id"
)
# Documents whose transient failure is retried: pending again, with the error, waiting.
RETRY_DOCUMENTS = (
    "UPDATE documents SET status = 'pending', error = ?1, lease_until = ?2, updated_at = ?3, "
    "lease_token = NULL WHERE status = 'running' AND connector_id = ?4 "
    "AND external_id IN (SELECT value FROM json_each(?5)) AND lease_token = ?6"
)
RELEASE_DUE_RETRIES = (
    "UPDATE documents SET lease_until = NULL, updated_at = ? "
    "WHERE status = 'pending' AND lease_until <= ? RETURNING connector_id, external_id"
)
FAIL_DOCUMENTS = (
    "UPDATE documents SET status = 'failed', error = ?, lease_token = NULL, "
    "lease_until = NULL, updated_at = ? "
    "WHERE status IN (SELECT value FROM json_each(?)) AND connector_id = ?"
)
REQUEUE_DOCUMENTS = (
    "UPDATE documents SET status = 'pending', attempts = 0, error = NULL, updated_at = ? "
    "WHERE status = 'failed' AND connector_id = ? RETURNING external_id"
)
REQUEUE_DOCUMENTS_WITH_ERROR = (
    "UPDATE documents SET status = 'pending', attempts = 0, error = NULL, updated_at = ? "
    "WHERE status = 'failed' AND connector_id = ? AND error = ? RETURNING external_id"
)

# Metrics (syncd/observability/metrics.py): whole-store totals, one aggregate query each.
DOCUMENT_TOTALS = "SELECT status, sum(n) FROM document_counts GROUP BY status"
CONNECTOR_TOTALS = (
    "SELECT status, sync_status, count(*) FROM connectors GROUP BY status, sync_status"
)

# Instance heartbeats (GET /status).
HEARTBEAT_INSTANCE = (
    "INSERT INTO instances (owner, info, heartbeat_at) VALUES (?, ?, ?) "
    "ON CONFLICT (owner) DO UPDATE SET info = excluded.info, heartbeat_at = excluded.heartbeat_at"
)
LIST_INSTANCES = (
    "SELECT owner, info, heartbeat_at FROM instances WHERE heartbeat_at > ? ORDER BY owner"
)
REMOVE_INSTANCE = "DELETE FROM instances WHERE owner = ?"


# --- secret state -------------------------------------------------------------------------

GET_SECRET_STATE = "SELECT secret_state FROM connectors WHERE id = ?"
SET_SECRET_STATE = "UPDATE connectors SET secret_state = ? WHERE id = ?"
